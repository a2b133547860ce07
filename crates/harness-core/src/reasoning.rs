//! The innermost `reasoning` layer: build the request, call the model through the
//! `model_call` onion, decode the stream, handle why the model stopped, append the reply.

use crate::agent::{AgentError, Kernel};
use crate::event::{EventKind, EventSink};
use crate::message::{Block, Msg, Role, Usage};
use crate::middleware::{ModelCallInfo, ModelNext};
use crate::model::{
    ChatRequest, FinishReason, ModelChunk, ModelResponse, ResponseAccumulator, SystemPrompt, ToolChoice,
};
use crate::turn::Turn;
use futures::StreamExt;
use std::sync::Arc;
use tracing::Instrument;

impl Kernel {
    /// The innermost `reasoning` layer: prompt, model call, decode, append.
    ///
    /// A reply cut by the output-length limit is continued once with the same request plus
    /// the partial reply, and the parts are joined; a reply stopped by a content filter ends
    /// the call with [`AgentError::ContentFiltered`]. On the step after the last one (no
    /// tools offered) tool calls are dropped and an empty reply gets a placeholder text, before
    /// the reply is appended.
    pub(crate) async fn reason(&self, turn: &mut Turn) -> Result<(), AgentError> {
        let notes = std::mem::take(&mut turn.step_notes);
        let tools = Arc::clone(&turn.tools);
        turn.offered = Arc::clone(&tools);
        let system = self.system_prompt(turn, &notes).await;
        let request = self.request(turn, system, turn.state.messages.clone(), tools);
        let mut response = self.model_once(turn, request).await?;
        if response.finish_reason == Some(FinishReason::Length) {
            self.warn_length(turn, false).await;
            let mut partial = response.message.clone();
            partial.content.retain(|block| !matches!(block, Block::ToolUse { .. }));
            let mut messages = turn.state.messages.clone();
            messages.push(Arc::new(partial));
            // The same request again (the prompt rebuilt by the same pipeline from the same
            // turn and notes, the same tools) plus the partial reply. Rebuilding here keeps a
            // copy of every request off the common path.
            let system = self.system_prompt(turn, &notes).await;
            let continuation = self.request(turn, system, messages, Arc::clone(&turn.offered));
            let rest = self.model_once(turn, continuation).await?;
            response = join_continuation(response, rest);
            if response.finish_reason == Some(FinishReason::Length) {
                self.warn_length(turn, true).await;
            }
        }
        if response.finish_reason == Some(FinishReason::ContentFilter) {
            return Err(AgentError::ContentFiltered {
                model: self.model.name().to_owned(),
            });
        }
        let mut message = response.message;
        if turn.step > self.config.max_iters.get() {
            // No tools were offered; a call the model made anyway cannot run, so it is dropped
            // rather than left without a result.
            message.content.retain(|block| !matches!(block, Block::ToolUse { .. }));
            if message.text().is_empty() {
                let limit = self.config.max_iters.get();
                message.content.push(Block::text(format!(
                    "(stopped after {limit} steps without a final answer)"
                )));
            }
        }
        turn.push(message);
        Ok(())
    }

    /// The step's system prompt: the base, the `system_prompt` pipeline, then `notes`.
    async fn system_prompt(&self, turn: &Turn, notes: &[String]) -> SystemPrompt {
        let mut system = SystemPrompt::new(self.config.sys_prompt.clone());
        for layer in &self.chain.system_prompt {
            layer.system_prompt(&mut system, turn).await;
        }
        for note in notes {
            system.push_volatile("step_note", note.clone());
        }
        system
    }

    /// A request with the loop's options.
    fn request(
        &self,
        turn: &Turn,
        system: SystemPrompt,
        messages: Vec<Arc<Msg>>,
        tools: Arc<[crate::model::ToolSpec]>,
    ) -> ChatRequest {
        ChatRequest {
            system,
            messages,
            tool_choice: if tools.is_empty() {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            },
            tools,
            max_tokens: self.config.max_tokens,
            temperature: self.config.temperature,
            extra: self.config.extra.clone(),
            response_format: None,
            stream: turn.events.is_active(),
        }
    }

    async fn warn_length(&self, turn: &Turn, after_continuation: bool) {
        let message = if after_continuation {
            "the continued reply was cut by the output-length limit again (finish_reason: length); keeping what arrived"
        } else {
            "the reply was cut by the output-length limit (finish_reason: length); continuing it once"
        };
        tracing::warn!(model = %self.model.name(), step = turn.step, "{message}");
        turn.events
            .emit(EventKind::Warning {
                code: "finish_reason.length".to_owned(),
                message: message.to_owned(),
            })
            .await;
    }

