//! Integration tests of the `harness` binary: the real executable in a temporary workspace.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod approval_cli;
mod bring;
mod cli;
mod compat;
mod doctor;
mod json_events;
mod maintenance;
mod memory_cli;
mod memory_screen;
mod models;
mod newcomer;
mod otel;
mod parity;
mod readme;
mod replicas;
mod request_budget;
mod sandbox;
mod scope;
mod serve;
mod terminal;
mod tidy;
mod tools_cmd;
mod trust;
mod trust_boundary;
