//! harness: `HarnessAgent` and the built-in capabilities over the Harness kernel.
//!
//! Context bounding lives in [`compaction`] (summaries, argument truncation, overflow
//! recovery) and [`eviction`] (large tool results moved to files).

pub mod compaction;
pub mod eviction;
