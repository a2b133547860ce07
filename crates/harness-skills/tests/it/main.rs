//! Integration tests of the `harness-skills` crate.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

#[cfg(feature = "git")]
mod git;
#[cfg(not(feature = "git"))]
mod without_git;
