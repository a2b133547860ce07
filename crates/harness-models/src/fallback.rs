//! [`FallbackChain`]: the main model, then the models to try when it is down.
//!
//! A call goes to the first model. When that model fails in a way another provider may not
//! share — an outage, a 5xx, a rate limit, a connection failure or an idle timeout, after the
//! model's own retries ([`falls_back`]) — the same request goes to the next model, and so on.
//! Failures that are the request's or the caller's (rejected credentials, a malformed request,
//! a context overflow, cancellation) are returned at once: another model would not fix them,
//! and an overflow is the harness's to handle (compact, then retry).
//!
//! How long a model is tried before the chain moves on is its [`RetryPolicy`]: rate limits and
//! 5xx get the policy's retries within `max_elapsed`, connection failures and idle timeouts
//! only [`RetryPolicy::unreachable_attempts`] attempts (the `[model] fallback_after` of
//! harness.toml), so an unreachable provider costs one attempt, not the whole retry budget.
//!
//! A switch is told twice: to the [`FallbackObserver`] (the CLI prints it on stderr) and, on a
//! stream, as a leading [`ModelChunk::Notice`] (`model_fallback`), which the agent loop turns
//! into a warning event. Thinking a provider signed is only replayed to that provider: a
//! request going to another model loses the signed thinking blocks it could not verify.
//! The chain's context window is the smallest known one of its models, so compaction keeps
//! the context small enough for every model that may answer.

use crate::gemini::SIGNATURE_PREFIX;
use crate::transport::WireError;
use async_trait::async_trait;
use futures::StreamExt;
use harness_core::{Block, ChatModel, ChatRequest, ModelChunk, ModelError, ModelResponse, ModelStream, Msg, Role};
use std::sync::Arc;

/// The code of the [`ModelChunk::Notice`] a switch adds to the stream.
pub const FALLBACK_NOTICE: &str = "model_fallback";

/// One model of a [`FallbackChain`].
#[derive(Clone)]
pub struct FallbackEntry {
    label: String,
    provider: String,
    model: Arc<dyn ChatModel>,
}

impl std::fmt::Debug for FallbackEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackEntry")
            .field("label", &self.label)
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl FallbackEntry {
    /// `model`, named `label` in notices (its spec, e.g. `openai:gpt-4o`), reached through
    /// `provider` (`openai`, `anthropic`, `gemini`, ...: whose thinking signatures it reads).
    pub fn new(label: impl Into<String>, provider: impl Into<String>, model: Arc<dyn ChatModel>) -> Self {
        Self {
            label: label.into(),
            provider: provider.into(),
            model,
        }
    }

    /// The name used in notices.
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// One switch to the next model, as told to a [`FallbackObserver`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FallbackNotice {
    /// The model that failed (its label).
    pub failed: String,
    /// Why, in words (the error and its causes).
    pub reason: String,
    /// The model tried next (its label).
    pub next: String,
}

impl std::fmt::Display for FallbackNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "model {} failed ({}); falling back to {}",
            self.failed, self.reason, self.next
        )
    }
}

/// Hears of each switch before the next model is tried (e.g. to print it on a terminal).
pub type FallbackObserver = Arc<dyn Fn(&FallbackNotice) + Send + Sync>;

/// Whether a failure that outlived the model's retries sends the request to the next model:
/// rate limits, transient failures (5xx, connection failures, cut streams) and timeouts.
/// Never credentials, malformed requests or responses, context overflow or cancellation.
pub fn falls_back(error: &ModelError) -> bool {
    matches!(
        error,
        ModelError::RateLimited { .. } | ModelError::Transient(_) | ModelError::Timeout { .. }
    )
}

/// Whether the provider could not be reached at all: the connection failed, or no byte came
/// for the idle timeout. These move on after [`RetryPolicy::unreachable_attempts`]
/// attempts.
///
/// [`RetryPolicy::unreachable_attempts`]: crate::RetryPolicy::unreachable_attempts
pub fn is_unreachable(error: &ModelError) -> bool {
    match error {
        ModelError::Timeout { .. } => true,
        ModelError::Transient(source) => source
            .downcast_ref::<WireError>()
            .is_some_and(|wire| matches!(wire, WireError::Connect { .. } | WireError::Idle { .. })),
        _ => false,
    }
}

