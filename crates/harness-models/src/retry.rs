//! [`Retrying`]: the one place model calls are retried.
//!
//! Retried: [`ModelError::RateLimited`] and [`ModelError::Transient`] (5xx, connection errors,
//! a stream that fails before its first chunk). Never retried: every other error, and a stream
//! that already delivered chunks (the caller has seen them; replaying would duplicate output).
//! Delays grow exponentially with jitter; a provider's `Retry-After` wins when given. No retry
//! starts once the time spent on the call (attempts and waits) would pass
//! [`RetryPolicy::max_elapsed`], and an optional [`RetryObserver`] hears of each retry as it
//! happens (the CLI prints them).

use async_trait::async_trait;
use futures::StreamExt;
use harness_core::{ChatModel, ChatRequest, ModelError, ModelResponse, ModelStream};
use rand::Rng;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// When and how long to wait before retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `max_retries + 1` attempts in all).
    pub max_retries: u32,
    /// The first backoff delay; each retry doubles it.
    pub base_delay: Duration,
    /// Cap on a backoff delay.
    pub max_delay: Duration,
    /// The longest `Retry-After` we wait; a provider asking for longer gets its error surfaced
    /// instead of a silent, long stall.
    pub max_retry_after: Duration,
    /// The bound on the whole call: no retry starts when the time already spent plus the
    /// wait before it would pass this.
    pub max_elapsed: Duration,
    /// Attempts in all when the provider cannot be reached (connection failure, idle
    /// timeout; see [`is_unreachable`](crate::is_unreachable)), when that is fewer than
    /// `max_retries + 1`: a model with a fallback moves on after this many (`[model]
    /// fallback_after`). `None`: such failures are retried like any transient one.
    pub unreachable_attempts: Option<u32>,
}

/// The default of [`RetryPolicy::max_elapsed`].
pub const DEFAULT_MAX_RETRY_TIME: Duration = Duration::from_secs(300);

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
            max_elapsed: DEFAULT_MAX_RETRY_TIME,
            unreachable_attempts: None,
        }
    }
}

/// One retry about to happen, as told to a [`RetryObserver`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryNotice {
    /// The model's name.
    pub model: String,
    /// Which retry this is (1-based).
    pub retry: u32,
    /// The policy's `max_retries`.
    pub max_retries: u32,
    /// The wait before it.
    pub wait: Duration,
    /// Why the last attempt failed.
    pub error: String,
}

/// Hears of each retry before its wait starts (e.g. to show it on a terminal).
pub type RetryObserver = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The same policy with `max_retries` retries.
    #[must_use]
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// The same policy with a different bound on the whole call's time.
    #[must_use]
    pub fn max_elapsed(mut self, max_elapsed: Duration) -> Self {
        self.max_elapsed = max_elapsed;
        self
    }

    /// The same policy, giving up on an unreachable provider after `attempts` attempts (at
    /// least 1).
    #[must_use]
    pub fn unreachable_attempts(mut self, attempts: u32) -> Self {
        self.unreachable_attempts = Some(attempts.max(1));
        self
    }

    /// The same policy with a different first delay.
    #[must_use]
    pub fn base_delay(mut self, base_delay: Duration) -> Self {
        self.base_delay = base_delay;
        self
    }

    /// How long to wait before retry number `retry` (0-based) after `error`, or `None` when
    /// the error must be surfaced.
    pub fn delay(&self, retry: u32, error: &ModelError) -> Option<Duration> {
        if retry >= self.max_retries || !error.is_retryable() {
            return None;
        }
        if let Some(attempts) = self.unreachable_attempts
            && retry + 1 >= attempts
            && crate::fallback::is_unreachable(error)
        {
            return None;
        }
        if let ModelError::RateLimited {
            retry_after: Some(wait),
        } = error
        {
            return (*wait <= self.max_retry_after).then_some(*wait);
        }
        // "Equal jitter": half the exponential delay, plus a random share of the other half,
        // so concurrent callers spread out but never retry immediately.
        let exponential = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_delay);
        let half = exponential / 2;
        let jitter = rand::rng().random_range(0.0..=1.0);
        Some(half + half.mul_f64(jitter))
    }

    async fn run<T, F, Fut>(
        &self,
        model: &str,
        observer: Option<&RetryObserver>,
        mut attempt: F,
    ) -> Result<T, ModelError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ModelError>>,
    {
        let started = tokio::time::Instant::now();
        let mut retry = 0;
        loop {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => match self
                    .delay(retry, &error)
                    .filter(|wait| started.elapsed().saturating_add(*wait) <= self.max_elapsed)
                {
                    Some(wait) => {
                        if let Some(observer) = observer {
                            observer(&RetryNotice {
                                model: model.to_owned(),
                                retry: retry + 1,
                                max_retries: self.max_retries,
                                wait,
                                error: error.to_string(),
                            });
                        }
                        tracing::warn!(
                            model,
                            retry = retry + 1,
                            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                            error = %error,
                            "model call failed; retrying"
                        );
                        tokio::time::sleep(wait).await;
                        retry += 1;
                    }
                    None => return Err(error),
                },
            }
        }
    }
}

