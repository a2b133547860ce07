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

/// What the chat needs besides the agent: the session list and the flags its hints carry.
pub(crate) struct ChatSetup {
    /// Reads the sessions for `/sessions` (none when the workspace has no state yet).
    pub(crate) reader: Option<harness::SessionReader>,
    /// The user whose sessions `/sessions` lists.
    pub(crate) user: harness_core::UserId,
    /// `--workspace … --user …` when they are not the defaults ([`crate::approve::target_flags`]).
    pub(crate) target: String,
}

/// What `harness chat` says when input was waiting before its first prompt.
pub(crate) const TYPED_AHEAD: &str = "harness chat: input was already waiting before the chat started (a pasted block?); \
     the chat did not start, so your shell runs those lines. Run `harness chat` on a line of its own to chat.";

/// Whether input already waits on a terminal's stdin before the first prompt: a block
/// pasted into a shell, whose next lines belong to the shell. A pipe or file is never
/// typed-ahead: it is the chat's input.
pub(crate) fn typed_ahead() -> bool {
    use std::io::IsTerminal;
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return false;
    }
    let fd = stdin.as_fd();
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    let now = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    rustix::event::poll(&mut fds, Some(&now)).is_ok_and(|ready| ready > 0)
}

/// The commands of the chat, every one exact; `/help` lists them.
pub(crate) const HELP: &str = "commands: /session ID switches to session ID, /session shows the current one, \
     /sessions lists your sessions, /new starts a session, /tasks lists subagent tasks, /help shows this, /exit quits. \
     A line starting with // sends the rest starting with / (//etc/hosts sends /etc/hosts). \
     Ctrl-C cancels a turn; a pasted block is one message.";

/// One line typed at the prompt.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Input<'a> {
    /// Nothing (an empty line).
    Empty,
    /// A message for the model.
    Message(std::borrow::Cow<'a, str>),
    /// `/exit` or `/quit`.
    Exit,
    /// `/new`.
    New,
    /// `/session` alone.
    ShowSession,
    /// `/session ID`.
    Switch(&'a str),
    /// `/sessions`.
    Sessions,
    /// `/tasks`.
    Tasks,
    /// `/help`.
    Help,
    /// Any other `/word`.
    Unknown(&'a str),
}

/// Reads one line: commands are exact words, `//` escapes a leading `/`.
pub(crate) fn parse_input(line: &str) -> Input<'_> {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return Input::Empty;
    }
    if let Some(escaped) = trimmed.strip_prefix("//") {
        return Input::Message(format!("/{escaped}").into());
    }
    let Some(command) = trimmed.strip_prefix('/') else {
        return Input::Message(trimmed.into());
    };
    let (word, rest) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
    let rest = rest.trim();
    match (word, rest.is_empty()) {
        ("exit" | "quit", true) => Input::Exit,
        ("new", true) => Input::New,
        ("session", true) => Input::ShowSession,
        ("session", false) => Input::Switch(rest),
        ("sessions", true) => Input::Sessions,
        ("tasks", true) => Input::Tasks,
        ("help", true) => Input::Help,
        _ => Input::Unknown(trimmed),
    }
}

pub(crate) async fn chat(
    agent: HarnessAgent,
    base: RuntimeContext,
    interrupts: Arc<Interrupts>,
    setup: ChatSetup,
) -> anyhow::Result<()> {
    let mut out = Out::new();
    let result = chat_loop(&agent, base, &interrupts, &setup, &mut out).await;
    // A reader that went away ends the chat quietly.
    if out.closed() { Ok(()) } else { result }
}

async fn chat_loop(
    agent: &HarnessAgent,
    base: RuntimeContext,
    interrupts: &Interrupts,
    setup: &ChatSetup,
    out: &mut Out,
) -> anyhow::Result<()> {
    let editor = std::sync::Arc::new(std::sync::Mutex::new(rustyline::DefaultEditor::new()?));
    let mut session = base.session_id.clone().unwrap_or(harness_core::DEFAULT_SESSION_ID);
    out.line(&format!(
        "harness chat — session {session}. /help lists the commands, /exit quits."
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
        let message = match parse_input(&line) {
            Input::Empty => continue,
            Input::Exit => break,
            Input::Help => {
                out.line(HELP)?;
                continue;
            }
            Input::New => {
                // `s-<digits>` follows the id rule, so `parse` cannot fail; keep the session on the
                // impossible error rather than panic.
                session = SessionId::parse(format!("s-{}", jiff::Timestamp::now().as_millisecond())).unwrap_or(session);
                out.line(&format!("new session {session}"))?;
                continue;
            }
            Input::ShowSession => {
                out.line(&format!("session {session} (/session ID switches)"))?;
                continue;
            }
            Input::Switch(id) => {
                match SessionId::parse(id) {
                    Ok(id) => {
                        session = id;
                        out.line(&format!("session {session}"))?;
                    }
                    Err(err) => out.line(&format!("error: {err}; the session stays {session}"))?,
                }
                continue;
            }
            Input::Sessions => {
                list_sessions(setup, out).await?;
                continue;
            }
            Input::Tasks => {
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
            Input::Unknown(command) => {
                out.line(&format!(
                    "unknown command {command}; /help lists the commands (start the line with // to send it as a message)"
                ))?;
                continue;
            }
            Input::Message(message) => message.into_owned(),
        };
        let line = message.as_str();
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
                    "(left waiting; decide later with `harness approve{} --session {session}`)",
                    setup.target
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
        // Its own and its children's warnings, on stderr (the fallback notice is printed by
        // its observer).
        if let Some(line) = crate::progress::warning_line(&event) {
            eprintln!("{line}");
            continue;
        }
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
                    out.line(if call.suggestion.is_some() {
                        "    please answer y, n or a"
                    } else {
                        "    please answer y or n"
                    })?;
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

/// `/sessions`: the user's sessions, newest first, each with its time and first words.
async fn list_sessions(setup: &ChatSetup, out: &mut Out) -> anyhow::Result<()> {
    let listed = match &setup.reader {
        Some(reader) => match reader.list(&setup.user).await {
            Ok(listed) => listed,
            Err(err) => return Ok(out.line(&format!("error: {}", harness_core::error_chain(&err)))?),
        },
        None => Vec::new(),
    };
    if listed.is_empty() {
        out.line("no sessions yet")?;
    }
    for entry in listed {
        out.line(&format!(
            "  {}  {}  {} messages  {}",
            entry.id,
            entry.summary.updated.strftime("%Y-%m-%d %H:%M"),
            entry.summary.message_count,
            harness_core::excerpt(&entry.summary.summary, 60)
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Input, parse_input};

    #[test]
    fn commands_are_exact_and_a_double_slash_sends_a_leading_slash() {
        assert_eq!(parse_input("/sessions"), Input::Sessions);
        assert_eq!(parse_input("/session s2"), Input::Switch("s2"));
        assert_eq!(parse_input("/session"), Input::ShowSession);
        assert_eq!(parse_input("  /exit  "), Input::Exit);
        assert_eq!(parse_input("/sessionx"), Input::Unknown("/sessionx"));
        assert_eq!(parse_input("/new now"), Input::Unknown("/new now"));
        assert_eq!(parse_input("//etc/hosts"), Input::Message("/etc/hosts".into()));
        assert_eq!(parse_input("hello /new"), Input::Message("hello /new".into()));
        assert_eq!(parse_input("   "), Input::Empty);
        assert_eq!(parse_input("/help"), Input::Help);
    }
}
