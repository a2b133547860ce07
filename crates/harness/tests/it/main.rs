//! Integration tests of the `harness` crate.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod approval;
mod backends;
mod bring;
mod caching;
mod caller_tools;
mod capability;
mod compaction;
mod config_once;
mod config_parse;
mod control;
mod delegation;
mod doubles;
mod eviction;
mod extensions;
mod fenced_writes;
mod gate;
mod history_reader;
mod lean_request;
mod mcp;
mod memory;
mod one_pass;
mod permissions;
mod plan_mode;
mod recipe;
mod scope;
mod sessions;
mod skills;
mod state_layout;
mod structured;
mod subagents;
mod support;
mod task_list;
mod tools;
mod trust_boundary;
mod workspace;
