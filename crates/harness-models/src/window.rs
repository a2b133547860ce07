//! Context windows: a table of known models, and [`WithContextWindow`] to override it.
//!
//! The table is data, matched by model name: an entry matches the name itself or the name
//! followed by `-…` (a dated or sized variant), the longest entry wins, and any
//! `vendor/` prefix is ignored. An unknown model has no window (`None`): nothing is refused
//! or compacted for its size until a window is configured. Where a family's variants
//! differ, the table holds the smallest documented value.

use async_trait::async_trait;
use harness_core::{ChatModel, ChatRequest, ModelError, ModelResponse, ModelStream};

/// Known context windows, in tokens, by model name (or name prefix ending at a `-`).
const KNOWN: &[(&str, u64)] = &[
    // OpenAI
    ("gpt-3.5-turbo", 16_385),
    ("gpt-4", 8_192),
    ("gpt-4-32k", 32_768),
    ("gpt-4-turbo", 128_000),
    ("gpt-4o", 128_000),
    ("gpt-4o-mini", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4.1-nano", 1_047_576),
    ("gpt-4.5-preview", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o3", 200_000),
    ("o3-mini", 200_000),
    ("o4-mini", 200_000),
    // Anthropic
    ("claude", 200_000),
    ("claude-2.0", 100_000),
    ("claude-instant", 100_000),
    // Google Gemini (1.5 Flash, 2.0, 2.5 and 3 take 1,048,576 input tokens; 1.5 Pro more)
    ("gemini-1.5-flash", 1_048_576),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini-2.0", 1_048_576),
    ("gemini-2.5", 1_048_576),
    ("gemini-3", 1_048_576),
    // DeepSeek
    ("deepseek-chat", 128_000),
    ("deepseek-reasoner", 128_000),
    // Qwen (DashScope)
    ("qwen-max", 32_768),
    ("qwen-plus", 131_072),
    ("qwen-turbo", 131_072),
    ("qwen-long", 10_000_000),
    ("qwen3-max", 262_144),
    ("qwen3-coder-plus", 1_048_576),
    ("qwq-plus", 131_072),
];

/// The context window of a known model, or `None`.
///
/// ```
/// use harness_models::known_context_window;
/// assert_eq!(known_context_window("gpt-4o-2024-08-06"), Some(128_000));
/// assert_eq!(known_context_window("claude-sonnet-4-5"), Some(200_000));
/// assert_eq!(known_context_window("my-finetune"), None);
/// ```
pub fn known_context_window(model: &str) -> Option<u64> {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    KNOWN
        .iter()
        .filter(|(known, _)| {
            name.strip_prefix(known)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
        })
        .max_by_key(|(known, _)| known.len())
        .map(|&(_, tokens)| tokens)
}

/// Whether an OpenAI-compatible model takes images, by its name: the OpenAI families that
/// do (`gpt-4o`, `gpt-4.1`, `gpt-4-turbo`, `gpt-5`, `o1`, `o3`, `o4`) and names that say so
/// (`vision`, `-vl`, `llava`, `pixtral`).
pub(crate) fn takes_images(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    const FAMILIES: [&str; 8] = [
        "gpt-4o",
        "gpt-4.1",
        "gpt-4-turbo",
        "gpt-5",
        "o1",
        "o3",
        "o4",
        "chatgpt-4o",
    ];
    const MARKERS: [&str; 5] = ["vision", "-vl", "llava", "pixtral", "qvq"];
    FAMILIES.iter().any(|family| {
        name.strip_prefix(family)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    }) || MARKERS.iter().any(|marker| name.contains(marker))
}

/// A model whose image support the operator declared (`[model] vision = true|false`),
/// overriding what the provider client guesses from the model's name. Everything else is
/// forwarded.
#[derive(Debug, Clone)]
pub struct WithVision<M> {
    inner: M,
    vision: bool,
}

impl<M: ChatModel> WithVision<M> {
    /// Wraps `inner`, reporting `vision` from [`ChatModel::accepts_images`].
    pub fn new(inner: M, vision: bool) -> Self {
        Self { inner, vision }
    }
}

#[async_trait]
impl<M: ChatModel> ChatModel for WithVision<M> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn context_window(&self) -> Option<u64> {
        self.inner.context_window()
    }

    fn native_response_format(&self) -> bool {
        self.inner.native_response_format()
    }

    fn accepts_images(&self) -> bool {
        self.vision
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        self.inner.stream(request).await
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        self.inner.call(request).await
    }
}

/// A model with a configured context window (`[model] context_window = N`), overriding the
/// table and the inner model's own value. Everything else is forwarded.
#[derive(Debug, Clone)]
pub struct WithContextWindow<M> {
    inner: M,
    tokens: u64,
}

impl<M: ChatModel> WithContextWindow<M> {
    /// Wraps `inner`, reporting `tokens` as its window.
    pub fn new(inner: M, tokens: u64) -> Self {
        Self { inner, tokens }
    }
}

#[async_trait]
impl<M: ChatModel> ChatModel for WithContextWindow<M> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn context_window(&self) -> Option<u64> {
        Some(self.tokens)
    }

    fn native_response_format(&self) -> bool {
        self.inner.native_response_format()
    }

    fn accepts_images(&self) -> bool {
        self.inner.accepts_images()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        self.inner.stream(request).await
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        self.inner.call(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_models_are_known_by_name() {
        assert!(takes_images("gpt-4o-mini"));
        assert!(takes_images("openai/gpt-4.1"));
        assert!(takes_images("Qwen2.5-VL-7B-Instruct"));
        assert!(!takes_images("gpt-3.5-turbo"));
        assert!(!takes_images("deepseek-chat"));
        assert!(!takes_images("o1x"));
    }

    #[test]
    fn longest_entry_at_a_dash_boundary_wins() {
        assert_eq!(known_context_window("gpt-4"), Some(8_192));
        assert_eq!(known_context_window("gpt-4-0613"), Some(8_192));
        assert_eq!(known_context_window("gpt-4-turbo-2024-04-09"), Some(128_000));
        assert_eq!(known_context_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_context_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_context_window("o3-mini"), Some(200_000));
        assert_eq!(known_context_window("o1-mini-2024-09-12"), Some(128_000));
        assert_eq!(known_context_window("claude-3-5-haiku-latest"), Some(200_000));
        assert_eq!(known_context_window("claude-instant-1.2"), Some(100_000));
        assert_eq!(known_context_window("deepseek-chat"), Some(128_000));
        assert_eq!(known_context_window("qwen-plus-latest"), Some(131_072));
        assert_eq!(known_context_window("openai/GPT-4o"), Some(128_000));
        assert_eq!(known_context_window("gemini-2.5-flash"), Some(1_048_576));
        assert_eq!(known_context_window("models/gemini-1.5-pro-002"), Some(2_097_152));
        assert_eq!(known_context_window("gemini-3-pro-preview"), Some(1_048_576));
    }

    #[test]
    fn unknown_models_have_no_window() {
        for name in ["gpt-4x", "o10", "qwen3:8b", "llama3.1", "", "claudette"] {
            assert_eq!(known_context_window(name), None, "{name}");
        }
    }
}
