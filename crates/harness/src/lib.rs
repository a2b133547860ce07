//! harness (placeholder until its issue lands).
