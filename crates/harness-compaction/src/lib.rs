//! Context bounds, the engines (a leaf crate): conversation compaction and context-overflow recovery, and large tool-result eviction ([`eviction`]). The
//! `harness` crate makes it a capability (`[compaction]`, the builder setting, the memory
//! flush before a compaction).
//!
//! [`Compaction`] is a `reasoning` middleware. Before every step it
//!
//! 1. runs the argument-truncation pre-pass when configured and triggered (no model call):
//!    oversized string values in the tool calls of older messages are cut to
//!    `max_param_chars` with a marker;
//! 2. checks the triggers (message count, or tokens: the prompt size the provider reported
//!    for the last call plus an estimate of what was added since) and, when one fires,
//!    replaces the older part of the context with one summary message.
//!
//! After a compaction the model receives the system prompt, the summary, the pinned messages
//! (and the newest user message, which is never compacted away) and the kept tail — nothing
//! else. The cut never separates a tool call from its result. Summaries are derived data: the
//! raw transcript (`Turn::appended`, written by the session layer) is never touched; each
//! summary carries a [`SummaryRecord`] naming the messages it replaced and their SHA-256; a
//! later compaction summarizes the previous summary *and* the raw messages it replaces, never
//! a summary alone. A failed summary call leaves the context as it was, emits an event, and
//! the step goes on.
//!
//! When the model reports [`ModelError::ContextOverflow`], the middleware forces one
//! compaction (keeping at most half of the context) and retries the step exactly once; a
//! second overflow is returned. Both `call` and `stream` run through here. Without
//! compaction the overflow is returned as it is; its [`ErrorKind`](harness_core::ErrorKind)
//! (`overflow`) lets a front-end say how to turn compaction on.
//!
//! Every compaction, failed summary and truncation emits an
//! [`EventKind::Notice`] (kinds [`NOTICE_COMPACTION`] and [`NOTICE_ARGS_TRUNCATED`]) whose
//! data is a [`CompactionNotice`] or an [`ArgsTruncatedNotice`].

mod config;
mod estimate;
pub mod eviction;
mod plan;
mod summary;
mod truncate;

pub use config::{
    CompactionConfig, CompactionConfigError, DEFAULT_SUMMARY_PROMPT, MESSAGES_PLACEHOLDER, TruncateArgsConfig,
};
pub use estimate::{TokenEstimator, estimate_msg_tokens, estimate_text_tokens};
pub use summary::{MsgRange, SUMMARY_META, SummaryLink, SummaryRecord, is_summary, summary_record};
pub use truncate::ARGS_TRUNCATED_META;

use estimate::context_size;
use harness_core::{
    AgentError, AgentState, ChatModel, EventKind, Hooks, Middleware, ModelError, Msg, ReasoningNext, Role, Turn,
    async_trait, error_chain,
};
use harness_fs::{CallScope, CallWorkspace, WriteMode};
use plan::{Keep, plan};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Notice kind of a compaction (done or failed); data is a [`CompactionNotice`].
pub const NOTICE_COMPACTION: &str = "compaction";
/// Notice kind of the argument-truncation pre-pass; data is an [`ArgsTruncatedNotice`].
pub const NOTICE_ARGS_TRUNCATED: &str = "args_truncated";
/// Warning code of a failed summary call.
pub const WARNING_SUMMARY_FAILED: &str = "compaction.summary_failed";
/// Warning code of a failed offload write.
pub const WARNING_OFFLOAD_FAILED: &str = "compaction.offload_failed";

/// The key of compaction's state in [`AgentState::extensions`].
const STATE_KEY: &str = "compaction";
/// How many summary records the session state keeps.
const HISTORY_LIMIT: usize = 32;

