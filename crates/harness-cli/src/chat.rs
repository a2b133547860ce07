//! `harness chat`: an interactive REPL that streams tokens.

use futures::StreamExt;
use harness::HarnessAgent;
use harness_core::{Block, CancellationToken, EventKind, Msg, Role, RuntimeContext, SessionId};
use std::io::Write as _;

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

async fn read_line(
    editor: std::sync::Arc<std::sync::Mutex<rustyline::DefaultEditor>>,
    prompt: String,
) -> anyhow::Result<Option<String>> {
    tokio::task::spawn_blocking(move || {
        let mut editor = editor.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match editor.readline(&prompt) {
            Ok(line) => {
                let _ = editor.add_history_entry(line.as_str());
                Ok(Some(line))
            }
            Err(rustyline::error::ReadlineError::Interrupted) => Ok(Some(String::new())),
            Err(rustyline::error::ReadlineError::Eof) => Ok(None),
            Err(err) => Err(anyhow::Error::new(err)),
        }
    })
    .await?
}

pub(crate) async fn chat(agent: HarnessAgent, base: RuntimeContext) -> anyhow::Result<()> {
    let editor = std::sync::Arc::new(std::sync::Mutex::new(rustyline::DefaultEditor::new()?));
    let mut session = base
        .session_id
        .clone()
        .unwrap_or_else(|| SessionId::new(harness_core::DEFAULT_SESSION));
    println!(
        "harness chat — session {session}. /session ID switches, /new starts a session, /exit quits; Ctrl-C cancels a turn."
    );
    loop {
        let Some(line) = read_line(editor.clone(), format!("{session}> ")).await? else {
            break;
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/new" => {
                session = SessionId::new(format!("s-{}", jiff::Timestamp::now().as_millisecond()));
                println!("new session {session}");
                continue;
            }
            _ if line.starts_with("/session") => {
                let id = line.trim_start_matches("/session").trim();
                match SessionId::parse(id) {
                    Ok(id) => {
                        session = id;
                        println!("session {session}");
                    }
                    Err(err) => println!("error: {err}"),
                }
                continue;
            }
            _ if line.starts_with('/') => {
                println!("unknown command {line}; use /session ID, /new or /exit");
                continue;
            }
            _ => {}
        }
        let cancel = CancellationToken::new();
        let mut ctx = base.clone().with_cancellation(cancel.clone());
        ctx.session_id = Some(session.clone());
        let mut events = agent.stream(line, ctx);
        let mut stdout = std::io::stdout();
        let mut at_line_start = true;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = tokio::signal::ctrl_c(), if !cancel.is_cancelled() => {
                    cancel.cancel();
                    println!("\n(cancelling…)");
                    continue;
                }
            };
            let Some(event) = event else { break };
            match event.kind {
                EventKind::TextDelta { delta } => {
                    print!("{delta}");
                    at_line_start = delta.ends_with('\n');
                    stdout.flush()?;
                }
                EventKind::ToolCallEnd { name, input, .. } => {
                    if !at_line_start {
                        println!();
                    }
                    println!("  → {name}({})", harness_core::excerpt(&input.to_string(), 120));
                    at_line_start = true;
                }
                EventKind::ToolResult { content, is_error, .. } => {
                    let text: Vec<&str> = content.iter().filter_map(Block::as_text).collect();
                    let mark = if is_error { "✗" } else { "←" };
                    println!(
                        "  {mark} {}",
                        harness_core::excerpt(&text.join(" ").replace('\n', " "), 120)
                    );
                }
                EventKind::Warning { message, .. } => eprintln!("warning: {message}"),
                EventKind::Error { message, .. } => {
                    if !at_line_start {
                        println!();
                    }
                    println!("error: {message}");
                    at_line_start = true;
                }
                EventKind::Final { .. } => {
                    if !at_line_start {
                        println!();
                    }
                    at_line_start = true;
                }
                _ => {}
            }
        }
    }
    Ok(())
}
