//! Human approval on the command line: how a waiting turn is shown (`harness run` exits 3),
//! `harness approve` (decisions from the flags, the model spec from the pending record) and
//! `--save` (the suggested rule into harness.toml, keeping the file's comments).

use crate::output::Out;
use crate::{AgentArgs, usage};
use harness::HarnessAgent;
use harness_core::{ApprovalDecision, PendingApproval, PendingCall, RuntimeContext};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// Exit status of a turn that waits for a person's approval.
pub(crate) const EXIT_WAITING: u8 = 3;

/// The turn ended waiting for approval (exit code 3; the pending calls were printed).
#[derive(Debug)]
pub(crate) struct AwaitingApproval;

impl std::fmt::Display for AwaitingApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the turn waits for approval")
    }
}

impl std::error::Error for AwaitingApproval {}

/// `harness approve`'s own flags.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ApproveArgs {
    /// Refuse the calls instead (the model is told a person refused).
    #[arg(long)]
    pub(crate) deny: bool,
    /// Approve and add each call's suggested rule to the session, so calls like it run
    /// without asking for the rest of the session.
    #[arg(long, conflicts_with = "deny")]
    pub(crate) always: bool,
    /// With --always: also add the rule to harness.toml `[permissions] allow`.
    #[arg(long, requires = "always")]
    pub(crate) save: bool,
    /// Run a call with edited arguments: CALL_ID={"command": "..."} (repeatable).
    #[arg(long = "args", value_name = "CALL_ID=JSON")]
    pub(crate) edits: Vec<String>,
    /// A note for the model (with --deny: why).
    #[arg(long)]
    pub(crate) note: Option<String>,
    /// Print one JSON event per line, like `harness run --json`.
    #[arg(long)]
    pub(crate) json: bool,
    /// The pending calls to decide (default: all of them).
    #[arg(value_name = "CALL_ID")]
    pub(crate) ids: Vec<String>,
}

/// The flags that point `harness approve` (or any command) at the same workspace, user and
/// session as `ws`, `user` and `session`, quoted for a POSIX shell; empty for the defaults.
pub(crate) fn target_flags(ws: Option<&std::path::Path>, user: Option<&str>, session: Option<&str>) -> String {
    let mut flags = String::new();
    if let Some(ws) = ws {
        flags.push_str(&format!(" --workspace {}", shell_word(&ws.display().to_string())));
    }
    for (flag, value) in [("--user", user), ("--session", session)] {
        if let Some(value) = value {
            flags.push_str(&format!(" {flag} {}", shell_word(value)));
        }
    }
    flags
}

/// `word` as one POSIX shell word: as is when it is plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-' | '_' | ':' | '@' | '+' | '='));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Prints the pending calls and how to decide them; `target` is [`target_flags`].
pub(crate) fn print_pending(out: &mut Out, pending: &PendingApproval, target: &str) -> std::io::Result<()> {
    out.line(&format!(
        "waiting for approval: {} call(s) did not run",
        pending.calls.len()
    ))?;
    for call in &pending.calls {
        out.line(&format!("  call {}: {} {}", call.id, call.tool, call.input))?;
        if !call.reason.is_empty() {
            out.line(&format!("    why: {}", call.reason))?;
        }
        if let Some(rule) = &call.suggestion {
            out.line(&format!("    rule that would allow it: {rule}"))?;
        }
        // A subagent's ask: what the child wants to run; the decision is forwarded to it.
        if let Some(child) = &call.child {
            for asked in &child.calls {
                out.line(&format!(
                    "    subagent {} (session {}) wants: {} {}",
                    child.agent_id, child.session_id, asked.tool, asked.input
                ))?;
            }
        }
    }
    out.line(&format!(
        "decide with: harness approve{target} [CALL_ID…]  (--deny refuses, --always also allows calls like it in this session)"
    ))
}

/// One JSON line per pending call: an `approval_required` event listing that call.
pub(crate) fn pending_lines(calls: &[PendingCall]) -> anyhow::Result<Vec<String>> {
    calls
        .iter()
        .map(|call| {
            let event = harness_protocol::WireEvent::own(harness_protocol::WireKind::ApprovalRequired {
                calls: vec![call.clone()],
            });
            Ok(serde_json::to_string(&event)?)
        })
        .collect()
}

