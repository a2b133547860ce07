//! [`SessionLease`](harness_core::SessionLease) backends for one host: [`LocalLease`] (one
//! process: a fair FIFO per key) and [`FileLease`] (several processes: [`LocalLease`] plus
//! an advisory lock file per key).

mod file;
mod local;

pub use file::{DEFAULT_SWEEP_INTERVAL, FileLease};
pub use local::LocalLease;