/// A [`ChatModel`] that tries its models in order; see the [module docs](self).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use harness_core::{ChatModel, ChatRequest, Msg};
/// use harness_models::{FallbackChain, FallbackEntry, ScriptedError, ScriptedModel};
/// use std::sync::Arc;
///
/// let main = ScriptedModel::new().reply_error(ScriptedError::Transient);
/// let spare = ScriptedModel::new().reply_text("from the spare");
/// let chain = FallbackChain::new(
///     FallbackEntry::new("openai:main", "openai", Arc::new(main)),
///     vec![FallbackEntry::new("anthropic:spare", "anthropic", Arc::new(spare))],
/// );
/// let request = ChatRequest { messages: vec![Arc::new(Msg::user("hi"))], ..ChatRequest::default() };
/// assert_eq!(chain.call(request).await?.message.text(), "from the spare");
/// # Ok::<_, harness_core::ModelError>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct FallbackChain {
    entries: Arc<[FallbackEntry]>,
    observer: Option<FallbackObserver>,
}

impl std::fmt::Debug for FallbackChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackChain")
            .field("entries", &self.entries)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl FallbackChain {
    /// `main`, then `fallbacks` in order.
    pub fn new(main: FallbackEntry, fallbacks: Vec<FallbackEntry>) -> Self {
        let entries: Vec<FallbackEntry> = std::iter::once(main).chain(fallbacks).collect();
        Self {
            entries: entries.into(),
            observer: None,
        }
    }

    /// The same chain, telling `observer` of each switch.
    #[must_use]
    pub fn with_observer(mut self, observer: Option<FallbackObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The models, main first.
    pub fn entries(&self) -> &[FallbackEntry] {
        &self.entries
    }

    /// Records a switch from entry `at` to the next one; returns the stream notice.
    fn switch(&self, at: usize, error: &ModelError) -> ModelChunk {
        let notice = FallbackNotice {
            failed: self.entries[at].label.clone(),
            reason: harness_core::error_chain(error),
            next: self.entries[at + 1].label.clone(),
        };
        tracing::warn!(
            failed = %notice.failed,
            next = %notice.next,
            error = %notice.reason,
            "model failed; falling back"
        );
        if let Some(observer) = &self.observer {
            observer(&notice);
        }
        ModelChunk::Notice {
            code: FALLBACK_NOTICE.to_owned(),
            message: notice.to_string(),
        }
    }

    /// The request as entry `at` gets it: the main model gets it unchanged, the others
    /// without thinking that another provider signed.
    fn request_for(&self, at: usize, request: &ChatRequest) -> ChatRequest {
        let mut request = request.clone();
        if at > 0 {
            strip_foreign_thinking(&mut request.messages, &self.entries[at].provider);
        }
        request
    }
}

/// Which provider wrote a thinking signature: Gemini's are stored with [`SIGNATURE_PREFIX`],
/// Anthropic's as given (no other provider signs thinking).
fn signer(signature: &str) -> &'static str {
    if signature.starts_with(SIGNATURE_PREFIX) {
        "gemini"
    } else {
        "anthropic"
    }
}

/// Removes, from assistant messages, the thinking blocks signed by a provider other than
/// `provider` (messages without any are shared, not copied).
fn strip_foreign_thinking(messages: &mut [Arc<Msg>], provider: &str) {
    let foreign = |block: &Block| matches!(block, Block::Thinking { signature: Some(signature), .. } if signer(signature) != provider);
    for message in messages.iter_mut() {
        if message.role == Role::Assistant && message.content.iter().any(foreign) {
            let mut stripped = (**message).clone();
            stripped.content.retain(|block| !foreign(block));
            *message = Arc::new(stripped);
        }
    }
}

/// Opens `model`'s stream and waits for its first item, so a stream that fails before it
/// shows anything counts as a failed attempt (nothing was seen; another model may answer).
async fn open(model: &dyn ChatModel, request: ChatRequest) -> Result<ModelStream, ModelError> {
    let mut stream = model.stream(request).await?;
    match stream.next().await {
        Some(Err(error)) => Err(error),
        Some(Ok(first)) => Ok(Box::pin(futures::stream::once(async { Ok(first) }).chain(stream))),
        None => Ok(Box::pin(futures::stream::empty())),
    }
}

#[async_trait]
impl ChatModel for FallbackChain {
    fn name(&self) -> &str {
        self.entries[0].model.name()
    }

    fn provider(&self) -> &str {
        self.entries[0].model.provider()
    }

