//! The innermost `acting` layer and the step's tool scheduling: refuse calls to tools that
//! were not offered, run the rest in batches by their concurrency-safety, keep call order.

use crate::agent::Kernel;
use crate::event::EventKind;
use crate::message::Msg;
use crate::middleware::ActingNext;
use crate::model::ToolSpec;
use crate::tool::{CheckedCall, ToolCall, ToolContext, ToolError, ToolOutput};
use crate::turn::Turn;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tracing::Instrument;

impl Kernel {
    /// Runs the tool calls of `reply` and appends their results in call order.
    ///
    /// A call to a tool that was not offered on this step gets an error result and never
    /// runs. The rest run in batches, in call order: consecutive concurrency-safe calls run
    /// together; a call that is not concurrency-safe runs alone, after everything before it
    /// and before everything after it.
    pub(crate) async fn act(&self, turn: &mut Turn, reply: &Msg) {
        let calls: Vec<ToolCall> = reply
            .tool_calls()
            .map(|call| ToolCall {
                id: call.id.to_owned(),
                name: call.name.to_owned(),
                input: call.input.clone(),
            })
            .collect();
        if turn.events.is_active() {
            for call in &calls {
                turn.events
                    .emit(EventKind::ToolCallEnd {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        input: call.input.clone(),
                    })
                    .await;
            }
        }
        let contexts: Vec<ToolContext> = calls
            .iter()
            .map(|call| ToolContext {
                runtime: turn.ctx.clone(),
                call_id: call.id.clone(),
                events: turn.events.clone(),
                session: turn.session.clone(),
            })
            .collect();
        let mut outputs: Vec<Option<ToolOutput>> = calls.iter().map(|_| None).collect();
        // (call index, concurrency-safe) of every call that may run.
        let mut runnable: Vec<(usize, bool)> = Vec::with_capacity(calls.len());
        for (at, call) in calls.iter().enumerate() {
            match turn.offered.iter().find(|spec| spec.name == call.name) {
                Some(spec) => runnable.push((at, spec.annotations.is_concurrency_safe())),
                None => {
                    let refused = ToolError::NotOffered {
                        name: call.name.clone(),
                        offered: offered_names(&turn.offered),
                    };
                    tracing::debug!(tool = %call.name, "refused a call to a tool that was not offered");
                    outputs[at] = Some(ToolOutput::error(refused.to_string()));
                }
            }
        }
        let mut start = 0;
        while start < runnable.len() {
            let end = if runnable[start].1 {
                start + runnable[start..].iter().take_while(|(_, safe)| *safe).count()
            } else {
                start + 1
            };
            let batch = &runnable[start..end];
            let results = futures::future::join_all(batch.iter().map(|&(at, _)| {
                let call = &calls[at];
                let span = tracing::info_span!(
                    "execute_tool",
                    otel.name = %format_args!("execute_tool {}", call.name),
                    otel.kind = "internal",
                    gen_ai.operation.name = crate::semconv::OP_EXECUTE_TOOL,
                    gen_ai.tool.name = %call.name,
                    gen_ai.tool.call.id = %call.id,
                    gen_ai.tool.type = "function",
                    gen_ai.conversation.id = %turn.key.session_id,
                    gen_ai.tool.call.arguments = tracing::field::Empty,
                    gen_ai.tool.call.result = tracing::field::Empty,
                    error.type = tracing::field::Empty,
                    otel.status_code = tracing::field::Empty,
                );
                let observed = span.clone();
                let ctx = &contexts[at];
                let run = async move {
                    let checked = CheckedCall::default();
                    ActingNext {
                        rest: &self.chain.acting,
                        kernel: self,
                        checked: &checked,
                    }
                    .run(call.clone(), ctx)
                    .await
                }
                .instrument(span);
                async move {
                    let output = run.await;
                    if !observed.is_disabled() {
                        crate::semconv::record_tool(&observed, &call.input, output.is_error, || {
                            crate::message::join_text(&output.content)
                        });
                    }
                    output
                }
            }))
            .await;
            for (&(at, _), output) in batch.iter().zip(results) {
                outputs[at] = Some(output);
            }
            start = end;
        }
        // Calls a layer left waiting for a person get no result until they are decided.
        let waiting = crate::approval::waiting_ids(&turn.session);
        for (call, output) in calls.into_iter().zip(outputs) {
            if waiting.contains(&call.id) {
                continue;
            }
            // Every index was filled above: refused calls in the first loop, the rest by
            // their batch.
            let mut output = output.unwrap_or_else(|| ToolOutput::error("tool call was not run"));
            // Known credentials and URL passwords never reach the model or the events.
            for block in &mut output.content {
                if let crate::Block::Text { text } = block
                    && let std::borrow::Cow::Owned(masked) = crate::redact::global()
                        .read()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .redact_known(text)
                {
                    *text = masked;
                }
            }
            if turn.events.is_active() {
                turn.events
                    .emit(EventKind::ToolResult {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        content: output.content.clone(),
                        is_error: output.is_error,
                    })
                    .await;
            }
            turn.push(Msg::tool_result(call.id, output.content, output.is_error));
        }
    }

    /// The innermost `acting` layer: validate, call, catch a panic, apply the time limit.
    pub(crate) async fn invoke(&self, call: ToolCall, ctx: &ToolContext, checked: &CheckedCall) -> ToolOutput {
        // Checked already when an outer layer asked and the arguments are still those.
        let known = checked.holds(&call).then(|| self.toolkit.lookup(&call.name)).flatten();
        let tool = match known.map_or_else(|| self.toolkit.prepare(&call.name, &call.input), Ok) {
            Ok(tool) => Arc::clone(tool),
            Err(err) => return ToolOutput::error(err.to_string()),
        };
        let limit = tool.timeout().unwrap_or(self.config.tool_timeout);
        let input = call.input;
        // `tool.call` runs inside the guarded future, so a panic raised before the tool's
        // future exists (a hand-written `Tool`) is caught too.
        let running = AssertUnwindSafe(async { tool.call(input, ctx).await }).catch_unwind();
        let result = tokio::select! {
            biased;
            () = ctx.runtime.cancellation().cancelled() => Err(ToolError::Cancelled),
            finished = tokio::time::timeout(limit, running) => match finished {
                Err(_elapsed) => Err(ToolError::Timeout { tool: call.name.clone(), after: limit }),
                Ok(Err(panic)) => Err(ToolError::Panicked { tool: call.name.clone(), message: panic_message(&panic) }),
                Ok(Ok(result)) => result,
            },
        };
        match result {
            Ok(output) => output,
            Err(err) => {
                tracing::debug!(tool = %call.name, error = %err, "tool call failed");
                ToolOutput::error(err.to_string())
            }
        }
    }
}

/// The names of `offered`, comma-separated, or a note that there were none.
fn offered_names(offered: &[ToolSpec]) -> String {
    if offered.is_empty() {
        return "none (no tools are offered on this step)".to_owned();
    }
    offered
        .iter()
        .map(|spec| spec.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic with a non-text payload".to_owned())
}
