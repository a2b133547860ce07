//! Compatibility: workspaces and Redis / PostgreSQL state written by commit 4d795d4 (the
//! fixtures in `tests/fixtures/4d795d4/`, made with that commit's binary by its `make.sh`)
//! load with today's binary, list their sessions and history, and continue: one more turn
//! appends to an old session, the old pending approval can be decided, the old subagent task
//! and plan are seen.

use crate::cli::{harness, script, text};
use harness_test_support::openai::FakeOpenAi;
use harness_test_support::services::{PgPrefix, RedisPrefix};
use std::path::{Path, PathBuf};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/4d795d4");
/// What make.sh put before every Redis key and PostgreSQL table, and the URLs it used.
const OLD_REDIS_PREFIX: &str = "fixture4d7:";
const OLD_PG_PREFIX: &str = "fixture4d7_";
const OLD_REDIS_URL: &str = "redis://127.0.0.1:6379";
const OLD_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

#[derive(Clone, Copy, Debug)]
enum Backend {
    Files,
    Redis,
    Postgres,
}

/// A fixture restored into a scratch copy: the workspace, and the guards that remove the
/// restored keys or tables when the test ends.
struct Restored {
    dir: tempfile::TempDir,
    ws: PathBuf,
    _keys: Option<RedisPrefix>,
    _tables: Option<PgPrefix>,
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The fixture of `backend`, restored under fresh prefixes; harness.toml is pointed at them.
fn restore(backend: Backend) -> Restored {
    let name = match backend {
        Backend::Files => "files",
        Backend::Redis => "redis",
        Backend::Postgres => "postgres",
    };
    let fixture = Path::new(FIXTURES).join(name);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    copy_tree(&fixture.join("workspace"), &ws);
    let config = std::fs::read_to_string(ws.join("harness.toml")).unwrap();
    let (config, keys, tables) = match backend {
        Backend::Files => (config, None, None),
        Backend::Redis => {
            let keys = RedisPrefix::new("compat");
            let dump: serde_json::Value =
                serde_json::from_slice(&std::fs::read(fixture.join("keys.json")).unwrap()).unwrap();
            assert_eq!(dump["prefix"], OLD_REDIS_PREFIX);
            assert!(keys.restore(&dump) > 0, "the dump has keys");
            let config = config
                .replace(OLD_REDIS_URL, keys.url())
                .replace(OLD_REDIS_PREFIX, keys.prefix());
            (config, Some(keys), None)
        }
        Backend::Postgres => {
            let tables = PgPrefix::new("compat");
            let sql = std::fs::read_to_string(fixture.join("tables.sql")).unwrap();
            let made = tables.restore(&sql, OLD_PG_PREFIX);
            assert!(made.iter().any(|name| name.ends_with("_states")), "{made:?}");
            let config = config
                .replace(OLD_PG_URL, tables.url())
                .replace(OLD_PG_PREFIX, tables.prefix());
            (config, None, Some(tables))
        }
    };
    std::fs::write(ws.join("harness.toml"), config).unwrap();
    Restored {
        dir,
        ws,
        _keys: keys,
        _tables: tables,
    }
}

impl Restored {
    /// Runs `harness ARGS --workspace WS` and returns stdout, asserting the exit code.
    fn cli(&self, args: &[&str], code: i32) -> String {
        let output = harness().args(args).arg("--workspace").arg(&self.ws).output().unwrap();
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(code), "{args:?}\n{stdout}\n{stderr}");
        stdout
    }