/// Called with the messages a compaction is about to replace, after their summary was
/// written and before the context changes (when `flush_before_compact` is on). The harness
/// wires the memory flush here, so facts are extracted before the messages leave the context.
#[async_trait]
pub trait CompactionHook: Send + Sync {
    /// Sees the turn (context unchanged) and the raw messages being replaced, in order.
    async fn before_compaction(&self, turn: &Turn, replaced: &[Arc<Msg>]);
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionReason {
    /// The message trigger fired.
    Messages,
    /// The token trigger fired.
    Tokens,
    /// The model reported a context overflow.
    Overflow,
}

/// How a compaction attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionOutcome {
    /// The context was compacted.
    Compacted,
    /// The summary call failed; the context is unchanged.
    Failed,
}

/// The data of a [`NOTICE_COMPACTION`] notice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompactionNotice {
    /// How it ended.
    pub outcome: CompactionOutcome,
    /// Why it ran.
    pub reason: CompactionReason,
    /// Messages in the context before.
    pub messages_before: usize,
    /// Messages in the context after.
    pub messages_after: usize,
    /// Raw messages summarized and replaced.
    pub replaced: usize,
    /// Earlier messages kept verbatim after the summary (pinned, the newest user message).
    pub kept_verbatim: usize,
    /// Messages in the kept tail.
    pub tail: usize,
    /// Context tokens before (reported usage plus estimate).
    pub tokens_before: u64,
    /// Context tokens after (estimated).
    pub tokens_after: u64,
    /// The new summary's record, when compacted.
    pub summary: Option<SummaryRecord>,
    /// What failed, when it failed.
    pub error: Option<String>,
}

/// The data of a [`NOTICE_ARGS_TRUNCATED`] notice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ArgsTruncatedNotice {
    /// Messages changed.
    pub messages: usize,
    /// Argument values cut.
    pub arguments: usize,
    /// Characters of those values before.
    pub chars_before: u64,
    /// Characters after, markers included.
    pub chars_after: u64,
    /// Context tokens before.
    pub tokens_before: u64,
    /// Context tokens after.
    pub tokens_after: u64,
}

/// Compaction's per-session state, kept in [`AgentState::extensions`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CompactionState {
    /// Compactions done in the session.
    #[serde(default)]
    compactions: u64,
    /// The last message in the context at the latest compaction: usage reported up to it
    /// describes a context that no longer exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    boundary: Option<String>,
    /// The most recent summary records, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<SummaryRecord>,
}

impl harness_core::SessionSlot for CompactionState {
    const KEY: &'static str = STATE_KEY;
}

/// The boundary alone, read every step without decoding the history: a read-only view of
/// [`CompactionState`]'s slot (the same key and format; never updated through this type).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct BoundaryView {
    #[serde(default)]
    boundary: Option<String>,
}

impl harness_core::SessionSlot for BoundaryView {
    const KEY: &'static str = STATE_KEY;
}

impl CompactionState {
    /// The slot of a saved state (a hand-edited value that does not decode is no state).
    fn load(state: &AgentState) -> Self {
        state
            .extensions
            .get(<Self as harness_core::SessionSlot>::KEY)
            .and_then(|value| Self::deserialize(value).ok())
            .unwrap_or_default()
    }

    /// Compactions done in the session.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }

    /// The most recent summary records, oldest first.
    pub fn history(&self) -> &[SummaryRecord] {
        &self.history
    }
}

/// The records of a session's most recent compactions (up to 32), oldest first.
pub fn compaction_history(state: &AgentState) -> Vec<SummaryRecord> {
    CompactionState::load(state).history
}

