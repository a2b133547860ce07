//! harness-bench (placeholder until its issue lands).
