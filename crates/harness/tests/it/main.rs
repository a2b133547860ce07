//! Integration tests of the harness crate (one module per area).
mod compaction;
mod eviction;
mod support;
