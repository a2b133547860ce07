//! `harness chat`: an interactive REPL that streams tokens.

use crate::output::Out;
use crate::progress::Interrupts;
use futures::StreamExt;
use harness::HarnessAgent;
use harness_core::{Block, CancellationToken, EventKind, Msg, Role, RuntimeContext, SessionId};
use std::sync::Arc;

/// One message as a readable line or block.
pub(crate) fn render_message(msg: &Msg) -> String {
    let who = match msg.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System => "system",
        Role::Tool => "tool",
    };
    let mut parts = Vec::new();
    for block in &msg.content {
        match block {
            Block::Text { text } => parts.push(text.clone()),
            Block::Thinking { thinking, .. } => {
                parts.push(format!("(thinking) {}", harness_core::excerpt(thinking, 200)))
            }
            Block::ToolUse { name, input, .. } => {
                parts.push(format!("→ {name}({})", harness_core::excerpt(&input.to_string(), 200)))
            }
            Block::ToolResult { content, is_error, .. } => {
                let text: Vec<&str> = content.iter().filter_map(Block::as_text).collect();
                let mark = if *is_error { "✗" } else { "←" };
                parts.push(format!("{mark} {}", harness_core::excerpt(&text.join("\n"), 300)));
            }
            _ => parts.push("[attachment]".to_owned()),
        }
    }
    format!("[{who}] {}", parts.join("\n"))
}

/// One line of input.
enum Line {
    Text(String),
    /// The line was not valid UTF-8 (reported; the chat goes on).
    Invalid,
    Eof,
}

async fn read_line(
    editor: std::sync::Arc<std::sync::Mutex<rustyline::DefaultEditor>>,
    prompt: String,
) -> anyhow::Result<Line> {
    tokio::task::spawn_blocking(move || {
        let mut editor = editor.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match editor.readline(&prompt) {
            Ok(line) => {
                let _ = editor.add_history_entry(line.as_str());
                Ok(Line::Text(line))
            }
            Err(rustyline::error::ReadlineError::Interrupted) => Ok(Line::Text(String::new())),
            Err(rustyline::error::ReadlineError::Eof) => Ok(Line::Eof),
            Err(rustyline::error::ReadlineError::Io(err)) if err.kind() == std::io::ErrorKind::InvalidData => {
                Ok(Line::Invalid)
            }
            Err(err) => Err(anyhow::Error::new(err)),
        }
    })
    .await?
}

pub(crate) async fn chat(agent: HarnessAgent, base: RuntimeContext, interrupts: Arc<Interrupts>) -> anyhow::Result<()> {
    let mut out = Out::new();
    let result = chat_loop(&agent, base, &interrupts, &mut out).await;
    // A reader that went away ends the chat quietly.
    if out.closed() { Ok(()) } else { result }
}