/// Why a summary could not be written.
#[derive(Debug, thiserror::Error)]
enum SummaryError {
    #[error("summary model call failed")]
    Model(#[source] ModelError),
    #[error("the summary model returned an empty summary")]
    Empty,
    #[error("the messages could not be serialized")]
    Serialize(#[source] serde_json::Error),
    #[error("cancelled")]
    Cancelled,
}

/// The compaction middleware. See the [module docs](self).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use harness_compaction::{Compaction, CompactionConfig};
/// use harness_core::{ReActAgent, RuntimeContext};
/// use harness_models::ScriptedModel;
/// use std::sync::Arc;
///
/// let summarizer = ScriptedModel::new().reply_text("## Intent\nsay hi");
/// let config = CompactionConfig::default().trigger_messages(3).keep_messages(1);
/// let compaction = Compaction::new(config, Arc::new(summarizer.clone()))?;
/// let agent = ReActAgent::builder()
///     .model(ScriptedModel::new().reply_text("hello").reply_text("hello again"))
///     .middleware(Arc::new(compaction))
///     .build()?;
/// let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
/// agent.call("hi", ctx.clone()).await?;
/// agent.call("hi again", ctx).await?; // three messages: compacted before this step
/// assert_eq!(summarizer.request_count(), 1);
/// # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
pub struct Compaction {
    config: CompactionConfig,
    summary_model: Arc<dyn ChatModel>,
    hook: Option<Arc<dyn CompactionHook>>,
    estimator: TokenEstimator,
    prompt_sha256: String,
}

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction")
            .field("config", &self.config)
            .field("summary_model", &self.summary_model.name())
            .field("hook", &self.hook.is_some())
            .finish_non_exhaustive()
    }
}

impl Compaction {
    /// Compaction with `config`, writing summaries with `summary_model` (the model named by
    /// `config.model`, resolved by the caller, or the agent's own model).
    ///
    /// # Errors
    /// [`CompactionConfigError`] when the config cannot work (see
    /// [`CompactionConfig::validate`]).
    pub fn new(config: CompactionConfig, summary_model: Arc<dyn ChatModel>) -> Result<Self, CompactionConfigError> {
        config.validate()?;
        let mut prompt_sha256 = summary::sha256_hex(config.summary_prompt.as_bytes());
        prompt_sha256.truncate(16);
        Ok(Self {
            config,
            summary_model,
            hook: None,
            estimator: estimate_msg_tokens,
            prompt_sha256,
        })
    }

