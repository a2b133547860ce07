//! escape