async fn chat_loop(
    agent: &HarnessAgent,
    base: RuntimeContext,
    interrupts: &Interrupts,
    out: &mut Out,
) -> anyhow::Result<()> {
    let editor = std::sync::Arc::new(std::sync::Mutex::new(rustyline::DefaultEditor::new()?));
    let mut session = base.session_id.clone().unwrap_or(harness_core::DEFAULT_SESSION_ID);
    out.line(&format!(
        "harness chat — session {session}. /session ID switches, /new starts a session, /tasks lists subagent tasks, /exit quits; Ctrl-C cancels a turn."
    ))?;
    while !out.closed() {
        let line = match read_line(editor.clone(), format!("{session}> ")).await? {
            Line::Text(line) => line,
            Line::Eof => break,
            Line::Invalid => {
                out.line("error: that line is not valid UTF-8; it was ignored")?;
                continue;
            }
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/new" => {
                // `s-<digits>` follows the id rule, so `parse` cannot fail; keep the session on the
                // impossible error rather than panic.
                session = SessionId::parse(format!("s-{}", jiff::Timestamp::now().as_millisecond())).unwrap_or(session);
                out.line(&format!("new session {session}"))?;
                continue;
            }
            _ if line.starts_with("/session") => {
                let id = line.trim_start_matches("/session").trim();
                match SessionId::parse(id) {
                    Ok(id) => {
                        session = id;
                        out.line(&format!("session {session}"))?;
                    }
                    Err(err) => out.line(&format!("error: {err}"))?,
                }
                continue;
            }
            "/tasks" => {
                let mut ctx = base.clone();
                ctx.session_id = Some(session.clone());
                match agent.tasks(ctx).await {
                    Ok(tasks) if tasks.is_empty() => out.line("no subagent tasks in this session")?,
                    Ok(tasks) => {
                        for task in tasks {
                            out.line(&format!(
                                "  {} {} [{}]{}",
                                task.task_id,
                                task.agent_id,
                                task.status.as_str(),
                                if task.delivered { "" } else { " (not yet delivered)" }
                            ))?;
                        }
                    }
                    Err(err) => out.line(&format!("error: {}", harness_core::error_chain(&err)))?,
                }
                continue;
            }
            _ if line.starts_with('/') => {
                out.line(&format!(
                    "unknown command {line}; use /session ID, /new, /tasks or /exit"
                ))?;
                continue;
            }
            _ => {}
        }
        let cancel = CancellationToken::new();
        let mut ctx = base.clone().with_cancellation(cancel.clone());
        ctx.session_id = Some(session.clone());
        show_turn(agent.stream(line, ctx.clone()), &cancel, out).await?;
        // Calls that wait for a person: ask here, then run the rest of the turn.
        while !cancel.is_cancelled() {
            let pending = match agent.pending_approval(ctx.clone()).await {
                Ok(pending) if !pending.is_empty() => pending,
                Ok(_) => break,
                Err(err) => {
                    out.line(&format!("error: {}", harness_core::error_chain(&err)))?;
                    break;
                }
            };
            let Some(decisions) = ask_decisions(&editor, &pending, out).await? else {
                out.line(&format!(
                    "(left waiting; decide later with `harness approve --session {session}`)"
                ))?;
                break;
            };
            show_turn(agent.resume_stream(decisions, ctx.clone()), &cancel, out).await?;
        }
        interrupts.reset();
    }
    Ok(())
}