    /// Calls `hook` (the memory flush) before each compaction replaces messages, when
    /// `flush_before_compact` is on.
    #[must_use]
    pub fn with_hook(mut self, hook: Arc<dyn CompactionHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Uses `estimator` where no provider usage is known (default [`estimate_msg_tokens`]).
    #[must_use]
    pub fn with_estimator(mut self, estimator: TokenEstimator) -> Self {
        self.estimator = estimator;
        self
    }

    /// The settings.
    pub fn config(&self) -> &CompactionConfig {
        &self.config
    }

    /// The pre-pass: cut oversized arguments when triggered (always when `forced`). Returns
    /// the context size afterwards.
    async fn truncate_pass(&self, turn: &mut Turn, forced: bool) -> u64 {
        let boundary = turn.session().get::<BoundaryView>().unwrap_or_default().boundary;
        let size = context_size(&turn.state().messages, boundary.as_deref(), self.estimator);
        let Some(config) = &self.config.truncate_args else {
            return size.tokens;
        };
        let count = message_count(&turn.state().messages);
        let triggered = forced
            || (config.trigger_messages > 0 && count >= config.trigger_messages)
            || (config.trigger_tokens > 0 && size.tokens >= config.trigger_tokens);
        if !triggered {
            return size.tokens;
        }
        let done = truncate::truncate_args(&mut turn.state_mut().messages, config, self.estimator);
        if done.messages == 0 {
            return size.tokens;
        }
        // Savings in messages the reported usage counted must come off that number; the rest
        // are re-estimated anyway.
        let counted: u64 = done
            .saved
            .iter()
            .filter(|(at, _)| size.usage_index.is_some_and(|usage| *at < usage))
            .map(|(_, saved)| saved)
            .sum();
        let after = context_size(&turn.state().messages, boundary.as_deref(), self.estimator)
            .tokens
            .saturating_sub(counted);
        tracing::info!(
            messages = done.messages,
            arguments = done.arguments,
            chars_before = done.chars_before,
            chars_after = done.chars_after,
            "truncated oversized tool-call arguments"
        );
        let notice = ArgsTruncatedNotice {
            messages: done.messages,
            arguments: done.arguments,
            chars_before: done.chars_before,
            chars_after: done.chars_after,
            tokens_before: size.tokens,
            tokens_after: after,
        };
        emit_notice(turn, NOTICE_ARGS_TRUNCATED, &notice).await;
        after
    }

    fn triggered(&self, turn: &Turn, tokens: u64) -> Option<CompactionReason> {
        let config = &self.config;
        if config.trigger_messages > 0 && message_count(&turn.state().messages) >= config.trigger_messages {
            Some(CompactionReason::Messages)
        } else if config.trigger_tokens > 0 && tokens >= config.trigger_tokens {
            Some(CompactionReason::Tokens)
        } else {
            None
        }
    }

    fn keep(&self, total: usize, reason: CompactionReason) -> Keep {
        let config = &self.config;
        Keep {
            messages: config.keep_messages,
            tokens: config.keep_tokens,
            token_cap: (config.keep_tokens == 0 && config.trigger_tokens > 0).then_some(config.trigger_tokens / 2),
            max_messages: (reason == CompactionReason::Overflow).then_some(total / 2),
        }
    }

    /// One compaction. `Ok(false)` when nothing could be replaced or the summary failed (the
    /// context is then unchanged).
    ///
    /// # Errors
    /// [`AgentError::Cancelled`] when the call was cancelled during the summary.
    async fn compact(&self, turn: &mut Turn, reason: CompactionReason, tokens_before: u64) -> Result<bool, AgentError> {
        // The typed slot: what this turn's tools see and the kernel saves.
        let mut state = turn.session().get::<CompactionState>().unwrap_or_default();
        let total = turn.state().messages.len();
        let Some(plan) = plan(&turn.state().messages, self.keep(total, reason), self.estimator) else {
            tracing::debug!(
                ?reason,
                messages = total,
                "compaction triggered but nothing can be replaced"
            );
            return Ok(false);
        };
        let pick = |indices: &[usize]| -> Vec<Arc<Msg>> {
            indices
                .iter()
                .map(|at| Arc::clone(&turn.state().messages[*at]))
                .collect()
        };
        let replaced = pick(&plan.replaced);
        let previous = pick(&plan.previous);
        let tail = total - plan.cut;
        let failed = |error: String| CompactionNotice {
            outcome: CompactionOutcome::Failed,
            reason,
            messages_before: total,
            messages_after: total,
            replaced: 0,
            kept_verbatim: 0,
            tail: total,
            tokens_before,
            tokens_after: tokens_before,
            summary: None,
            error: Some(error),
        };

        // The summary is the only step that can fail, and nothing has changed yet.
        let summarized = self.summarize(turn, &previous, &replaced).await;
        let bytes = summarized.and_then(|done| Ok((done, summary::jsonl(&replaced).map_err(SummaryError::Serialize)?)));
        let ((body, requests), bytes) = match bytes {
            Ok(done) => done,
            Err(SummaryError::Cancelled) => return Err(AgentError::Cancelled),
            Err(err) => {
                let message = error_chain(&err);
                tracing::warn!(?reason, error = %message, "compaction failed; the context is unchanged");
                turn.events()
                    .emit(EventKind::Warning {
                        code: WARNING_SUMMARY_FAILED.to_owned(),
                        message: format!("compaction failed, the context is unchanged: {message}"),
                    })
                    .await;
                emit_notice(turn, NOTICE_COMPACTION, &failed(message)).await;
                return Ok(false);
            }
        };
        let sha256 = summary::sha256_hex(&bytes);
        let sequence = state.compactions + 1;

        if self.config.flush_before_compact
            && let Some(hook) = &self.hook
        {
            hook.before_compaction(turn, &replaced).await;
        }
        let offload_path = if self.config.offload_before_compact {
            self.offload(turn, sequence, &sha256, &bytes).await
        } else {
            None
        };

        let previous_records: Vec<SummaryRecord> = previous.iter().filter_map(|msg| summary_record(msg)).collect();
        let (Some(first), Some(last)) = (replaced.first(), replaced.last()) else {
            return Ok(false); // a plan always replaces at least one message
        };
        let range = MsgRange {
            first_id: first.id.clone(),
            last_id: last.id.clone(),
            count: replaced.len() as u64,
        };
        let covers = MsgRange {
            first_id: previous_records
                .first()
                .map_or_else(|| range.first_id.clone(), |record| record.covers.first_id.clone()),
            last_id: range.last_id.clone(),
            count: previous_records.iter().map(|record| record.covers.count).sum::<u64>() + range.count,
        };
        let record = SummaryRecord {
            sequence,
            summary_id: String::new(),
            range,
            sha256,
            covers,
            previous: previous
                .iter()
                .map(|msg| summary::SummaryLink {
                    summary_id: msg.id.clone(),
                    sha256: summary_record(msg).map(|record| record.sha256).unwrap_or_default(),
                })
                .collect(),
            model: self.summary_model.name().to_owned(),
            prompt_sha256: self.prompt_sha256.clone(),
            requests,
            offload_path,
        };
        let (summary_msg, record) = summary::summary_message(body, record);

        let mut compacted = Vec::with_capacity(1 + plan.protected.len() + tail);
        compacted.push(Arc::new(summary_msg));
        compacted.extend(plan.protected.iter().map(|at| Arc::clone(&turn.state().messages[*at])));
        compacted.extend(turn.state().messages[plan.cut..].iter().cloned());
        turn.state_mut().messages = compacted;

        state.compactions = sequence;
        state.boundary = turn.state().messages.last().map(|msg| msg.id.clone());
        state.history.push(record.clone());
        let excess = state.history.len().saturating_sub(HISTORY_LIMIT);
        state.history.drain(..excess);
        let boundary = state.boundary.clone();
        if let Err(err) = turn.session().update::<CompactionState, _>(|slot| *slot = state) {
            tracing::warn!(error = %err, "the compaction state could not be kept");
        }

        let after = context_size(&turn.state().messages, boundary.as_deref(), self.estimator);
        tracing::info!(
            ?reason,
            sequence,
            replaced = replaced.len(),
            kept_verbatim = plan.protected.len(),
            tail,
            tokens_before,
            tokens_after = after.tokens,
            "compacted the context"
        );
        let notice = CompactionNotice {
            outcome: CompactionOutcome::Compacted,
            reason,
            messages_before: total,
            messages_after: turn.state().messages.len(),
            replaced: replaced.len(),
            kept_verbatim: plan.protected.len(),
            tail,
            tokens_before,
            tokens_after: after.tokens,
            summary: Some(record),
            error: None,
        };
        emit_notice(turn, NOTICE_COMPACTION, &notice).await;
        Ok(true)
    }

    /// Summarizes `previous` summaries and the `replaced` raw messages, in as many requests as
    /// the chunk budget needs; each request carries the running summary forward. Returns the
    /// summary and the number of requests.
    async fn summarize(
        &self,
        turn: &Turn,
        previous: &[Arc<Msg>],
        replaced: &[Arc<Msg>],
    ) -> Result<(String, u32), SummaryError> {
        let mut running: Option<String> = None;
        for msg in previous {
            let body = summary::summary_body(msg);
            match &mut running {
                Some(text) => {
                    text.push_str("\n\n");
                    text.push_str(body);
                }
                None => running = Some(body.to_owned()),
            }
        }
        let rendered: Vec<String> = replaced
            .iter()
            .enumerate()
            .map(|(at, msg)| summary::render_message(at + 1, msg))
            .collect();
        let previous_tokens = running.as_deref().map_or(0, estimate_text_tokens);
        let cancel = turn.ctx().cancellation().clone();
        let mut requests = 0;
        for run in summary::chunks(&rendered, previous_tokens, self.config.summary_chunk_tokens) {
            let request = summary::request(&self.config.summary_prompt, running.as_deref(), &rendered[run]);
            requests += 1;
            let response = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(SummaryError::Cancelled),
                response = self.summary_model.call(request) => response,
            };
            let text = response.map_err(SummaryError::Model)?.message.text();
            let text = text.trim();
            if text.is_empty() {
                return Err(SummaryError::Empty);
            }
            running = Some(text.to_owned());
        }
        running.map(|text| (text, requests)).ok_or(SummaryError::Empty)
    }

