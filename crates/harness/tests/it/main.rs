//! Integration tests of the `harness` crate.

mod compaction;
mod doubles;
mod eviction;
