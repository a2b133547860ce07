//! Integration tests of harness-fs: the conformance suite every backend passes, backend-specific
//! behaviour, security and the shell.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod backends;
mod conformance;
mod cross_process_cas;
mod fenced;
mod replicated;
mod security;
mod shared;
mod shell;

use harness_fs::WsPath;

/// Parses a path the test knows to be valid.
pub fn p(raw: &str) -> WsPath {
    WsPath::parse(raw).unwrap_or_else(|err| panic!("{raw}: {err}"))
}
