//! Integration tests of harness-store.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod conformance;
mod inbox;
mod kv;
mod lease;
