//! Integration tests of harness-memory: extraction, consolidation, the index, the tools.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod config;
mod consolidation;
mod corpus;
mod extraction;
mod quarantine;
mod search;
mod support;
mod tools;
mod watermark;