    /// One model call through the `model_call` onion, streamed into a response. Adds the
    /// reported usage to the turn.
    async fn model_once(&self, turn: &mut Turn, request: ChatRequest) -> Result<ModelResponse, AgentError> {
        let cancel = turn.ctx.cancellation().clone();
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {}", self.model.name()),
            otel.kind = "client",
            gen_ai.operation.name = crate::semconv::OP_CHAT,
            gen_ai.provider.name = %self.model.provider(),
            gen_ai.request.model = %self.model.name(),
            gen_ai.conversation.id = %turn.key.session_id,
            step = turn.step,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let observed = span.clone();
        let response = async {
            let info = ModelCallInfo {
                turn,
                model: self.model.name(),
            };
            let mut stream = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(AgentError::Cancelled),
                opened = ModelNext { rest: &self.chain.model_call, kernel: self }.run(request, info) => opened?,
            };
            let mut acc = ResponseAccumulator::default();
            let mut started = std::collections::HashSet::new();
            loop {
                let chunk = tokio::select! {
                    biased;
                    () = cancel.cancelled() => return Err(AgentError::Cancelled),
                    chunk = stream.next() => chunk,
                };
                let Some(chunk) = chunk else { break };
                let chunk = chunk?;
                if let ModelChunk::Notice { code, message } = &chunk {
                    // Told to the caller also when nobody streams (a warning, not text).
                    tracing::warn!(model = %self.model.name(), code = %code, "{message}");
                    turn.events
                        .emit(EventKind::Warning {
                            code: code.clone(),
                            message: message.clone(),
                        })
                        .await;
                    continue;
                }
                if turn.events.is_active() {
                    emit_chunk(&turn.events, &chunk, &mut started).await;
                }
                acc.push(&chunk);
            }
            Ok(acc.finish())
        }
        .instrument(span)
        .await;
        if !observed.is_disabled() {
            match &response {
                Ok(response) => {
                    observed.record("gen_ai.response.model", self.model.name());
                    if let Some(reason) = &response.finish_reason {
                        observed.record("gen_ai.response.finish_reasons", tracing::field::debug(reason));
                    }
                    if let Some(usage) = &response.usage {
                        crate::semconv::record_usage(
                            &observed,
                            usage.input_tokens,
                            usage.output_tokens,
                            usage.cache_read_tokens,
                        );
                    }
                }
                Err(err) => crate::semconv::record_error(&observed, err.kind().as_str()),
            }
        }
        let response = response?;
        if let Some(usage) = &response.usage {
            turn.usage.add(usage);
        }
        Ok(response)
    }
}

async fn emit_chunk(events: &EventSink, chunk: &ModelChunk, started: &mut std::collections::HashSet<usize>) {
    match chunk {
        ModelChunk::TextDelta(text) if !text.is_empty() => {
            events.emit(EventKind::TextDelta { delta: text.clone() }).await
        }
        ModelChunk::ThinkingDelta { text, .. } if !text.is_empty() => {
            events.emit(EventKind::ThinkingDelta { delta: text.clone() }).await;
        }
        ModelChunk::ToolCallDelta {
            index,
            id,
            name,
            arguments,
        } => {
            if let Some(name) = name.as_ref().filter(|_| started.insert(*index)) {
                let id = id.clone().unwrap_or_default();
                events.emit(EventKind::ToolCallStart { id, name: name.clone() }).await;
            }
            if !arguments.is_empty() {
                events
                    .emit(EventKind::ToolCallArgs {
                        index: *index,
                        delta: arguments.clone(),
                    })
                    .await;
            }
        }
        _ => {}
    }
}

/// Joins a reply cut by the output-length limit with its continuation: the first part's
/// text and reasoning, then everything of the second (its tool calls, whose arguments are
/// whole). The joined message reports the continuation's prompt size and both parts' output.
fn join_continuation(first: ModelResponse, second: ModelResponse) -> ModelResponse {
    let mut text = String::new();
    let mut content = Vec::new();
    let mut calls = Vec::new();
    let first_blocks = first
        .message
        .content
        .into_iter()
        .filter(|block| !matches!(block, Block::ToolUse { .. }));
    for block in first_blocks.chain(second.message.content) {
        match block {
            Block::Text { text: part } => text.push_str(&part),
            call @ Block::ToolUse { .. } => calls.push(call),
            other => content.push(other),
        }
    }
    if !text.is_empty() {
        content.push(Block::text(text));
    }
    content.extend(calls);
    let usage = match (first.usage, second.usage) {
        (Some(a), Some(b)) => Some(Usage {
            output_tokens: a.output_tokens + b.output_tokens,
            ..b
        }),
        (a, b) => b.or(a),
    };
    let mut message = Msg::new(Role::Assistant, content);
    message.usage = usage;
    message.finish_reason.clone_from(&second.finish_reason);
    ModelResponse {
        message,
        usage,
        finish_reason: second.finish_reason,
    }
}
