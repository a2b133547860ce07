//! harness-store (placeholder until its issue lands).