/// A [`ChatModel`] that retries another one under a [`RetryPolicy`].
///
/// # Cancellation
/// Dropping the returned future (as the agent loop does when the call's token fires) stops a
/// pending wait at once; no retry happens afterwards.
#[derive(Clone)]
pub struct Retrying<M> {
    inner: M,
    policy: RetryPolicy,
    observer: Option<RetryObserver>,
}

impl<M: std::fmt::Debug> std::fmt::Debug for Retrying<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrying")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl<M: ChatModel> Retrying<M> {
    /// Wraps `inner` with `policy`.
    pub fn new(inner: M, policy: RetryPolicy) -> Self {
        Self {
            inner,
            policy,
            observer: None,
        }
    }

    /// The same wrapper, telling `observer` of each retry before its wait.
    #[must_use]
    pub fn with_observer(mut self, observer: Option<RetryObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The policy in force.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }
}

#[async_trait]
impl<M: ChatModel> ChatModel for Retrying<M> {
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
        self.inner.accepts_images()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        let (inner, request) = (&self.inner, &request);
        self.policy
            .run(inner.name(), self.observer.as_ref(), move || async move {
                let mut stream = inner.stream(request.clone()).await?;
                // A stream that fails before its first chunk has shown nothing: retry it too.
                match stream.next().await {
                    Some(Err(error)) => Err(error),
                    Some(Ok(first)) => {
                        Ok(Box::pin(futures::stream::once(async { Ok(first) }).chain(stream)) as ModelStream)
                    }
                    None => Ok(Box::pin(futures::stream::empty()) as ModelStream),
                }
            })
            .await
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        let (inner, request) = (&self.inner, &request);
        self.policy
            .run(inner.name(), self.observer.as_ref(), move || {
                inner.call(request.clone())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted::{Reply, ScriptedError, ScriptedModel};
    use harness_core::{Msg, collect};
    use std::sync::Arc;

    fn request() -> ChatRequest {
        ChatRequest {
            messages: vec![Arc::new(Msg::user("hi"))],
            ..ChatRequest::default()
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy::default().base_delay(Duration::from_secs(1))
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_are_retried_with_growing_delays() {
        let model = ScriptedModel::new()
            .reply_error(ScriptedError::Transient)
            .reply_error(ScriptedError::Transient)
            .reply_text("ok");
        let retrying = Retrying::new(model.clone(), policy());
        let start = tokio::time::Instant::now();
        let response = collect(retrying.stream(request()).await.unwrap_or_else(|e| panic!("{e}")))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.message.text(), "ok");
        assert_eq!(model.request_count(), 3);
        // 1 s then 2 s, each with equal jitter: between 0.5+1 and 1+2 seconds.
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(1500) && waited <= Duration::from_secs(3),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honoured() {
        let model = ScriptedModel::new()
            .reply_error(ScriptedError::RateLimited {
                retry_after_secs: Some(7),
            })
            .reply_text("ok");
        let retrying = Retrying::new(model.clone(), policy());
        let start = tokio::time::Instant::now();
        let response = retrying.call(request()).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.message.text(), "ok");
        assert_eq!(start.elapsed(), Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_cap_is_surfaced() {
        let model = ScriptedModel::new()
            .reply_error(ScriptedError::RateLimited {
                retry_after_secs: Some(3600),
            })
            .reply_text("never");
        let result = Retrying::new(model.clone(), policy()).call(request()).await;
        assert!(matches!(result, Err(ModelError::RateLimited { .. })));
        assert_eq!(model.request_count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_are_never_retried() {
        for error in [
            ScriptedError::InvalidRequest,
            ScriptedError::Auth,
            ScriptedError::ContextOverflow,
        ] {
            let model = ScriptedModel::new().reply_error(error).reply_text("never");
            let result = Retrying::new(model.clone(), policy()).stream(request()).await;
            assert!(result.is_err());
            assert_eq!(model.request_count(), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_stop_at_max_retries() {
        let model = ScriptedModel::new().reply(Reply::error(ScriptedError::Transient));
        let model = model.fallback(crate::scripted::Fallback::RepeatLast);
        let result = Retrying::new(model.clone(), policy().max_retries(2))
            .call(request())
            .await;
        assert!(matches!(result, Err(ModelError::Transient(_))));
        assert_eq!(model.request_count(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn total_retry_time_is_bounded_and_each_retry_is_observed() {
        let model = ScriptedModel::new()
            .reply(Reply::error(ScriptedError::Transient))
            .fallback(crate::scripted::Fallback::RepeatLast);
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let observer: RetryObserver = {
            let seen = Arc::clone(&seen);
            Arc::new(move |notice: &RetryNotice| seen.lock().unwrap_or_else(|e| e.into_inner()).push(notice.retry))
        };
        // Waits of 1 s, 2 s, 4 s… with up to 20 retries, but at most 4 s in all.
        let policy = policy().max_retries(20).max_elapsed(Duration::from_secs(4));
        let start = tokio::time::Instant::now();
        let result = Retrying::new(model.clone(), policy)
            .with_observer(Some(observer))
            .call(request())
            .await;
        assert!(matches!(result, Err(ModelError::Transient(_))));
        assert!(start.elapsed() <= Duration::from_secs(4), "{:?}", start.elapsed());
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert!(!seen.is_empty() && seen.len() < 4, "{seen:?}");
        assert_eq!(model.request_count(), seen.len() + 1);
        assert_eq!(seen, (1..=seen.len() as u32).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_provider_gets_only_its_attempts_and_a_5xx_all_its_retries() {
        let unreachable = || {
            ModelError::transient(crate::WireError::Idle {
                target: "http://127.0.0.1:9".into(),
                after: Duration::from_secs(1),
            })
        };
        let policy = policy().max_retries(5).unreachable_attempts(2);
        assert!(policy.delay(0, &unreachable()).is_some(), "the second attempt");
        assert_eq!(policy.delay(1, &unreachable()), None, "no third attempt");
        let status = ModelError::transient(crate::WireError::Status {
            status: 503,
            message: "down".into(),
        });
        assert!(policy.delay(4, &status).is_some(), "a 5xx keeps every retry");
        assert_eq!(
            RetryPolicy::default().unreachable_attempts(0).unreachable_attempts,
            Some(1)
        );
        assert!(RetryPolicy::default().delay(2, &unreachable()).is_some());
    }

    #[test]
    fn delays_are_capped_and_jittered_within_bounds() {
        let policy = RetryPolicy::default().max_retries(20);
        let error = ModelError::transient("x");
        for retry in 0..20 {
            let wait = policy.delay(retry, &error).unwrap_or_default();
            let full = policy
                .base_delay
                .saturating_mul(2u32.saturating_pow(retry))
                .min(policy.max_delay);
            assert!(wait >= full / 2 && wait <= full, "{retry}: {wait:?}");
        }
        assert_eq!(policy.delay(20, &error), None);
        assert_eq!(RetryPolicy::none().delay(0, &error), None);
    }
}
