//! Several replicas of one deployment: two workspace directories with the same harness.toml
//! (`[filesystem] kind = "composite"` and `[state]` both on Redis or both on PostgreSQL), driven
//! through the real binary against a fake OpenAI-compatible server.

use super::cli::{harness, text};
use harness_test_support::services::{PgPrefix, RedisPrefix};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(super) mod server {
    //! The shared fake OpenAI-compatible server, answering `turn N` (N = user messages in
    //! the request). A request whose last user message contains `slow` is answered after 3 s,
    //! one containing `hang` after 120 s.

    pub use harness_test_support::openai::Seen;
    use harness_test_support::openai::{FakeOpenAi, Reply};
    use std::time::Duration;

    /// The base URL, the record of requests, and the server (stopped when dropped).
    pub fn start() -> (String, Seen, FakeOpenAi) {
        let server = FakeOpenAi::start(|request| {
            let users: Vec<String> = request["messages"]
                .as_array()
                .map(|messages| {
                    messages
                        .iter()
                        .filter(|m| m["role"] == "user")
                        .map(|m| m["content"].to_string())
                        .collect()
                })
                .unwrap_or_default();
            let last = users.last().cloned().unwrap_or_default();
            let reply = Reply::text(format!("turn {}", users.len()));
            if last.contains("hang") {
                reply.after(Duration::from_secs(120))
            } else if last.contains("slow") {
                reply.after(Duration::from_secs(3))
            } else {
                reply
            }
        });
        (server.base_url().to_owned(), server.seen(), server)
    }
}

/// Two replica directories sharing one harness.toml, the fake server, and the cleanup of
/// everything the deployment wrote to Redis and PostgreSQL.
pub(super) struct Deployment {
    _dir: tempfile::TempDir,
    pub(super) replicas: [PathBuf; 2],
    pub(super) base: String,
    pub(super) seen: server::Seen,
    _server: harness_test_support::openai::FakeOpenAi,
    /// Everything the deployment writes to Redis or PostgreSQL is under these prefixes,
    /// removed when the deployment drops (passed or failed).
    keys: RedisPrefix,
    tables: PgPrefix,
}

#[derive(Clone, Copy)]
pub(super) enum StateKind {
    Redis,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres,
}

impl Deployment {
    pub(super) fn new(state: StateKind, lease_ttl: &str) -> Self {
        Self::configured(state, lease_ttl, "")
    }

    /// [`new`](Self::new) with `extra` appended to the harness.toml of both replicas.
    pub(super) fn configured(state: StateKind, lease_ttl: &str, extra: &str) -> Self {
        let (_, _, server) = server::start();
        Self::with_server(state, lease_ttl, extra, server)
    }

    /// [`configured`](Self::configured) against `server` instead of the shared fake.
    pub(super) fn with_server(
        state: StateKind,
        lease_ttl: &str,
        extra: &str,
        server: harness_test_support::openai::FakeOpenAi,
    ) -> Self {
        let (base, seen) = (server.base_url().to_owned(), server.seen());
        let dir = tempfile::tempdir().unwrap();
        let (keys, tables) = (RedisPrefix::new("replicas"), PgPrefix::new("replicas"));
        let (redis, redis_prefix) = (keys.url(), keys.prefix());
        let (postgres, table_prefix) = (tables.url(), tables.prefix());
        let state_section = match state {
            StateKind::Redis => {
                format!("kind = \"redis\"\nurl = \"{redis}\"\nkey_prefix = \"{redis_prefix}state:\"\n")
            }
            StateKind::Postgres => {
                format!("kind = \"postgres\"\nurl = \"{postgres}\"\nkey_prefix = \"{table_prefix}\"\n")
            }
        };
        // The shared files live in the state's backend, so its lease fences them.
        let kv_section = match state {
            StateKind::Redis => format!("url = \"{redis}\"\n"),
            StateKind::Postgres => format!("url = \"{postgres}\"\ntable_prefix = \"{table_prefix}\"\n"),
        };
        let config = format!(
            "[memory]\nenabled = false\n\n[filesystem]\nkind = \"composite\"\n{kv_section}\
             key_prefix = \"{redis_prefix}kv:\"\n\n[state]\n{state_section}lease_ttl = \"{lease_ttl}\"\n{extra}"
        );
        let replicas = ["replica-a", "replica-b"].map(|name| {
            let ws = dir.path().join(name);
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::write(ws.join("harness.toml"), &config).unwrap();
            ws
        });
        Self {
            _dir: dir,
            replicas,
            base,
            seen,
            _server: server,
            keys,
            tables,
        }
    }

    /// Starts `harness run` of `message` in session `s` on `replica`.
    fn spawn_run(&self, replica: usize, message: &str) -> Child {
        self.spawn_run_against(&self.base, replica, message)
    }

