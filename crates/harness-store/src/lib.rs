//! Durable backends for Harness.
//!
//! - [`FileStateStore`]: agent state as JSON files with compare-and-set versions (the
//!   default, one process or several on one host).
//!
//! Where to start: [`FileStateStore::new`].

mod file_state;

pub use file_state::{FileStateStore, StateLayout};
