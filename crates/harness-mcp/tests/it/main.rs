//! Integration tests of the `harness-mcp` crate.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod client;
mod resend;
mod servers;
mod spawner;