    /// [`spawn_run`](Self::spawn_run) against the OpenAI-compatible server at `base`.
    fn spawn_run_against(&self, base: &str, replica: usize, message: &str) -> Child {
        let mut command = harness();
        command
            .env("OPENAI_API_KEY", "sk-test")
            .env("OPENAI_BASE_URL", base)
            .args(["run", "--model", "openai:fake", "--session", "s", "--workspace"])
            .arg(&self.replicas[replica])
            .arg(message)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `harness sessions show s --json` on `replica`: the transcript's messages.
    pub(super) fn transcript(&self, replica: usize) -> Vec<serde_json::Value> {
        let mut command = harness();
        let output = command
            .args(["sessions", "show", "s", "--json", "--workspace"])
            .arg(&self.replicas[replica])
            .output()
            .unwrap();
        assert!(output.status.success(), "{:?}", text(&output));
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Every shared file of the deployment with a digest of its bytes, read from the backend
    /// itself (not through Harness): `key md5` lines in key order.
    pub(super) fn shared_bytes(&self, state: StateKind) -> String {
        let output = match state {
            StateKind::Postgres => Command::new("psql")
                .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-At", "-c"])
                .arg(format!(
                    "SELECT key || ' ' || md5(value) FROM {}kv ORDER BY key",
                    self.tables.prefix()
                ))
                .output()
                .unwrap(),
            StateKind::Redis => Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "redis-cli --scan --pattern '{p}kv:d:*' | sort | while read k; do \
                     printf '%s ' \"$k\"; redis-cli --raw get \"$k\" | md5sum; done",
                    p = self.keys.prefix()
                ))
                .output()
                .unwrap(),
        };
        assert!(output.status.success(), "{:?}", text(&output));
        let listing = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            listing.contains("sessions"),
            "the transcript is a shared file: {listing}"
        );
        listing
    }

    /// Waits until the server has seen `count` requests (a readiness signal, not a delay).
    pub(super) fn await_requests(&self, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.seen.lock().unwrap().len() < count {
            assert!(Instant::now() < deadline, "the server never saw request {count}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The number of user messages in each request the server saw, in arrival order.
    pub(super) fn user_counts(&self) -> Vec<usize> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|request| {
                request["messages"]
                    .as_array()
                    .map_or(0, |messages| messages.iter().filter(|m| m["role"] == "user").count())
            })
            .collect()
    }
}

fn roles_and_texts(messages: &[serde_json::Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or("").to_owned(), m["content"].to_string()))
        .collect()
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

