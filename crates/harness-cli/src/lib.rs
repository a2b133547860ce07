//! harness-cli (placeholder until its issue lands).
