//! `harness demo`: three turns on the scripted model in a fresh workspace, showing the persona
//! injected, the history sent on turn 2, a delegation to a subagent on turn 3 (a child
//! researches, the parent answers) and the files written.

use crate::output::Out;
use harness::HarnessAgent;
use harness_core::{ChatRequest, Role, RuntimeContext};
use harness_models::{Reply, ScriptedModel};
use std::path::{Path, PathBuf};

const PERSONA: &str = "# Persona\n\nYou are Harness Demo, a friendly assistant who remembers what people tell you\nand answers in one or two sentences.\n";
const TURN_1: &str = "My name is Tianyu; today I am giving a talk about ReAct.";
const TURN_2: &str = "What is my name and what am I doing today?";
const TURN_3: &str = "Ask your researcher: what does ReAct stand for?";
const RESEARCHER: &str = "You are the demo researcher: you look things up and answer in one line.";

/// The text after `marker` up to the next `;` or `.`.
fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let start = text.find(marker)? + marker.len();
    let rest = &text[start..];
    let end = rest.find([';', '.']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// A scripted model that answers from the conversation it is sent: turn 2's answer can
/// only be right if turn 1 is in the request. It also plays the memory extractor and
/// consolidator, so the demo shows facts landing in the daily log and MEMORY.md.
fn demo_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let system = request.system.render();
        let users: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| m.text())
            .collect();
        let last = users.last().cloned().unwrap_or_default();
        if system.contains("You extract durable facts") {
            let mut facts = Vec::new();
            if let Some(name) = after(&last, "My name is") {
                facts.push(format!("- The user's name is {name}."));
            }
            if let Some(plan) = after(&last, "today I am") {
                facts.push(format!("- Today the user is {plan}."));
            }
            let ledger = last.split("</ledger>").next().unwrap_or_default();
            facts.retain(|fact| !ledger.contains(fact.trim_start_matches("- ")));
            return Reply::text(if facts.is_empty() {
                "NO_REPLY".to_owned()
            } else {
                facts.join("\n")
            });
        }
        if system.contains(RESEARCHER) {
            return Reply::text("ReAct stands for Reasoning + Acting: the model interleaves thoughts with tool calls.");
        }
        if let Some(result) = request.messages.last().filter(|m| m.role == Role::Tool) {
            let text: String = result
                .content
                .iter()
                .filter_map(|block| match block {
                    harness_core::Block::ToolResult { content, .. } => Some(harness_core::join_text(content)),
                    _ => None,
                })
                .collect();
            let found = text
                .lines()
                .find(|line| line.contains("ReAct stands for"))
                .unwrap_or("the researcher found nothing");
            return Reply::text(format!("My researcher says: {found}"));
        }
        if last.contains("what does ReAct stand for") {
            return Reply::tool_call(
                "agent_spawn",
                serde_json::json!({"agent_id": "researcher", "task": "What does ReAct stand for?"}),
            );
        }
        if system.contains("You maintain MEMORY.md") {
            let facts: Vec<String> = last
                .lines()
                .filter(|line| line.trim_start().starts_with("- "))
                .map(|line| line.split("<!--").next().unwrap_or(line).trim_end().to_owned())
                .collect();
            return Reply::text(format!("## About the user\n{}", facts.join("\n")));
        }
        let name = users
            .iter()
            .find_map(|text| after(text, "My name is").map(str::to_owned));
        let plan = users
            .iter()
            .find_map(|text| after(text, "today I am").map(str::to_owned));
        if last.contains("What is my name") {
            match (name, plan) {
                (Some(name), Some(plan)) => Reply::text(format!("Your name is {name}, and today you are {plan}.")),
                _ => Reply::text("I don't know yet: nobody told me in this conversation."),
            }
        } else {
            let name = name.unwrap_or_else(|| "there".into());
            Reply::text(format!("Nice to meet you, {name}! Good luck with the talk."))
        }
    })
}

fn list_files(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|entry| entry.path());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            list_files(root, &path, out);
        } else if let Ok(meta) = entry.metadata() {
            out.push((path.strip_prefix(root).unwrap_or(&path).to_owned(), meta.len()));
        }
    }
}