/// 8 concurrent runs on one session, alternating between the replicas: 8 serialised turns,
/// each request carrying every earlier turn, one transcript seen the same from both.
fn eight_concurrent_turns_are_serialised(state: StateKind) {
    let deployment = Deployment::new(state, "5s");
    let children: Vec<Child> = (0..8)
        .map(|n| deployment.spawn_run(n % 2, &format!("message {n}")))
        .collect();
    for child in children {
        let output = finish(child);
        assert!(output.status.success(), "{:?}", text(&output));
    }
    let mut counts = deployment.user_counts();
    counts.sort_unstable();
    assert_eq!(counts, (1..=8).collect::<Vec<_>>(), "each turn saw every earlier turn");
    let from_a = deployment.transcript(0);
    let from_b = deployment.transcript(1);
    assert_eq!(roles_and_texts(&from_a), roles_and_texts(&from_b));
    let roles: Vec<&str> = from_a.iter().map(|m| m["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, ["user", "assistant"].repeat(8), "{from_a:?}");
    let mut messages: Vec<String> = from_a
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect();
    messages.sort();
    assert_eq!(messages.len(), 8);
    messages.dedup();
    assert_eq!(messages.len(), 8, "every turn's message once");
}

#[test]
fn replicas_on_redis_state_serialise_concurrent_turns() {
    eight_concurrent_turns_are_serialised(StateKind::Redis);
}

#[cfg(feature = "postgres")]
#[test]
fn replicas_on_postgres_state_serialise_concurrent_turns() {
    eight_concurrent_turns_are_serialised(StateKind::Postgres);
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A replica paused past its lease expiry loses the session: another replica completes a
/// turn, and the paused one, resumed, writes nothing and ends with a clear error.
#[test]
fn a_paused_replica_cannot_write_after_its_lease_passed() {
    a_paused_replica_cannot_write(StateKind::Redis);
}

/// The same on PostgreSQL alone (state, lease and shared files): the resumed replica changes
/// no byte of the shared files.
#[cfg(feature = "postgres")]
#[test]
fn a_paused_replica_on_postgres_cannot_write_after_its_lease_passed() {
    a_paused_replica_cannot_write(StateKind::Postgres);
}

fn a_paused_replica_cannot_write(state: StateKind) {
    let deployment = Deployment::new(state, "1s");
    let stale = deployment.spawn_run(0, "slow message from A");
    deployment.await_requests(1);
    signal(&stale, "STOP");
    // B waits for A's lease to expire, then takes the session and finishes its turn.
    let output = finish(deployment.spawn_run(1, "message from B"));
    assert!(output.status.success(), "{:?}", text(&output));
    let before = deployment.transcript(1);
    let texts = roles_and_texts(&before);
    assert!(
        texts
            .iter()
            .any(|(role, text)| role == "user" && text.contains("message from B")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|(role, text)| role == "assistant" && text.contains("turn")),
        "{texts:?}"
    );
    let bytes_before = deployment.shared_bytes(state);
    signal(&stale, "CONT");
    let output = finish(stale);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("lease") && stderr.lines().count() <= 3,
        "a clear error naming the lease: {stderr}"
    );
    // Nothing of A's resumed turn reached the shared transcript or the state.
    assert_eq!(
        deployment.shared_bytes(state),
        bytes_before,
        "the resumed replica changed a shared file"
    );
    assert_eq!(roles_and_texts(&deployment.transcript(0)), texts);
    let output = finish(deployment.spawn_run(0, "after"));
    assert!(output.status.success(), "{:?}", text(&output));
    let last = deployment.user_counts().last().copied();
    let users_before = texts.iter().filter(|(role, _)| role == "user").count();
    assert_eq!(last, Some(users_before + 1), "the next turn continues B's state");
}

/// kill -9 of a replica mid-turn: its lease expires, the other replica continues the
/// session, and every acknowledged turn is there.
#[test]
fn a_killed_replica_leaves_the_session_to_the_other() {
    let deployment = Deployment::new(StateKind::Redis, "1s");
    let output = finish(deployment.spawn_run(1, "first acknowledged"));
    assert!(output.status.success(), "{:?}", text(&output));
    let mut doomed = deployment.spawn_run(0, "hang in the middle");
    deployment.await_requests(2);
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    let output = finish(deployment.spawn_run(1, "second acknowledged"));
    assert!(output.status.success(), "{:?}", text(&output));
    for replica in 0..2 {
        let texts = roles_and_texts(&deployment.transcript(replica));
        for acknowledged in ["first acknowledged", "second acknowledged"] {
            assert!(
                texts
                    .iter()
                    .any(|(role, text)| role == "user" && text.contains(acknowledged)),
                "{acknowledged} on replica {replica}: {texts:?}"
            );
        }
        let answers = texts.iter().filter(|(role, _)| role == "assistant").count();
        assert!(answers >= 2, "{texts:?}");
    }
    let seen = deployment.seen.lock().unwrap();
    let last = seen.last().map(|r| r["messages"].to_string()).unwrap_or_default();
    assert!(last.contains("first acknowledged"), "{last}");
}

/// `[filesystem] kind = "composite"` with the default file state is refused at start.
#[test]
fn composite_with_file_state_is_refused_naming_state() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        format!(
            "[filesystem]\nkind = \"composite\"\nredis_url = \"{}\"\n",
            harness_test_support::services::redis_url()
        ),
    )
    .unwrap();
    let output = harness()
        .args(["run", "--model", "scripted:none", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("[state]"), "{stderr}");
}

/// Every file below `dir`, relative to it.
fn files_below(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    found
}

/// A plan written with `plan_write` through replica A is read with `read_file` through
/// replica B (the plan is in the shared store, not on A's disk).
#[test]
fn a_plan_written_on_one_replica_is_read_on_the_other() {
    let deployment = Deployment::configured(StateKind::Redis, "5s", "\n[plan]\nenabled = true\n");
    let rules = serde_json::json!([
        {"when": {"last_role": "user", "last_text_contains": "write the plan"},
         "reply": {"tool_calls": [{"name": "plan_write", "arguments": {"content": "PLAN-7731: migrate the index"}}]}},
        {"when": {"last_role": "user", "last_text_contains": "read the plan"},
         "reply": {"tool_calls": [{"name": "read_file", "arguments": {"path": "plans/PLAN.md"}}]}},
        {"when": {"last_role": "tool", "last_text_contains": "PLAN-7731: migrate"},
         "reply": {"text": "the plan says PLAN-7731"}},
        {"when": {"last_role": "tool"}, "reply": {"text": "no plan seen"}}
    ]);
    let script = deployment.replicas[0].parent().unwrap().join("rules.json");
    std::fs::write(&script, rules.to_string()).unwrap();
    let model = super::serve::MockLlm::start(&script);
    let output = finish(deployment.spawn_run_against(&model.base, 0, "write the plan"));
    assert!(output.status.success(), "{:?}", text(&output));
    let on_a = files_below(&deployment.replicas[0]);
    assert!(
        !on_a.iter().any(|path| path.contains("PLAN.md")),
        "the plan stayed on replica A's disk: {on_a:?}"
    );
    let output = finish(deployment.spawn_run_against(&model.base, 1, "read the plan"));
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("the plan says PLAN-7731"), "{stdout}\n{stderr}");
}
