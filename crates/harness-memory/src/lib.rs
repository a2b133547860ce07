//! harness-memory (placeholder until its issue lands).