    /// Writes the replaced messages under the caller's namespace; the path, or `None` when
    /// there is no workspace or the write failed (which is reported and otherwise ignored:
    /// the session log keeps every raw message anyway).
    async fn offload(&self, turn: &Turn, sequence: u64, sha256: &str, bytes: &[u8]) -> Option<String> {
        let (Some(workspace), Some(scope)) = (turn.ctx().get::<CallWorkspace>(), turn.ctx().get::<CallScope>()) else {
            tracing::debug!("no call workspace; compaction offload skipped");
            return None;
        };
        let name = format!("{sequence:04}-{}.jsonl", sha256.get(..12).unwrap_or(sha256));
        let raw = format!("{}/{name}", scope.compacted_dir());
        let written = match scope.compacted_dir().join(&name) {
            Ok(path) => workspace
                .user
                .write(&path, bytes, WriteMode::Overwrite)
                .await
                .map(|()| path),
            Err(err) => Err(err),
        };
        match written {
            Ok(path) => Some(path.to_string()),
            Err(err) => {
                let message = error_chain(&err);
                tracing::warn!(path = %raw, error = %message, "compaction offload failed");
                turn.events()
                    .emit(EventKind::Warning {
                        code: WARNING_OFFLOAD_FAILED.to_owned(),
                        message: format!("could not offload compacted messages to {raw}: {message}"),
                    })
                    .await;
                None
            }
        }
    }
}

