//! The owned background task that runs one session's throttled extractions.

use super::{Inner, NsState, lock};
use crate::error::MemoryError;
use crate::extraction::FlushOutcome;
use crate::extraction_mark::ExtractionMark;
use crate::namespace::NamespaceKey;
use harness_core::SessionId;
use harness_fs::CallScope;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The owned task that runs one session's throttled extractions until nothing is pending.
pub(super) struct SessionExtraction {
    pub(super) inner: Arc<Inner>,
    pub(super) state: Arc<NsState>,
    pub(super) key: NamespaceKey,
    pub(super) session: SessionId,
    pub(super) throttle: Duration,
}

impl SessionExtraction {
    /// The session's scope, when its extraction reads the transcript.
    fn scope(&self) -> Option<CallScope> {
        let mut shared = lock(&self.state.shared);
        shared.sessions.entry(self.session.clone()).or_default().scope.clone()
    }

    /// `due`, pushed back to the end of the persisted throttle window (a run by an earlier
    /// process). Only read the first time this process sees the session; after that the
    /// in-process clock governs.
    async fn persisted_due(&self, due: Instant, scope: &CallScope) -> Instant {
        let fs = Arc::clone(&lock(&self.state.shared).fs);
        match ExtractionMark::read(&*fs, scope).await {
            Ok(mark) => due.max(Instant::now() + mark.throttled_for(self.throttle, jiff::Timestamp::now())),
            Err(err) => {
                tracing::warn!(error = %harness_core::error_chain(&err), "memory extraction watermark unreadable; the throttle starts now");
                due
            }
        }
    }

    pub(super) async fn run(self, mut due: Instant, first: bool) {
        let inner = &self.inner;
        let scope = self.scope();
        if first && let Some(scope) = &scope {
            due = self.persisted_due(due, scope).await;
        }
        loop {
            tokio::select! {
                biased;
                () = inner.shutdown.cancelled() => {}
                () = tokio::time::sleep_until(due) => {}
            }
            // At shutdown inside the throttle window nothing starts: the transcript and the
            // watermark keep the work for a later process. Messages handed over directly
            // (no transcript behind them) run now instead.
            if scope.is_some() && Instant::now() < due {
                tracing::debug!("memory extraction not due at shutdown; left to a later process");
                let mut shared = lock(&self.state.shared);
                shared.sessions.entry(self.session.clone()).or_default().running = false;
                return;
            }
            let (messages, fs) = {
                let mut shared = lock(&self.state.shared);
                let fs = Arc::clone(&shared.fs);
                let pending = shared.sessions.entry(self.session.clone()).or_default();
                pending.last_run = Some(Instant::now());
                (std::mem::take(&mut pending.messages), fs)
            };
            let outcome = match &scope {
                Some(scope) => {
                    inner
                        .abortable(inner.extract_session(&self.state, fs, scope, &messages))
                        .await
                }
                None => {
                    inner
                        .abortable(inner.extract(&self.state, fs, &self.session, &messages))
                        .await
                }
            };
            let failed = match outcome {
                Ok(outcome) => {
                    tracing::debug!(?outcome, "memory extraction finished");
                    if matches!(outcome, FlushOutcome::Written { .. }) {
                        inner.request_consolidation(&self.key);
                    }
                    false
                }
                Err(MemoryError::Cancelled) => true,
                Err(err) => {
                    tracing::warn!(error = %harness_core::error_chain(&err), "memory extraction failed; its messages are kept for the next attempt");
                    let mut shared = lock(&self.state.shared);
                    let pending = shared.sessions.entry(self.session.clone()).or_default();
                    let mut kept = messages;
                    kept.append(&mut pending.messages);
                    pending.messages = kept;
                    true
                }
            };
            let mut shared = lock(&self.state.shared);
            let pending = shared.sessions.entry(self.session.clone()).or_default();
            // After a failure the next call schedules a retry, so a broken model is never
            // hammered in a loop.
            if failed || pending.messages.is_empty() || inner.abort.is_cancelled() {
                // The entry stays (with `last_run`) so the throttle holds for the next call;
                // maintenance forgets idle entries.
                pending.running = false;
                return;
            }
            due = pending.last_run.map_or_else(Instant::now, |last| last + self.throttle);
        }
    }
}