/// The decisions the flags describe, checked against what is pending.
///
/// # Errors
/// A usage error for an unknown id, an `--args` without `=` or with bad JSON, or edits
/// with `--deny`.
pub(crate) fn decisions(args: &ApproveArgs, pending: &PendingApproval) -> anyhow::Result<Vec<ApprovalDecision>> {
    let known = || {
        pending
            .calls
            .iter()
            .map(|call| call.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ids: Vec<String> = if args.ids.is_empty() {
        pending.calls.iter().map(|call| call.id.clone()).collect()
    } else {
        for id in &args.ids {
            if pending.call(id).is_none() {
                return Err(usage(format!(
                    "call `{id}` is not waiting for approval; pending: {}",
                    known()
                )));
            }
        }
        args.ids.clone()
    };
    let mut edits: Vec<(String, Value)> = Vec::new();
    for edit in &args.edits {
        let Some((id, json)) = edit.split_once('=') else {
            return Err(usage(format!(
                "--args `{edit}`: expected CALL_ID=JSON, e.g. --args call_1='{{\"command\": \"ls\"}}'"
            )));
        };
        if !ids.iter().any(|known| known == id) {
            return Err(usage(format!(
                "--args: call `{id}` is not among the calls being decided; pending: {}",
                known()
            )));
        }
        let value: Value = serde_json::from_str(json)
            .map_err(|err| usage(format!("--args {id}: the arguments are not valid JSON ({err})")))?;
        if !value.is_object() {
            return Err(usage(format!(
                "--args {id}: the arguments must be a JSON object, like the call's own"
            )));
        }
        edits.push((id.to_owned(), value));
    }
    if args.deny && !edits.is_empty() {
        return Err(usage("--args edits a call to run it; it makes no sense with --deny"));
    }
    Ok(ids
        .into_iter()
        .map(|id| {
            let mut decision = if args.deny {
                ApprovalDecision::deny(&id)
            } else if args.always {
                ApprovalDecision::approve_always(&id)
            } else {
                ApprovalDecision::approve(&id)
            };
            if let Some((_, input)) = edits.iter().find(|(edited, _)| *edited == id) {
                decision = decision.with_input(input.clone());
            }
            if let Some(note) = &args.note {
                decision = decision.with_note(note.clone());
            }
            decision
        })
        .collect())
}

/// Reads the pending approval of the session `args` names, without a model call: the agent
/// is built with the configured model, or with one that refuses every request when none is
/// configured (the record says which model to resume with).
pub(crate) async fn read_pending(args: &AgentArgs, ctx: &RuntimeContext) -> anyhow::Result<PendingApproval> {
    let workspace = crate::workspace::resolve(args.ws.workspace.clone())?;
    if !workspace.exists {
        return Ok(PendingApproval::default());
    }
    let env = crate::env_lookup;
    let loaded = harness::WorkspaceLoader::new(&workspace.dir, &env)
        .register(harness_serve::SECTION)
        .register(harness_ops::SECTION)
        .register(harness_ops::RETENTION)
        .model(args.model.clone())
        .name(args.ws.agent.clone())
        .extensions(false)
        .load()
        .await
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    let mut builder = loaded.builder;
    if loaded.model.is_none() {
        builder = builder.shared_model(Arc::new(NoModel));
    }
    let agent: HarnessAgent = builder.build().map_err(|err| usage(harness_core::error_chain(&err)))?;
    let pending = agent
        .pending_approval(ctx.clone())
        .await
        .map_err(|err| crate::runtime(&err));
    agent.shutdown(std::time::Duration::ZERO).await;
    pending
}

/// Stands in for the model while only the session state is read; never asked.
struct NoModel;

#[harness_core::async_trait]
impl harness_core::ChatModel for NoModel {
    fn name(&self) -> &str {
        "none"
    }

    async fn stream(
        &self,
        _request: harness_core::ChatRequest,
    ) -> Result<harness_core::ModelStream, harness_core::ModelError> {
        Err(harness_core::ModelError::InvalidRequest {
            status: 0,
            message: "no model is configured; pass --model".to_owned(),
        })
    }
}

/// Adds `rules` to `[permissions] allow` in `dir`'s harness.toml, creating the file or the
/// section when missing and keeping everything else (comments, order, layout) as it is.
/// Returns the rules it added (the ones already there are skipped).
///
/// # Errors
/// The file cannot be read or written, is not valid TOML, or has a layout this edit cannot
/// follow (then nothing is written and the message says what to add by hand).
pub(crate) fn save_rules(dir: &Path, rules: &[String]) -> anyhow::Result<Vec<String>> {
    let path = dir.join(harness::config::CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(anyhow::anyhow!("cannot read {}: {err}", path.display())),
    };
    let existing = allow_rules(&text).map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?;
    let added: Vec<String> = rules
        .iter()
        .filter(|rule| !existing.iter().any(|known| known == *rule))
        .fold(Vec::new(), |mut added, rule| {
            if !added.contains(rule) {
                added.push(rule.clone());
            }
            added
        });
    if added.is_empty() {
        return Ok(added);
    }
    let edited = insert_rules(&text, &added);
    let by_hand = || {
        anyhow::anyhow!(
            "cannot add the rule(s) to {} automatically; add {} to [permissions] allow yourself",
            path.display(),
            added
                .iter()
                .map(|rule| format!("\"{rule}\""))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let Some(edited) = edited else {
        return Err(by_hand());
    };
    // The edit must parse and hold exactly the old rules plus the new ones.
    match allow_rules(&edited) {
        Ok(now) if now.len() == existing.len() + added.len() && added.iter().all(|rule| now.contains(rule)) => {}
        _ => return Err(by_hand()),
    }
    std::fs::write(&path, edited).map_err(|err| anyhow::anyhow!("cannot write {}: {err}", path.display()))?;
    Ok(added)
}

/// The `[permissions] allow` rules of a harness.toml text.
fn allow_rules(text: &str) -> Result<Vec<String>, String> {
    let table: toml::Table = toml::from_str(text).map_err(|err| err.to_string())?;
    Ok(table
        .get("permissions")
        .and_then(|section| section.get("allow"))
        .and_then(toml::Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .filter_map(|rule| rule.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// `text` with `rules` added to `[permissions] allow`, or `None` when the layout is one this
/// line-based edit does not handle (a dotted or inline `permissions` key).
fn insert_rules(text: &str, rules: &[String]) -> Option<String> {
    let quoted: Vec<String> = rules.iter().map(|rule| toml_quote(rule)).collect();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let header = lines.iter().position(|line| {
        line.trim_start()
            .strip_prefix("[permissions]")
            .is_some_and(|rest| rest.trim().is_empty() || rest.trim_start().starts_with('#'))
    });
    let Some(header) = header else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("[permissions]\nallow = [{}]\n", quoted.join(", ")));
        return Some(out);
    };
    let end = lines[header + 1..]
        .iter()
        .position(|line| line.trim_start().starts_with('['))
        .map_or(lines.len(), |at| header + 1 + at);
    let allow = (header + 1..end).find(|&at| {
        let line = lines[at].trim_start();
        line.strip_prefix("allow")
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    });
    let mut out = String::with_capacity(text.len() + 64);
    match allow {
        None => {
            for (at, line) in lines.iter().enumerate() {
                out.push_str(line);
                if at == header {
                    if !line.ends_with('\n') {
                        out.push('\n');
                    }
                    out.push_str(&format!("allow = [{}]\n", quoted.join(", ")));
                }
            }
        }
        Some(start) => {
            // The array's closing bracket: the first `]` outside a string from the `=` on.
            let joined: String = lines[start..end].concat();
            let open = joined.find('=')? + joined[joined.find('=')?..].find('[')?;
            let close = closing_bracket(&joined, open)?;
            let inside = joined[open + 1..close].trim_end();
            let has_items = inside
                .trim_start_matches(|c: char| c == '[' || c.is_whitespace())
                .trim()
                .chars()
                .any(|c| c == '"' || c == '\'');
            let trailing_comma = inside.ends_with(',');
            let mut insertion = String::new();
            if has_items && !trailing_comma {
                insertion.push_str(", ");
            } else if has_items {
                insertion.push(' ');
            }
            insertion.push_str(&quoted.join(", "));
            let at = open + 1 + inside.len();
            let mut edited = joined.clone();
            edited.insert_str(at, &insertion);
            for line in &lines[..start] {
                out.push_str(line);
            }
            out.push_str(&edited);
            for line in &lines[end..] {
                out.push_str(line);
            }
        }
    }
    Some(out)
}

/// The index of the `]` that closes the array opening at `open`, skipping strings and
/// comments.
fn closing_bracket(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut chars = text.char_indices().skip_while(|(at, _)| *at < open).peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at);
                }
            }
            '"' | '\'' => {
                let mut escaped = false;
                for (_, inner) in chars.by_ref() {
                    if c == '"' && inner == '\\' && !escaped {
                        escaped = true;
                        continue;
                    }
                    if inner == c && !escaped {
                        break;
                    }
                    escaped = false;
                }
            }
            '#' => {
                for (_, inner) in chars.by_ref() {
                    if inner == '\n' {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` as a TOML basic string.
fn toml_quote(text: &str) -> String {
    crate::toml_string(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn saved(text: &str, rules: &[&str]) -> String {
        let rules: Vec<String> = rules.iter().map(|rule| (*rule).to_owned()).collect();
        insert_rules(text, &rules).unwrap()
    }

    #[test]
    fn a_file_without_the_section_gets_one_and_keeps_its_comments() {
        let text = "# my agent\n[agent]\nmodel = \"openai:gpt-4o-mini\" # the model\n";
        let out = saved(text, &["execute(git status*)"]);
        assert!(out.starts_with(text), "{out}");
        assert_eq!(allow_rules(&out).unwrap(), ["execute(git status*)"]);
        assert_eq!(saved("", &["execute"]), "[permissions]\nallow = [\"execute\"]\n");
    }

    #[test]
    fn an_existing_list_grows_in_place_single_or_multi_line() {
        let text =
            "[permissions]\n# rules\nmode = \"default\"\nallow = [\"read_file\"] # keep\n\n[agent]\nname = \"a\"\n";
        let out = saved(text, &["execute(ls*)"]);
        assert_eq!(
            out,
            "[permissions]\n# rules\nmode = \"default\"\nallow = [\"read_file\", \"execute(ls*)\"] # keep\n\n[agent]\nname = \"a\"\n"
        );
        let text = "[permissions]\nallow = [\n  \"a]b\", # a comment with ]\n  \"c\",\n]\ndeny = []\n";
        let out = saved(text, &["execute"]);
        assert_eq!(allow_rules(&out).unwrap(), ["a]b", "c", "execute"]);
        assert!(out.contains("# a comment with ]"));
        let text = "[permissions] # the rules\nmode = \"default\"\n";
        let out = saved(text, &["execute"]);
        assert_eq!(
            out,
            "[permissions] # the rules\nallow = [\"execute\"]\nmode = \"default\"\n"
        );
        let out = saved("[permissions]\nallow = []\n", &["x", "y"]);
        assert_eq!(allow_rules(&out).unwrap(), ["x", "y"]);
    }

    #[test]
    fn save_rules_skips_known_rules_and_refuses_layouts_it_cannot_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("harness.toml");
        std::fs::write(&path, "[permissions]\nallow = [\"execute(ls*)\"]\n").unwrap();
        let added = save_rules(dir.path(), &["execute(ls*)".into(), "execute(pwd*)".into()]).unwrap();
        assert_eq!(added, ["execute(pwd*)"]);
        assert_eq!(
            allow_rules(&std::fs::read_to_string(&path).unwrap()).unwrap(),
            ["execute(ls*)", "execute(pwd*)"]
        );
        std::fs::write(&path, "permissions = { allow = [\"a\"] }\n").unwrap();
        let err = save_rules(dir.path(), &["b".into()]).unwrap_err().to_string();
        assert!(err.contains("add \"b\" to [permissions] allow yourself"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "permissions = { allow = [\"a\"] }\n",
            "nothing written"
        );
    }
}
