//! `harness sessions …` and `harness memory …`: reading what the agent wrote.
//!
//! Sessions are read through [`harness::SessionReader`] (no agent, no model, nothing
//! created). A read-only command on a default workspace that does not exist yet finds
//! nothing and creates nothing; an explicit workspace that does not exist is an error.

use crate::output::Out;
use crate::{AgentArgs, WorkspaceArgs, env_lookup, parse_session, runtime, usage, workspace};
use anyhow::Context as _;
use harness::{HarnessAgent, WorkspaceLoader};
use harness_core::{RuntimeContext, SessionId, UserId};
use harness_memory::{ConsolidationOutcome, FlushOutcome, Memory, NamespaceKey};
use std::sync::Arc;

#[derive(clap::Subcommand)]
pub(crate) enum SessionsCommand {
    /// List the sessions of a user.
    List {
        #[command(flatten)]
        ws: WorkspaceArgs,
    },
    /// Print a session's transcript.
    Show {
        #[command(flatten)]
        ws: WorkspaceArgs,
        /// Session id.
        #[arg(value_parser = parse_session)]
        id: SessionId,
        /// Print raw JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Switch a session's permission mode (explore, dont_ask, default, accept_edits, bypass;
    /// `reset` for harness.toml's). Never above harness.toml's mode.
    Mode {
        #[command(flatten)]
        ws: WorkspaceArgs,
        /// Session id.
        #[arg(value_parser = parse_session)]
        id: SessionId,
        /// The mode, or `reset`.
        mode: String,
    },
    /// Find messages in a user's sessions (any of the words, case-insensitive).
    Search {
        #[command(flatten)]
        ws: WorkspaceArgs,
        /// Maximum hits.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// What to look for.
        query: String,
    },
}

#[derive(clap::Subcommand)]
pub(crate) enum MemoryCommand {
    /// Full-text search over MEMORY.md and the daily logs (CJK included). Scores are
    /// relative to the best hit (1.00).
    Search {
        #[command(flatten)]
        ws: WorkspaceArgs,
        /// Maximum hits.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// What to look for.
        query: String,
    },
    /// List what the memory screen quarantined (memory/.quarantine/: text, reason, source),
    /// or release an entry into today's daily log, or delete it. Quarantined text never
    /// reaches a prompt, MEMORY.md, the daily logs or memory search.
    Review {
        #[command(flatten)]
        ws: WorkspaceArgs,
        /// Release this entry: a person decided it is a fact; it is appended to today's
        /// daily log (session `review`) and kept by consolidation.
        #[arg(long, value_name = "ID", conflicts_with = "delete")]
        release: Option<String>,
        /// Delete this entry for good.
        #[arg(long, value_name = "ID")]
        delete: Option<String>,
    },
    /// Extract facts now from what is pending: every session of the user (or `--session`),
    /// each from its transcript past the extraction watermark, ignoring the throttle (uses
    /// the configured model).
    Extract {
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Merge new daily-log entries into MEMORY.md now (uses the configured model). The
    /// previous MEMORY.md is kept in memory/.history/ (the newest 10); an output that drops
    /// most of the current content without a `<!-- removed: ... -->` note is refused.
    Consolidate {
        #[command(flatten)]
        agent: AgentArgs,
    },
}

fn user_of(ws: &WorkspaceArgs) -> UserId {
    ws.user.clone().unwrap_or(harness_core::DEFAULT_USER_ID)
}

pub(crate) async fn reader(ws: &WorkspaceArgs) -> anyhow::Result<Option<harness::SessionReader>> {
    let workspace = workspace::resolve(ws.workspace.clone())?;
    if !workspace.exists {
        return Ok(None);
    }
    harness::SessionReader::open(&workspace.dir, ws.agent.as_deref())
        .await
        .map(Some)
        .map_err(|err| usage(harness_core::error_chain(&err)))
}

pub(crate) async fn sessions(command: SessionsCommand) -> anyhow::Result<()> {
    let mut out = Out::new();
    match command {
        SessionsCommand::List { ws } => {
            let listed = match reader(&ws).await? {
                Some(reader) => reader.list(&user_of(&ws)).await.map_err(|err| runtime(&err))?,
                None => Vec::new(),
            };
            if listed.is_empty() {
                out.line("no sessions")?;
            }
            for entry in listed {
                out.line(&format!(
                    "{}\t{}\t{} messages\t{}",
                    entry.id,
                    entry.summary.updated.strftime("%Y-%m-%d %H:%M:%S"),
                    entry.summary.message_count,
                    entry.summary.summary
                ))?;
                if out.closed() {
                    break;
                }
            }
        }
        SessionsCommand::Search { ws, limit, query } => {
            let hits = match reader(&ws).await? {
                Some(reader) => reader
                    .search(&user_of(&ws), &query, limit)
                    .await
                    .map_err(|err| runtime(&err))?,
                None => Vec::new(),
            };
            if hits.is_empty() {
                out.line("no matches")?;
            }
            for hit in hits {
                let role = match hit.role {
                    harness_core::Role::User => "user",
                    harness_core::Role::Assistant => "assistant",
                    harness_core::Role::System => "system",
                    harness_core::Role::Tool => "tool",
                };
                out.line(&format!("{}:{}\t{role}\t{}", hit.session, hit.line, hit.snippet))?;
                if out.closed() {
                    break;
                }
            }
        }
        SessionsCommand::Mode { ws, id, mode } => {
            let mode = match mode.as_str() {
                "reset" => None,
                name => Some(
                    serde_json::from_value::<harness::permissions::Mode>(name.into()).map_err(|_| {
                        usage(format!(
                            "unknown mode `{name}`; use explore, dont_ask, default, accept_edits, bypass or reset"
                        ))
                    })?,
                ),
            };
            let args = AgentArgs {
                ws: ws.clone(),
                session: Some(id.clone()),
                model: None,
                max_iters: None,
            };
            let agent = memory_agent(&args, false)
                .await?
                .ok_or_else(|| usage("the workspace does not exist (see `harness init`)"))?;
            let mut ctx = RuntimeContext::default();
            ctx.user_id = ws.user.clone();
            ctx.session_id = Some(id.clone());
            agent.set_permission_mode(mode, ctx).await.map_err(|err| match err {
                harness_core::AgentError::Refused { what } => usage(what),
                other => runtime(&other),
            })?;
            let name = mode.map_or("harness.toml's", harness::permissions::Mode::name);
            out.line(&format!("session {id}: permission mode {name}"))?;
        }
        SessionsCommand::Show { ws, id, json } => {
            let (messages, state) = match reader(&ws).await? {
                Some(reader) => {
                    let user = user_of(&ws);
                    let messages = reader.history(&user, &id).await.map_err(|err| runtime(&err))?;
                    let state = if messages.is_empty() || json {
                        None
                    } else {
                        reader.state(&user, &id).await.map_err(|err| runtime(&err))?
                    };
                    (messages, state)
                }
                None => (Vec::new(), None),
            };
            if messages.is_empty() {
                return Err(usage(format!(
                    "session {id} has no transcript (see `harness sessions list`)"
                )));
            }
            for msg in messages {
                let line = if json {
                    serde_json::to_string(&msg)?
                } else {
                    crate::chat::render_message(&msg)
                };
                out.line(&line)?;
                if out.closed() {
                    return Ok(());
                }
            }
            if let Some(state) = state {
                for line in session_status(&state) {
                    out.line(&line)?;
                }
            }
        }
    }
    Ok(())
}

/// What `sessions show` prints after the transcript: plan mode when it is active, and the
/// task list when there is one.
fn session_status(state: &harness_core::AgentState) -> Vec<String> {
    let mut lines = Vec::new();
    let plan = harness::plan_mode::PlanState::from_state(state);
    if plan.active {
        let file = plan
            .plan_file
            .map_or_else(|| "no plan written yet".to_owned(), |file| format!("plan in {file}"));
        lines.push(format!("plan mode: active ({file}; plan_exit waits for approval)"));
    }
    let session = harness_core::SessionState::from_extensions(&state.extensions);
    if let Some(mode) = session
        .get::<harness::permissions::SessionMode>()
        .unwrap_or_default()
        .mode
    {
        lines.push(format!("permission mode: {} (this session)", mode.name()));
    }
    if let Some(at) = harness::control::ShutdownCut::from_state(state).at {
        lines.push(format!(
            "interrupted by a shutdown at {at}: send the last message again to resume the cut turn"
        ));
    }
    let tasks = harness::task_list::TaskList::from_state(state);
    if !tasks.tasks.is_empty() {
        lines.push("task list:".to_owned());
        lines.extend(tasks.lines().into_iter().map(|line| format!("  {line}")));
    }
    lines
}

/// An agent for memory commands; a model is only needed (and required) to consolidate.
async fn memory_agent(args: &AgentArgs, need_model: bool) -> anyhow::Result<Option<HarnessAgent>> {
    let workspace = workspace::resolve(args.ws.workspace.clone())?;
    if !workspace.exists {
        return Ok(None);
    }
    let env = env_lookup;
    let loaded = WorkspaceLoader::new(&workspace.dir, &env)
        .register(harness_serve::SECTION)
        .register(harness_ops::SECTION)
        .register(harness_ops::RETENTION)
        .model(args.model.clone())
        .name(args.ws.agent.clone())
        .on_retry(Some(crate::progress::retry_observer()))
        .extensions(false)
        .load()
        .await
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    let memory_model = loaded.config.memory.as_ref().and_then(|m| m.model.as_ref()).is_some();
    let mut builder = loaded.builder;
    if loaded.model.is_none() {
        if need_model && !memory_model {
            return Err(usage(
                "memory extraction and consolidation need a model: pass --model provider:model, set HARNESS_MODEL, \
                 or set [memory] model",
            ));
        }
        // Search makes no model call, and consolidation uses `[memory] model`: the agent's
        // own model is never asked here.
        builder = builder.shared_model(Arc::new(harness_models::ScriptedModel::new()));
    }
    builder
        .build()
        .map(Some)
        .map_err(|err| usage(harness_core::error_chain(&err)))
}

pub(crate) async fn memory(command: MemoryCommand) -> anyhow::Result<()> {
    match command {
        MemoryCommand::Search { ws, limit, query } => memory_search(&ws, limit, &query).await,
        MemoryCommand::Review { ws, release, delete } => memory_review(&ws, release, delete).await,
        MemoryCommand::Extract { agent } => memory_run(agent, MemoryWork::Extract).await,
        MemoryCommand::Consolidate { agent } => memory_run(agent, MemoryWork::Consolidate).await,
    }
}

/// The caller's files and the workspace's memory, read without an agent or a model (the
/// workspace's model spec is never built); `None` when the default workspace does not exist.
async fn memory_files(ws: &WorkspaceArgs) -> anyhow::Result<Option<(harness_fs::CallWorkspace, NamespaceKey, Memory)>> {
    let Some(reader) = reader(ws).await? else {
        return Ok(None);
    };
    let memory = reader
        .memory()
        .ok_or_else(|| usage("memory is disabled ([memory] enabled = false)"))?;
    let (scope, files) = reader
        .call_files(&user_of(ws), None)
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    Ok(Some((files, NamespaceKey::for_scope(&scope), memory)))
}

/// `harness memory search`: the caller's layer with the shared files (the workspace's
/// MEMORY.md) showing through, as the prompt and `memory_search` see it.
async fn memory_search(ws: &WorkspaceArgs, limit: usize, query: &str) -> anyhow::Result<()> {
    let mut out = Out::new();
    let Some((call, namespace, memory)) = memory_files(ws).await? else {
        return out.line("no matches").map_err(Into::into);
    };
    let results = memory.search(Arc::clone(&call.layered), &namespace, query, limit).await;
    if let Some(note) = &results.note {
        eprintln!("note: {note}");
    }
    if results.hits.is_empty() {
        out.line("no matches")?;
    }
    let best = results.hits.iter().map(|h| h.score).fold(0.0_f64, f64::max);
    for hit in &results.hits {
        let relative = if best > 0.0 { hit.score / best } else { 1.0 };
        out.line(&format!("{}:{}\t{relative:.2}\t{}", hit.path, hit.line, hit.snippet))?;
        if out.closed() {
            break;
        }
    }
    memory.shutdown(std::time::Duration::from_secs(5)).await;
    Ok(())
}

/// `harness memory review`: lists, releases or deletes quarantined entries.
async fn memory_review(ws: &WorkspaceArgs, release: Option<String>, delete: Option<String>) -> anyhow::Result<()> {
    let mut out = Out::new();
    let Some((call, _, _)) = memory_files(ws).await? else {
        return match release.or(delete) {
            None => out.line("no quarantined memory entries").map_err(Into::into),
            Some(id) => Err(usage(format!(
                "no quarantined memory entry {id}: the workspace does not exist"
            ))),
        };
    };
    let fs = &*call.user;
    let not_found = |err: harness_memory::MemoryError| match err {
        harness_memory::MemoryError::NotQuarantined { .. } => usage(err.to_string()),
        other => runtime(&other),
    };
    if let Some(id) = release {
        match harness_memory::release_quarantined(fs, &id).await.map_err(not_found)? {
            harness_memory::Released::Written { path } => {
                out.line(&format!("released {id}: appended to {path}"))?;
            }
            _ => out.line(&format!(
                "released {id}: the fact was already in memory; nothing appended"
            ))?,
        }
    } else if let Some(id) = delete {
        let entry = harness_memory::delete_quarantined(fs, &id).await.map_err(not_found)?;
        out.line(&format!("deleted {id}: {}", shown(&entry.text)))?;
    } else {
        let entries = harness_memory::quarantined(fs).await.map_err(|err| runtime(&err))?;
        if entries.is_empty() {
            out.line("no quarantined memory entries")?;
        }
        for entry in &entries {
            let session = entry
                .session
                .as_deref()
                .map(|s| format!(", session {s}"))
                .unwrap_or_default();
            out.line(&format!(
                "{}\t{}\t{}{session}",
                entry.id,
                entry.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                entry.source
            ))?;
            out.line(&format!("  text:   {}", shown(&entry.text)))?;
            out.line(&format!("  reason: {}", entry.reason))?;
            if out.closed() {
                break;
            }
        }
        if !entries.is_empty() {
            out.line("release one with `harness memory review --release ID`, or `--delete ID`")?;
        }
    }
    Ok(())
}

/// What `memory extract|consolidate` does with the configured model.
enum MemoryWork {
    Extract,
    Consolidate,
}

/// `harness memory extract|consolidate`: these ask a model, so they build the agent.
async fn memory_run(args: AgentArgs, work: MemoryWork) -> anyhow::Result<()> {
    let mut out = Out::new();
    let Some(harness) = memory_agent(&args, true).await? else {
        return match work {
            MemoryWork::Extract => out.line("nothing to extract: no sessions").map_err(Into::into),
            MemoryWork::Consolidate => out.line("nothing to consolidate").map_err(Into::into),
        };
    };
    let memory = harness
        .memory()
        .ok_or_else(|| usage("memory is disabled ([memory] enabled = false)"))?;
    let mut ctx = RuntimeContext::default();
    ctx.user_id = args.ws.user.clone();
    ctx.session_id = args.session.clone();
    let ctx = harness
        .bind(ctx)
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    let call = ctx
        .get::<harness_fs::CallWorkspace>()
        .ok_or_else(|| anyhow::anyhow!("internal: the call has no workspace bound"))?;
    let namespace = harness_memory::NamespaceKey::for_call(&ctx).context("call scope not bound")?;
    match work {
        MemoryWork::Extract => {
            let scope = ctx
                .get::<harness_fs::CallScope>()
                .context("call scope not bound")?
                .clone();
            let sessions = match &args.session {
                Some(session) => vec![session.clone()],
                None => memory
                    .sessions_with_transcripts(&*call.user, &scope)
                    .await
                    .map_err(|err| runtime(&err))?,
            };
            if sessions.is_empty() {
                out.line("nothing to extract: no sessions")?;
            }
            for session in sessions {
                let scope = scope
                    .with_session(session.clone())
                    .map_err(|err| usage(harness_core::error_chain(&err)))?;
                let outcome = memory
                    .extract_pending(Arc::clone(&call.user), &scope)
                    .await
                    .map_err(|err| runtime(&err))?;
                out.line(&format!("{session}: {}", describe_flush(&outcome)))?;
                if out.closed() {
                    break;
                }
            }
        }
        MemoryWork::Consolidate => {
            let outcome = memory
                .consolidate(Arc::clone(&call.user), &namespace)
                .await
                .map_err(|err| runtime(&err))?;
            out.line(&describe(&outcome))?;
        }
    }
    crate::shutdown(&harness).await;
    Ok(())
}

/// Quarantined text for a terminal: quoted, with invisible and control characters escaped
/// so that nothing hidden is rendered (or acted on by the terminal).
fn shown(text: &str) -> String {
    format!("\"{}\"", text.escape_debug())
}

/// `; N line(s) quarantined (...)` when the screen refused any.
fn quarantine_note(count: usize) -> String {
    if count == 0 {
        String::new()
    } else {
        format!("; {count} line(s) did not pass the memory screen and were quarantined (`harness memory review`)")
    }
}

/// An extraction outcome as a sentence.
fn describe_flush(outcome: &FlushOutcome) -> String {
    match outcome {
        FlushOutcome::Skipped => "skipped: memory extraction is off ([memory] mode)".to_owned(),
        FlushOutcome::Empty => "nothing pending".to_owned(),
        FlushOutcome::NothingNew { refused, .. } => {
            format!("extracted; nothing new worth remembering{}", quarantine_note(*refused))
        }
        FlushOutcome::Written {
            path, facts, refused, ..
        } => {
            format!(
                "{facts} new fact{} written to {path}{}",
                if *facts == 1 { "" } else { "s" },
                quarantine_note(*refused)
            )
        }
        _ => format!("{outcome:?}"),
    }
}

/// A consolidation outcome as a sentence.
fn describe(outcome: &ConsolidationOutcome) -> String {
    match outcome {
        ConsolidationOutcome::NothingNew { last: None, .. } => {
            "nothing to consolidate: the daily logs have no entries yet (facts are extracted after turns)".to_owned()
        }
        ConsolidationOutcome::NothingNew { last: Some(at), merged } => format!(
            "nothing to consolidate: MEMORY.md already holds every daily-log entry ({merged} merged, the last \
             consolidation at {} — `run` consolidates what its extraction wrote)",
            at.strftime("%Y-%m-%d %H:%M:%S UTC")
        ),
        ConsolidationOutcome::Busy => "another process is consolidating this memory now; try again later".to_owned(),
        ConsolidationOutcome::Consolidated {
            entries,
            tokens,
            cut,
            dropped,
            more_pending,
        } => {
            let mut sentence = format!(
                "merged {entries} new entr{} into MEMORY.md (about {tokens} tokens)",
                if *entries == 1 { "y" } else { "ies" }
            );
            if *cut {
                sentence.push_str("; the model's text was over budget and was cut");
            }
            if *dropped > 0 {
                sentence.push_str(&quarantine_note(*dropped));
            }
            if *more_pending {
                sentence.push_str("; more entries are waiting: run it again");
            }
            sentence
        }
        _ => format!("{outcome:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_say_how_many_lines_were_quarantined_and_where_to_look() {
        let written = FlushOutcome::Written {
            path: "memory/2026-12-03.md".into(),
            facts: 1,
            duplicates: 0,
            refused: 2,
        };
        assert_eq!(
            describe_flush(&written),
            "1 new fact written to memory/2026-12-03.md; 2 line(s) did not pass the memory screen and were \
             quarantined (`harness memory review`)"
        );
        let nothing = FlushOutcome::NothingNew {
            duplicates: 0,
            refused: 0,
        };
        assert_eq!(describe_flush(&nothing), "extracted; nothing new worth remembering");
        assert_eq!(shown("a\u{200b}b\u{e0041}"), "\"a\\u{200b}b\\u{e0041}\"");
    }
}