pub(crate) async fn demo(workspace: Option<PathBuf>) -> anyhow::Result<()> {
    let root = match workspace {
        Some(dir) => dir,
        None => tempfile::Builder::new().prefix("harness-demo-").tempdir()?.keep(),
    };
    harness::init_workspace(&root)?;
    let agents_md = root.join("AGENTS.md");
    if std::fs::read_to_string(&agents_md)
        .map(|text| text == harness::workspace::AGENTS_TEMPLATE)
        .unwrap_or(true)
    {
        std::fs::write(&agents_md, PERSONA)?;
    }
    let model = demo_model();
    let agent = HarnessAgent::builder()
        .workspace(&root)
        .model(model.clone())
        .subagent(harness::subagents::SubagentDeclaration::new(
            "researcher",
            "Looks facts up and answers in one line",
            RESEARCHER,
        ))
        .build()?;
    let ctx = || {
        RuntimeContext::for_user(harness_core::UserId::from_static("tianyu"))
            .with_session(harness_core::SessionId::from_static("demo"))
    };
    let mut out = Out::new();
    // Through a handle: a closed pipe (`harness demo | head`) ends the output quietly.
    macro_rules! say {
        ($($arg:tt)*) => { out.line(&format!($($arg)*))? };
    }

    say!(
        "Harness demo — offline, scripted model\nworkspace: {}\n",
        root.display()
    );
    say!(
        "persona (AGENTS.md):\n{}",
        indent(&std::fs::read_to_string(&agents_md)?)
    );
    for (n, message) in [TURN_1, TURN_2].into_iter().enumerate() {
        let reply = agent.call(message, ctx()).await?;
        say!(
            "── turn {} ──\n  user:      {message}\n  assistant: {}\n",
            n + 1,
            reply.text()
        );
    }

    let requests = model.requests();
    let turn2 = requests
        .iter()
        .rev()
        .find(|request| request.system.render().contains("## Session Context"))
        .ok_or_else(|| anyhow::anyhow!("the model received no request"))?
        .clone();

    // Delegation: the parent spawns the researcher (a child agent with its own session),
    // whose answer comes back as the spawn's tool result.
    let mut delegated = false;
    let mut events = agent.stream(TURN_3, ctx());
    say!("── turn 3 (delegation) ──\n  user:      {TURN_3}");
    while let Some(event) = futures::StreamExt::next(&mut events).await {
        match (&event.source, &event.kind) {
            (Some(source), kind) => {
                if let Some(line) = crate::chat::child_line(source, kind) {
                    delegated = true;
                    say!("{line}");
                }
            }
            (None, harness_core::EventKind::ToolCallEnd { name, .. }) => say!("  → {name}"),
            (None, harness_core::EventKind::Final { message }) => say!("  assistant: {}\n", message.text()),
            _ => {}
        }
    }

    // Pending memory extraction finishes before the files are listed.
    agent.shutdown(std::time::Duration::from_secs(10)).await;
    let system = turn2.system.render();
    let persona_injected = system.contains("You are Harness Demo");
    say!("turn 2's model request:");
    say!(
        "  system prompt: {} bytes; persona injected: {}",
        system.len(),
        if persona_injected { "yes" } else { "NO" }
    );
    if let Some(start) = system.find("<agents_context>") {
        let end = system[start..]
            .find("</agents_context>")
            .map_or(system.len(), |at| start + at + "</agents_context>".len());
        say!("{}", indent(&system[start..end]));
    }
    say!("  messages ({}):", turn2.messages.len());
    for msg in &turn2.messages {
        say!("    [{:?}] {}", msg.role, msg.text());
    }
    let mut files = Vec::new();
    list_files(&root, &root, &mut files);
    say!("\nfiles in the workspace:");
    for (path, size) in files {
        say!("  {:>7} B  {}", size, path.display());
    }
    let memory_dir = root.join("tianyu").join("memory");
    if let Ok(entries) = std::fs::read_dir(&memory_dir) {
        for entry in entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        {
            let shown = entry
                .path()
                .strip_prefix(&root)
                .map(Path::to_path_buf)
                .unwrap_or_else(|_| entry.path());
            say!(
                "\nfacts extracted in the background after each turn, {}:",
                shown.display()
            );
            say!("{}", indent(&std::fs::read_to_string(entry.path()).unwrap_or_default()));
        }
    }
    if let Ok(memory) = std::fs::read_to_string(root.join("tianyu").join("MEMORY.md")) {
        say!(
            "\nconsolidated into tianyu/MEMORY.md (injected into later prompts):\n{}",
            indent(&memory)
        );
    }
    say!(
        "\nContinue this conversation with a real model:\n  harness run --workspace {} --user tianyu --session demo --model openai:gpt-4o-mini \"...\"",
        root.display()
    );
    if !delegated {
        anyhow::bail!("the demo's delegation step did not run the researcher");
    }
    if !persona_injected || turn2.messages.iter().filter(|m| m.role == Role::User).count() < 2 {
        anyhow::bail!("the demo did not see the persona or the history in turn 2's request");
    }
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}