    /// A scripted model of `replies` (JSON objects), with nothing left for anything unplanned.
    fn model(&self, replies: &str) -> String {
        script(
            self.dir.path(),
            &format!(r#"{{"fallback": "fail", "replies": [{replies}]}}"#),
        )
    }

    /// The messages of a session as `harness sessions show ID --json` prints them.
    fn messages(&self, session: &str) -> Vec<serde_json::Value> {
        self.cli(&["sessions", "show", session, "--json"], 0)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

fn texts(messages: &[serde_json::Value]) -> Vec<String> {
    messages
        .iter()
        .map(|message| {
            let parts = message["content"].as_array().cloned().unwrap_or_default();
            let text: Vec<String> = parts
                .iter()
                .filter_map(|part| part["text"].as_str().map(str::to_owned))
                .collect();
            format!("{}: {}", message["role"].as_str().unwrap_or("?"), text.join(""))
        })
        .collect()
}

/// Everything a 4d795d4 workspace holds still works on `backend`.
fn an_old_workspace_loads_and_continues(backend: Backend) {
    let old = restore(backend);

    // The sessions are listed, and the old history is shown.
    let listing = old.cli(&["sessions", "list"], 0);
    for session in ["s1", "s2", "s3", "s4"] {
        assert!(listing.contains(session), "{backend:?}: {listing}");
    }
    let before = old.messages("s1");
    assert_eq!(
        texts(&before),
        [
            "user: Hi, I am Ada and I drink green tea every morning.",
            "assistant: Nice to meet you, Ada.",
            "user: What do I drink?",
            "assistant: You drink green tea.",
        ],
        "{backend:?}"
    );

    // One more turn continues the old context (the model is sent the old messages) and
    // appends to the old session.
    let server = FakeOpenAi::replying("Your name is Ada.");
    let output = harness()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", server.base_url())
        .args(["run", "--session", "s1", "--model", "openai:fake", "--workspace"])
        .arg(&old.ws)
        .arg("What is my name?")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{backend:?}: {stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "Your name is Ada.", "{backend:?}");
    let requests = server.requests();
    let turn = requests
        .iter()
        .find(|request| request["tools"].as_array().is_some_and(|tools| !tools.is_empty()))
        .unwrap_or_else(|| panic!("{backend:?}: no turn request in {requests:?}"));
    let sent: Vec<String> = turn["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            format!(
                "{}: {}",
                m["role"].as_str().unwrap_or("?"),
                m["content"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            "user: Hi, I am Ada and I drink green tea every morning.",
            "assistant: Nice to meet you, Ada.",
            "user: What do I drink?",
            "assistant: You drink green tea.",
            "user: What is my name?",
        ],
        "{backend:?}: the old context is continued"
    );
    let after = old.messages("s1");
    assert_eq!(
        after[..before.len()],
        before[..],
        "{backend:?}: the old messages are kept as they were"
    );
    assert_eq!(
        texts(&after[before.len()..]),
        ["user: What is my name?", "assistant: Your name is Ada."],
        "{backend:?}"
    );

    // Memory: the daily log and MEMORY.md written then are searched now.
    let found = old.cli(&["memory", "search", "green tea"], 0);
    assert!(found.contains("MEMORY.md"), "{backend:?}: {found}");
    assert!(found.contains("memory/"), "{backend:?}: the daily log: {found}");

    // The subagent task recorded then is listed to the model now (the task tools are an
    // on-demand group: activated first).
    let model = old.model(
        r#"{"tool_calls": [{"id": "t0", "name": "activate_tool_group", "arguments": {"group": "tasks"}}]}, {"tool_calls": [{"id": "t1", "name": "task_list", "arguments": {}}]}, {"text": "one task"}, {"text": "NO_REPLY"}"#,
    );
    let earlier = old.messages("s2").len();
    old.cli(&["run", "--session", "s2", "--model", &model, "Which tasks ran?"], 0);
    // Only the new messages: the old ones name the task too.
    let listed = serde_json::to_string(&old.messages("s2")[earlier..]).unwrap();
    assert!(
        listed.contains("researcher") && listed.contains("tides") && listed.contains("completed"),
        "{backend:?}: {listed}"
    );

    // Plan mode, the plan and the task list of then are shown now.
    let shown = old.cli(&["sessions", "show", "s3"], 0);
    assert!(shown.contains("plan mode: active"), "{backend:?}: {shown}");
    assert!(shown.contains("[x] read the notes"), "{backend:?}: {shown}");

    // The approval pending then is decided now, and the write it held back runs once.
    let model = old.model(r#"{"text": "Noted: buy tea."}, {"text": "NO_REPLY"}"#);
    let reply = old.cli(&["approve", "--session", "s4", "--model", &model], 0);
    assert_eq!(reply.trim(), "Noted: buy tea.", "{backend:?}");
    let s4 = old.messages("s4");
    assert_eq!(
        texts(&s4).last().map(String::as_str),
        Some("assistant: Noted: buy tea."),
        "{backend:?}"
    );
    assert_eq!(
        find_text(&old.ws, "todo.md").as_deref(),
        Some("buy tea\n"),
        "{backend:?}: the held-back write ran"
    );
    let output = harness()
        .args(["approve", "--session", "s4", "--model", &model, "--workspace"])
        .arg(&old.ws)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "{backend:?}: decided once: {:?}",
        text(&output)
    );
}

/// The text of the first file called `name` under `dir`.
fn find_text(dir: &Path, name: &str) -> Option<String> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_text(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return std::fs::read_to_string(path).ok();
        }
    }
    None
}

#[test]
fn a_4d795d4_workspace_on_files_loads_and_continues() {
    an_old_workspace_loads_and_continues(Backend::Files);
}

#[test]
fn a_4d795d4_deployment_on_redis_loads_and_continues() {
    an_old_workspace_loads_and_continues(Backend::Redis);
}

#[test]
fn a_4d795d4_deployment_on_postgres_loads_and_continues() {
    an_old_workspace_loads_and_continues(Backend::Postgres);
}
