//! Integration tests of the gateway: the real axum router on 127.0.0.1:0, driven over HTTP,
//! with a scripted model.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod approvals;
mod chromium;
mod compat;
mod control;
mod guard;
mod native;
mod openai;
mod page;
mod queue;
mod remote;
mod sdks;
mod support;
mod tasks;
mod tenancy;
