//! Integration tests of harness-sandbox: the namespace backend against the real kernel.
//! They run as root (as CI does) with a uid range, and fail — never skip — when a
//! prerequisite (bubblewrap, user namespaces, Landlock) is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub, dead_code)]

mod escape;
mod lifecycle;
mod manager;
mod normal_work;
mod plan_mode;
mod proxy;
mod snapshot;
mod support;