/// Prints one turn's events as they come (tokens, tool calls and results, children's lines).
async fn show_turn(
    mut events: harness_core::AgentStream,
    cancel: &CancellationToken,
    out: &mut Out,
) -> anyhow::Result<()> {
    let mut waiting = Some(crate::progress::WaitingNote::start("the model".to_owned()));
    let mut at_line_start = true;
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = tokio::signal::ctrl_c(), if !cancel.is_cancelled() => {
                cancel.cancel();
                out.line("\n(cancelling… Ctrl-C again to quit)")?;
                continue;
            }
        };
        let Some(event) = event else { break };
        waiting.take();
        if let Some(source) = &event.source {
            // A child's activity: compact, indented, tagged with its id.
            if let Some(line) = child_line(source, &event.kind) {
                if !at_line_start {
                    out.line("")?;
                }
                out.line(&line)?;
                at_line_start = true;
            }
            continue;
        }
        match event.kind {
            EventKind::TextDelta { delta } => {
                out.write(&delta)?;
                at_line_start = delta.ends_with('\n');
            }
            EventKind::ToolCallEnd { name, input, .. } => {
                if !at_line_start {
                    out.line("")?;
                }
                out.line(&format!(
                    "  → {name}({})",
                    harness_core::excerpt(&input.to_string(), 120)
                ))?;
                at_line_start = true;
            }
            EventKind::ToolResult { content, is_error, .. } => {
                let text: Vec<&str> = content.iter().filter_map(Block::as_text).collect();
                let mark = if is_error { "✗" } else { "←" };
                out.line(&format!(
                    "  {mark} {}",
                    harness_core::excerpt(&text.join(" ").replace('\n', " "), 120)
                ))?;
            }
            // The fallback observer printed the switch already.
            EventKind::Warning { code, .. } if code == harness_models::FALLBACK_NOTICE => {}
            EventKind::Warning { message, .. } => eprintln!("warning: {}", harness_core::redact::redact(&message)),
            EventKind::Error { message, .. } => {
                if !at_line_start {
                    out.line("")?;
                }
                out.line(&format!("error: {message}"))?;
                at_line_start = true;
            }
            EventKind::Final { .. } => {
                if !at_line_start {
                    out.line("")?;
                }
                at_line_start = true;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Asks about each pending call: y approves, n refuses, a approves and adds the shown rule to
/// the session. `None` when input ended (the calls stay pending).
async fn ask_decisions(
    editor: &std::sync::Arc<std::sync::Mutex<rustyline::DefaultEditor>>,
    pending: &harness_core::PendingApproval,
    out: &mut Out,
) -> anyhow::Result<Option<Vec<harness_core::ApprovalDecision>>> {
    let mut decisions = Vec::new();
    for call in &pending.calls {
        out.line(&format!(
            "  ? {}({}) needs approval: {}",
            call.tool,
            harness_core::excerpt(&call.input.to_string(), 200),
            call.reason
        ))?;
        if let Some(rule) = &call.suggestion {
            out.line(&format!("    always adds `{rule}` for this session"))?;
        }
        let always = if call.suggestion.is_some() { " / [a]lways" } else { "" };
        loop {
            let answer = match read_line(editor.clone(), format!("    run it? [y]es / [n]o{always}: ")).await? {
                Line::Text(answer) => answer.trim().to_lowercase(),
                Line::Invalid => continue,
                Line::Eof => return Ok(None),
            };
            let decision = match answer.as_str() {
                "y" | "yes" => harness_core::ApprovalDecision::approve(&call.id),
                "n" | "no" => harness_core::ApprovalDecision::deny(&call.id),
                "a" | "always" if call.suggestion.is_some() => harness_core::ApprovalDecision::approve_always(&call.id),
                _ => {
                    out.line("    please answer y, n or a")?;
                    continue;
                }
            };
            decisions.push(decision);
            break;
        }
    }
    Ok(Some(decisions))
}

/// One compact line for a subagent's event (tool calls, results, its answer, errors), or
/// `None` for the events a chat does not show (deltas, steps).
pub(crate) fn child_line(source: &harness_core::EventSource, kind: &EventKind) -> Option<String> {
    let indent = "    ".repeat(usize::try_from(source.depth).unwrap_or(1));
    let tag = format!("{indent}[{}]", source.agent_id);
    match kind {
        EventKind::ToolCallEnd { name, input, .. } => Some(format!(
            "{tag} → {name}({})",
            harness_core::excerpt(&input.to_string(), 100)
        )),
        EventKind::ToolResult { content, is_error, .. } => {
            let text: Vec<&str> = content.iter().filter_map(Block::as_text).collect();
            let mark = if *is_error { "✗" } else { "←" };
            Some(format!(
                "{tag} {mark} {}",
                harness_core::excerpt(&text.join(" ").replace('\n', " "), 100)
            ))
        }
        EventKind::Final { message } => Some(format!(
            "{tag} done: {}",
            harness_core::excerpt(&message.text().replace('\n', " "), 100)
        )),
        EventKind::Error { message, .. } => Some(format!("{tag} error: {message}")),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod child_tests {
    use super::*;

    #[test]
    fn child_events_are_indented_and_tagged() {
        let source = harness_core::EventSource {
            agent_id: "researcher".into(),
            session_id: "sub.s.researcher.x".into(),
            depth: 1,
            path: "harness/researcher".into(),
        };
        let call = EventKind::ToolCallEnd {
            id: "c1".into(),
            name: "read_file".into(),
            input: serde_json::json!({"path": "a.md"}),
        };
        assert_eq!(
            child_line(&source, &call).unwrap(),
            "    [researcher] → read_file({\"path\":\"a.md\"})"
        );
        let done = EventKind::Final {
            message: harness_core::Msg::assistant("the answer"),
        };
        assert_eq!(child_line(&source, &done).unwrap(), "    [researcher] done: the answer");
        assert!(child_line(&source, &EventKind::TextDelta { delta: "x".into() }).is_none());
    }
}
