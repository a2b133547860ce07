//! Acceptance tests of the harness-core kernel, driven through `ReActAgent` with
//! `ScriptedModel` as the model. One module per area; shared fixtures in `support`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

mod cancel;
mod concurrency;
mod finish;
mod max_iters;
mod middleware;
mod model_errors;
mod scheduling;
mod session_state;
mod state;
mod stream;
mod support;
mod tools;