#[async_trait]
impl Middleware for Compaction {
    fn name(&self) -> &'static str {
        "compaction"
    }

    fn hooks(&self) -> Hooks {
        Hooks::REASONING
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let tokens = self.truncate_pass(turn, false).await;
        if let Some(reason) = self.triggered(turn, tokens) {
            self.compact(turn, reason, tokens).await?;
        }
        // The innermost layer consumes the step notes; a retry needs them again.
        let notes = turn.step_notes().to_vec();
        match next.run(turn).await {
            Err(AgentError::Model(ModelError::ContextOverflow { message })) => {
                tracing::warn!(step = turn.step(), "context overflow; compacting and retrying once");
                let tokens = self.truncate_pass(turn, true).await;
                if !self.compact(turn, CompactionReason::Overflow, tokens).await? {
                    return Err(AgentError::Model(ModelError::ContextOverflow {
                        message: format!("{message}; compaction could not shrink the context"),
                    }));
                }
                *turn.step_notes_mut() = notes;
                next.run(turn).await
            }
            other => other,
        }
    }
}

/// Non-system messages in the context.
fn message_count(messages: &[Arc<Msg>]) -> usize {
    messages.iter().filter(|msg| msg.role != Role::System).count()
}

async fn emit_notice(turn: &Turn, kind: &str, data: &impl Serialize) {
    if turn.events().is_active() {
        turn.events()
            .emit(EventKind::Notice {
                kind: kind.to_owned(),
                data: serde_json::to_value(data).unwrap_or(serde_json::Value::Null),
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_keeps_the_saved_format_and_the_boundary_view_reads_it() {
        let state = CompactionState {
            compactions: 3,
            boundary: Some("m9".into()),
            history: Vec::new(),
        };
        let session = harness_core::SessionState::default();
        session
            .update::<CompactionState, _>(|slot| *slot = state)
            .unwrap_or_default();
        let mut agent_state = AgentState::default();
        assert!(compaction_history(&agent_state).is_empty());
        session.write_into(&mut agent_state.extensions);
        // The key and the shape are those every earlier release saved.
        assert_eq!(
            agent_state.extensions.get("compaction"),
            Some(&serde_json::json!({"compactions": 3, "boundary": "m9"}))
        );
        let back = CompactionState::load(&agent_state);
        assert_eq!((back.compactions(), back.boundary), (3, Some("m9".to_owned())));
        let view = harness_core::SessionState::from_extensions(&agent_state.extensions);
        assert_eq!(
            view.get::<BoundaryView>().unwrap_or_default().boundary,
            Some("m9".to_owned())
        );
    }
}
