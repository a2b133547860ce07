//! Model providers for Harness: the wire protocols behind [`harness_core::ChatModel`].
//!
//! - [`OpenAiClient`]: OpenAI Chat Completions and the servers that speak it (DashScope/Qwen,
//!   DeepSeek, vLLM, Ollama), streaming and not, with lenient decoding.
//! - [`AnthropicClient`]: Anthropic Messages, with prompt-cache breakpoints and signed
//!   thinking round-tripped.
//! - [`GeminiClient`]: the Gemini API (`generateContent` / `streamGenerateContent`), with
//!   function calling, thought signatures round-tripped and safety blocks as content filters.
//! - [`FallbackChain`]: the main model, then the models tried when it is down (outage, 5xx,
//!   rate limit, unreachable), with notices of each switch.
//! - [`Retrying`]: backoff with jitter on rate limits and transient failures, honouring
//!   `Retry-After` — the one place calls are retried.
//! - [`classify()`]: the one place an HTTP failure becomes a typed [`harness_core::ModelError`]
//!   (context overflow recognised per provider).
//! - [`ModelSpec`]: `provider:model` strings, parsed once, built with the environment the
//!   binary passes in.
//! - Token counting for budgets: [`count_tokens`] (o200k) and [`TokenCounter`] (calibrated by
//!   provider usage), both over [`harness_core::estimate_tokens`], the workspace's one estimator.
//! - Context windows: [`known_context_window`] (a table of known models) and
//!   [`WithContextWindow`] to override it; [`harness_core::ChatModel::context_window`] reports it.
//! - [`ScriptedModel`]: the test double every other crate's tests use.
//!
//! This crate holds no agent logic. Where to start: [`ModelSpec`] to get a model from a
//! string, [`ScriptedModel`] to test without a network.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use harness_core::{ChatModel, ChatRequest, Msg};
//! use harness_models::ScriptedModel;
//! use std::sync::Arc;
//!
//! let model = ScriptedModel::new().reply_tool_call("lookup", serde_json::json!({"key": "k1"}));
//! let request = ChatRequest { messages: vec![Arc::new(Msg::user("find k1"))], ..ChatRequest::default() };
//! let response = model.call(request).await?;
//! let call = response.message.tool_calls().next().map(|c| c.name.to_owned());
//! assert_eq!(call.as_deref(), Some("lookup"));
//! assert_eq!(model.request_count(), 1); // every request is recorded
//! # Ok::<_, harness_core::ModelError>(()) }).unwrap();
//! ```

mod anthropic;
mod classify;
mod fallback;
mod gemini;
mod openai;
mod retry;
mod scripted;
mod secret;
mod spec;
mod sse;
mod tokens;
mod transport;
mod window;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicClient, AnthropicConfig, DEFAULT_MAX_TOKENS};
pub use classify::{Dialect, classify};
pub use fallback::{
    FALLBACK_NOTICE, FallbackChain, FallbackEntry, FallbackNotice, FallbackObserver, falls_back, is_unreachable,
};
pub use gemini::{
    GEMINI_API_VERSION, GeminiClient, GeminiConfig, SIGNATURE_PREFIX, SKIP_SIGNATURE_VALIDATION, SYNTHETIC_ID_PREFIX,
};
pub use openai::{MaxTokensField, OpenAiClient, OpenAiConfig};
pub use retry::{DEFAULT_MAX_RETRY_TIME, RetryNotice, RetryObserver, RetryPolicy, Retrying};
pub use scripted::{Fallback, Reply, ScriptError, ScriptedError, ScriptedModel, ScriptedToolCall};
pub use secret::Secret;
pub use spec::{ModelConfigError, ModelSpec, TransportOptions, spec_variables};
pub use sse::{SseEvent, SseStream, sse_events};
pub use tokens::{TokenCounter, count_tokens, is_warm, warm_up};
pub use transport::{DEFAULT_IDLE_TIMEOUT, WireError};
pub use window::{WithContextWindow, WithVision, known_context_window};
