//! normal_work