    fn context_window(&self) -> Option<u64> {
        self.entries
            .iter()
            .filter_map(|entry| entry.model.context_window())
            .min()
    }

    fn native_response_format(&self) -> bool {
        self.entries.iter().all(|entry| entry.model.native_response_format())
    }

    /// Only when every model of the chain does: a switch must not break the conversation.
    fn accepts_images(&self) -> bool {
        self.entries.iter().all(|entry| entry.model.accepts_images())
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        let mut notices = Vec::new();
        let last = self.entries.len() - 1;
        for (at, entry) in self.entries.iter().enumerate() {
            match open(entry.model.as_ref(), self.request_for(at, &request)).await {
                Ok(stream) if notices.is_empty() => return Ok(stream),
                Ok(stream) => {
                    return Ok(Box::pin(
                        futures::stream::iter(notices.into_iter().map(Ok)).chain(stream),
                    ));
                }
                Err(error) if at < last && falls_back(&error) => notices.push(self.switch(at, &error)),
                Err(error) => return Err(error),
            }
        }
        // `entries` is never empty (`new` takes the main model), so the loop returned.
        Err(ModelError::transient("the fallback chain has no model"))
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        let last = self.entries.len() - 1;
        for (at, entry) in self.entries.iter().enumerate() {
            match entry.model.call(self.request_for(at, &request)).await {
                Ok(response) => return Ok(response),
                Err(error) if at < last && falls_back(&error) => {
                    self.switch(at, &error);
                }
                Err(error) => return Err(error),
            }
        }
        Err(ModelError::transient("the fallback chain has no model"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted::{ScriptedError, ScriptedModel};
    use harness_core::collect;
    use std::sync::Mutex;

    fn chain(main: &ScriptedModel, spare: &ScriptedModel, spare_provider: &str) -> FallbackChain {
        FallbackChain::new(
            FallbackEntry::new("anthropic:main", "anthropic", Arc::new(main.clone())),
            vec![FallbackEntry::new(
                format!("{spare_provider}:spare"),
                spare_provider,
                Arc::new(spare.clone()),
            )],
        )
    }

    fn request() -> ChatRequest {
        ChatRequest {
            messages: vec![Arc::new(Msg::user("hi"))],
            ..ChatRequest::default()
        }
    }

    async fn streamed(chain: &FallbackChain) -> (Vec<ModelChunk>, Result<ModelResponse, ModelError>) {
        let mut chunks = Vec::new();
        let result = match chain.stream(request()).await {
            Ok(mut stream) => {
                let mut acc = harness_core::ResponseAccumulator::default();
                let mut failed = None;
                while let Some(chunk) = stream.next().await {
                    match chunk {
                        Ok(chunk) => {
                            acc.push(&chunk);
                            chunks.push(chunk);
                        }
                        Err(error) => {
                            failed = Some(error);
                            break;
                        }
                    }
                }
                failed.map_or_else(|| Ok(acc.finish()), Err)
            }
            Err(error) => Err(error),
        };
        (chunks, result)
    }

    #[tokio::test]
    async fn an_outage_or_a_rate_limit_moves_on_and_says_so() {
        for error in [
            ScriptedError::Transient,
            ScriptedError::RateLimited { retry_after_secs: None },
        ] {
            let main = ScriptedModel::new().reply_error(error);
            let spare = ScriptedModel::new().reply_text("spare");
            let seen = Arc::new(Mutex::new(Vec::new()));
            let observer: FallbackObserver = {
                let seen = Arc::clone(&seen);
                Arc::new(move |notice: &FallbackNotice| {
                    seen.lock().unwrap_or_else(|e| e.into_inner()).push(notice.clone())
                })
            };
            let chain = chain(&main, &spare, "openai").with_observer(Some(observer));
            let (chunks, result) = streamed(&chain).await;
            let response = result.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(response.message.text(), "spare");
            assert_eq!((main.request_count(), spare.request_count()), (1, 1));
            let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
            assert_eq!(seen.len(), 1);
            assert_eq!(
                (seen[0].failed.as_str(), seen[0].next.as_str()),
                ("anthropic:main", "openai:spare")
            );
            let ModelChunk::Notice { code, message } = &chunks[0] else {
                panic!("the stream starts with the notice: {chunks:?}");
            };
            assert_eq!(code, FALLBACK_NOTICE);
            assert!(
                message.starts_with("model anthropic:main failed (")
                    && message.ends_with("); falling back to openai:spare"),
                "{message}"
            );
        }
    }

    #[tokio::test]
    async fn credentials_bad_requests_and_overflow_do_not_fall_back() {
        for error in [
            ScriptedError::Auth,
            ScriptedError::InvalidRequest,
            ScriptedError::ContextOverflow,
        ] {
            let main = ScriptedModel::new().reply_error(error);
            let spare = ScriptedModel::new().reply_text("never");
            let chain = chain(&main, &spare, "openai");
            assert!(streamed(&chain).await.1.is_err());
            assert!(chain.call(request()).await.is_err());
            assert_eq!(spare.request_count(), 0, "the spare is never asked");
        }
    }

    #[tokio::test]
    async fn the_last_models_failure_is_returned() {
        let main = ScriptedModel::new().reply_error(ScriptedError::Transient);
        let spare = ScriptedModel::new().reply_error(ScriptedError::Transient);
        let result = streamed(&chain(&main, &spare, "openai")).await.1;
        assert!(matches!(result, Err(ModelError::Transient(_))), "{result:?}");
        assert_eq!((main.request_count(), spare.request_count()), (1, 1));
    }

    #[tokio::test]
    async fn the_non_streaming_path_falls_back_too() {
        let main = ScriptedModel::new().reply_error(ScriptedError::Transient);
        let spare = ScriptedModel::new().reply_text("spare");
        let response = chain(&main, &spare, "openai")
            .call(request())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.message.text(), "spare");
    }

    #[tokio::test]
    async fn thinking_signed_by_another_provider_is_not_sent_to_the_fallback() {
        let signed = |signature: &str| Block::Thinking {
            thinking: "thought".into(),
            signature: Some(signature.into()),
        };
        let assistant = Msg::new(
            Role::Assistant,
            vec![
                signed("anthropic-sig"),
                signed(&format!("{SIGNATURE_PREFIX}gem-sig")),
                Block::Thinking {
                    thinking: "unsigned".into(),
                    signature: None,
                },
                Block::text("answer"),
            ],
        );
        let request = ChatRequest {
            messages: vec![
                Arc::new(Msg::user("q")),
                Arc::new(assistant),
                Arc::new(Msg::user("again")),
            ],
            ..ChatRequest::default()
        };
        let signatures = |model: &ScriptedModel| -> Vec<Option<String>> {
            model.requests()[0].messages[1]
                .content
                .iter()
                .filter_map(|block| match block {
                    Block::Thinking { signature, .. } => Some(signature.clone()),
                    _ => None,
                })
                .collect()
        };
        for (provider, kept) in [
            ("openai", vec![None]),
            ("gemini", vec![Some(format!("{SIGNATURE_PREFIX}gem-sig")), None]),
            ("anthropic", vec![Some("anthropic-sig".to_owned()), None]),
        ] {
            let main = ScriptedModel::new().reply_error(ScriptedError::Transient);
            let spare = ScriptedModel::new().reply_text("ok");
            let chain = chain(&main, &spare, provider);
            collect(chain.stream(request.clone()).await.unwrap_or_else(|e| panic!("{e}")))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(signatures(&spare), kept, "{provider}");
            // The main model got the history as it was.
            assert_eq!(signatures(&main).len(), 3);
        }
    }

    #[test]
    fn the_window_is_the_smallest_known_one() {
        let sized = |tokens| -> Arc<dyn ChatModel> {
            Arc::new(crate::WithContextWindow::new(Arc::new(ScriptedModel::new()), tokens))
        };
        let chain = FallbackChain::new(
            FallbackEntry::new("a", "openai", sized(128_000)),
            vec![
                FallbackEntry::new("b", "openai", Arc::new(ScriptedModel::new())),
                FallbackEntry::new("c", "openai", sized(32_000)),
            ],
        );
        assert_eq!(chain.context_window(), Some(32_000));
    }

    #[test]
    fn only_unreachable_providers_count_as_unreachable() {
        let idle = ModelError::transient(WireError::Idle {
            target: "http://x".into(),
            after: std::time::Duration::from_secs(1),
        });
        assert!(is_unreachable(&idle));
        assert!(is_unreachable(&ModelError::Timeout {
            after: std::time::Duration::from_secs(1)
        }));
        let status = ModelError::transient(WireError::Status {
            status: 503,
            message: "down".into(),
        });
        assert!(!is_unreachable(&status));
        assert!(falls_back(&status));
        assert!(!is_unreachable(&ModelError::RateLimited { retry_after: None }));
    }
}
