//! harness (placeholder until its issue lands).

pub mod tools;
