//! `harness maintenance` and `[retention]` through the binary: a workspace with aged sessions
//! (their `updated` time in the session index set back), daily logs, an evicted tool result
//! and compaction offloads, on local files, on Redis and on PostgreSQL state; and `harness
//! serve`'s schedule under the leader lease with two replicas.

use super::cli::{harness, text};
use super::replicas::server;
use harness_fs::{Filesystem, WriteMode, WsPath};
use harness_test_support::services::{PgPrefix, RedisPrefix};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    File,
    Redis,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres,
}

const RETENTION: &str = "[retention]\nsessions = \"30d\"\noffloads = \"7d\"\ndaily_logs = \"30d\"\n";

/// A workspace on `backend` with the fake model server; Redis keys and PostgreSQL tables
/// are removed on drop.
struct Setup {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    base: String,
    _server: harness_test_support::openai::FakeOpenAi,
    _keys: RedisPrefix,
    _tables: PgPrefix,
}

impl Setup {
    fn new(backend: Backend, extra: &str) -> Self {
        let (base, _seen, server) = server::start();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let (keys, tables) = (RedisPrefix::new("maint"), PgPrefix::new("maint"));
        let (redis, rp) = (keys.url(), keys.prefix());
        let (postgres, tp) = (tables.url(), tables.prefix());
        let shared = match backend {
            Backend::File => String::new(),
            Backend::Redis => format!(
                "[filesystem]\nkind = \"composite\"\nurl = \"{redis}\"\nkey_prefix = \"{rp}kv:\"\n\n\
                 [state]\nkind = \"redis\"\nurl = \"{redis}\"\nkey_prefix = \"{rp}state:\"\nlease_ttl = \"2s\"\n"
            ),
            Backend::Postgres => format!(
                "[filesystem]\nkind = \"composite\"\nurl = \"{postgres}\"\ntable_prefix = \"{tp}\"\nkey_prefix = \"{rp}kv:\"\n\n\
                 [state]\nkind = \"postgres\"\nurl = \"{postgres}\"\nkey_prefix = \"{tp}\"\nlease_ttl = \"2s\"\n"
            ),
        };
        std::fs::write(
            ws.join("harness.toml"),
            format!("[memory]\nenabled = false\n\n{shared}\n{extra}"),
        )
        .unwrap();
        Self {
            _dir: dir,
            ws,
            base,
            _server: server,
            _keys: keys,
            _tables: tables,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = harness();
        command
            .env("OPENAI_API_KEY", "sk-test")
            .env("OPENAI_BASE_URL", &self.base)
            .args(args)
            .arg("--workspace")
            .arg(&self.ws);
        command
    }

    fn turn(&self, session: &str, message: &str) {
        let output = self
            .command(&["run", "--model", "openai:fake", "--session", session])
            .arg(message)
            .output()
            .unwrap();
        assert!(output.status.success(), "{:?}", text(&output));
    }

    fn spawn_turn(&self, session: &str, message: &str) -> Child {
        self.command(&["run", "--model", "openai:fake", "--session", session])
            .arg(message)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn maintenance(&self, args: &[&str]) -> String {
        let mut all = vec!["maintenance"];
        all.extend_from_slice(args);
        let output = self.command(&all).output().unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        stdout
    }

    fn sessions(&self) -> String {
        let output = self.command(&["sessions", "list"]).output().unwrap();
        assert!(output.status.success(), "{:?}", text(&output));
        text(&output).0
    }

    /// The default user's namespace of the workspace's filesystem as the agent opens it
    /// (local, or composite on the backend, which routes by the namespace-relative path).
    fn fs(&self) -> Arc<dyn Filesystem> {
        let sections = harness_serve::sections().with(harness_ops::RETENTION);
        let config = harness::HarnessConfig::load_with(&self.ws, &sections).unwrap();
        let root = block_on(async {
            match &config.filesystem {
                Some(fs) => harness::filesystem::open(fs, &self.ws, "harness").await.unwrap(),
                None => Arc::new(harness_fs::LocalFs::new(&self.ws).unwrap()) as Arc<dyn Filesystem>,
            }
        });
        Arc::new(harness_fs::Namespaced::new(root, WsPath::parse("default").unwrap()))
    }

    fn state_of(&self, session: &str) -> bool {
        block_on(async {
            let reader = harness::SessionReader::open(&self.ws, None).await.unwrap();
            let session = harness_core::SessionId::parse(session).unwrap();
            reader
                .state(&harness_core::DEFAULT_USER_ID, &session)
                .await
                .unwrap()
                .is_some()
        })
    }
}

/// One runtime for the module: a Redis connection's driver task lives in the runtime that
/// opened it.
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap()
        })
        .block_on(future)
}

/// A path the tests write from the workspace root (`default/…`), inside the default user's
/// namespace.
fn path(text: &str) -> WsPath {
    WsPath::parse(text.strip_prefix("default/").unwrap_or(text)).unwrap()
}

const INDEX: &str = "default/agents/harness/sessions/sessions.json";

/// Sets the session's last activity in the index `days` back (the recorded time, not a
/// file time).
fn age(fs: &dyn Filesystem, session: &str, days: i64) {
    block_on(async {
        let bytes = fs.read(&path(INDEX)).await.unwrap();
        let mut index: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let then = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * days);
        let entry = &mut index["sessions"][session];
        assert!(entry.is_object(), "{session} is in the index: {index}");
        entry["updated"] = serde_json::Value::String(then.to_string());
        fs.write(&path(INDEX), &serde_json::to_vec(&index).unwrap(), WriteMode::Overwrite)
            .await
            .unwrap();
    });
}

fn write(fs: &dyn Filesystem, at: &str, bytes: &[u8]) {
    block_on(async { fs.write(&path(at), bytes, WriteMode::Overwrite).await.unwrap() });
}

fn exists(fs: &dyn Filesystem, at: &str) -> bool {
    block_on(async { fs.exists(&path(at)).await.unwrap() })
}

/// A running background task record of session `parent`.
fn running_task_file() -> Vec<u8> {
    let file = serde_json::json!({
        "v": 1,
        "tasks": {"task-1": {
            "task_id": "task-1", "agent_id": "helper", "child_session": "task-1",
            "status": "running", "runner": "test", "heartbeat_ms": 0
        }}
    });
    // The record parses as the harness's own type (a typo would make the test vacuous).
    let parsed: harness::subagents::TaskFile = serde_json::from_value(file.clone()).unwrap();
    assert_eq!(parsed.tasks.len(), 1);
    serde_json::to_vec(&file).unwrap()
}

/// Sessions `old`, `recent`, `busy` (a turn holds its lease), `parent` (a running task),
/// `mid` (idle past `offloads` only); an evicted result only `old` references; two
/// dated-old daily logs, one merged by consolidation; then a dry run and a real run.
fn retention_removes_what_it_names_and_nothing_live(backend: Backend) {
    let setup = Setup::new(backend, RETENTION);
    for session in ["old", "recent", "busy", "parent", "mid"] {
        setup.turn(session, &format!("hello from {session}"));
    }
    let fs = setup.fs();
    for session in ["old", "busy", "parent"] {
        age(fs.as_ref(), session, 90);
    }
    age(fs.as_ref(), "mid", 10);
    let evicted = "large_tool_results/harness/call_1-ab.txt";
    write(fs.as_ref(), &format!("default/{evicted}"), b"a very large result");
    let kept_result = "large_tool_results/harness/call_2-cd.txt";
    write(
        fs.as_ref(),
        &format!("default/{kept_result}"),
        b"the recent session's result",
    );
    let mention = |p: &str| {
        let mut line = serde_json::to_vec(&harness_core::Msg::user(format!("[evicted: see `{p}`]"))).unwrap();
        line.push(b'\n');
        line
    };
    block_on(async {
        fs.append(
            &path("default/agents/harness/sessions/old.log.jsonl"),
            &mention(evicted),
        )
        .await
        .unwrap();
        fs.append(
            &path("default/agents/harness/sessions/recent.log.jsonl"),
            &mention(kept_result),
        )
        .await
        .unwrap();
    });
    for session in ["old", "mid", "recent"] {
        write(
            fs.as_ref(),
            &format!("default/agents/harness/compacted/{session}/0001.json"),
            b"[]",
        );
    }
    write(
        fs.as_ref(),
        "default/agents/harness/tasks/parent.json",
        &running_task_file(),
    );
    write(fs.as_ref(), "default/memory/2020-01-01.md", b"- merged fact\n");
    write(fs.as_ref(), "default/memory/2020-01-02.md", b"- pending fact\n");
    write(
        fs.as_ref(),
        "default/memory/.consolidation_state",
        br#"{"v":1,"files":{"2020-01-01.md":1}}"#,
    );
    // A turn of `busy` is running (its reply hangs), so its lease is held.
    let mut busy = setup.spawn_turn("busy", "hang here");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !block_on(async { fs.read(&path("default/agents/harness/sessions/busy.log.jsonl")).await })
        .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains("hang here"))
    {
        assert!(Instant::now() < deadline, "the busy turn never started");
        std::thread::sleep(Duration::from_millis(50));
    }

    let dry = setup.maintenance(&["--dry-run"]);
    assert!(
        dry.contains("would remove transcript default/agents/harness/sessions/old.log.jsonl"),
        "{dry}"
    );
    assert!(
        exists(fs.as_ref(), "default/agents/harness/sessions/old.log.jsonl"),
        "a dry run deletes nothing"
    );
    assert!(setup.sessions().contains("old\t"));

    let report = setup.maintenance(&[]);
    let _ = busy.kill();
    let _ = busy.wait();
    for line in [
        "removed transcript default/agents/harness/sessions/old.log.jsonl (session default/harness/old idle 90d",
        "removed state harness/default/old",
        "removed offloads default/agents/harness/compacted/old",
        "removed offloads default/agents/harness/compacted/mid (session default/harness/mid idle 10d",
        &format!("removed tool result default/{evicted} (referenced by session(s) old)"),
        "removed index entry default/agents/harness/sessions/sessions.json#old",
        "removed daily log default/memory/2020-01-01.md (dated 2020-01-01, consolidated into MEMORY.md)",
        "kept session default/harness/busy: live: a turn holds its lease",
        "kept session default/harness/parent: a background task of it is running",
    ] {
        assert!(report.contains(line), "missing `{line}` in:\n{report}");
    }
    // Gone: everything of `old`, `mid`'s offloads, the merged old log.
    for gone in [
        "default/agents/harness/sessions/old.log.jsonl",
        "default/agents/harness/compacted/old",
        "default/agents/harness/compacted/mid",
        &format!("default/{evicted}"),
        "default/memory/2020-01-01.md",
    ] {
        assert!(!exists(fs.as_ref(), gone), "{gone} survived:\n{report}");
    }
    assert!(!setup.state_of("old"), "old's state survived:\n{report}");
    // Kept: the live, the recent, what retention does not name, the unmerged log.
    for kept in [
        "default/agents/harness/sessions/busy.log.jsonl",
        "default/agents/harness/sessions/parent.log.jsonl",
        "default/agents/harness/sessions/recent.log.jsonl",
        "default/agents/harness/sessions/mid.log.jsonl",
        "default/agents/harness/compacted/recent/0001.json",
        "default/agents/harness/tasks/parent.json",
        &format!("default/{kept_result}"),
        "default/memory/2020-01-02.md",
    ] {
        assert!(exists(fs.as_ref(), kept), "{kept} was deleted:\n{report}");
    }
    for session in ["busy", "parent", "recent", "mid"] {
        assert!(setup.state_of(session), "{session}'s state was deleted:\n{report}");
    }
    let listed = setup.sessions();
    assert!(!listed.contains("old\t"), "old left the session list: {listed}");
    for session in ["busy", "parent", "recent", "mid"] {
        assert!(listed.contains(&format!("{session}\t")), "{session} listed: {listed}");
    }
    let search = setup.command(&["sessions", "search", "hello"]).output().unwrap();
    let found = text(&search).0;
    assert!(!found.contains("old:"), "old left the search: {found}");
    assert!(found.contains("recent:"), "{found}");
    // A second run finds nothing more to remove of `old`.
    let again = setup.maintenance(&[]);
    assert!(!again.contains("sessions/old.log.jsonl"), "{again}");
}

#[test]
fn retention_on_files_removes_what_it_names_and_nothing_live() {
    retention_removes_what_it_names_and_nothing_live(Backend::File);
}

#[test]
fn retention_on_redis_removes_what_it_names_and_nothing_live() {
    retention_removes_what_it_names_and_nothing_live(Backend::Redis);
}

#[cfg(feature = "postgres")]
#[test]
fn retention_on_postgres_removes_what_it_names_and_nothing_live() {
    retention_removes_what_it_names_and_nothing_live(Backend::Postgres);
}

#[test]
fn without_retention_nothing_is_deleted_and_scope_flags_narrow_the_run() {
    let setup = Setup::new(Backend::File, "");
    setup.turn("old", "hello");
    let fs = setup.fs();
    age(fs.as_ref(), "old", 400);
    let report = setup.maintenance(&[]);
    assert!(report.contains("[retention] names nothing"), "{report}");
    assert!(exists(fs.as_ref(), "default/agents/harness/sessions/old.log.jsonl"));

    let setup = Setup::new(Backend::File, RETENTION);
    for session in ["a", "b"] {
        setup.turn(session, "hello");
    }
    let fs = setup.fs();
    age(fs.as_ref(), "a", 90);
    age(fs.as_ref(), "b", 90);
    let other_user = setup.maintenance(&["--user", "someone-else"]);
    assert!(other_user.contains("removed 0 item(s)"), "{other_user}");
    let only_b = setup.maintenance(&["--session", "b"]);
    assert!(only_b.contains("sessions/b.log.jsonl"), "{only_b}");
    assert!(!only_b.contains("sessions/a.log.jsonl"), "{only_b}");
    assert!(exists(fs.as_ref(), "default/agents/harness/sessions/a.log.jsonl"));
    assert!(!exists(fs.as_ref(), "default/agents/harness/sessions/b.log.jsonl"));
    let bad = setup.command(&["maintenance", "--session", "../x"]).output().unwrap();
    assert!(!bad.status.success());
}

#[test]
fn a_zero_or_malformed_age_is_refused_naming_the_key() {
    for (value, says) in [("\"0d\"", "longer than 0"), ("\"ninety\"", "bad duration")] {
        let setup = Setup::new(Backend::File, &format!("[retention]\nsessions = {value}\n"));
        let output = setup.command(&["maintenance"]).output().unwrap();
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("retention") && stderr.contains(says), "{stderr}");
    }
}

/// Two `harness serve` replicas on one Redis with `interval = "1s"`: only the holder of the
/// leader lease runs maintenance.
#[test]
fn serve_runs_maintenance_on_one_replica_under_the_leader_lease() {
    let setup = Setup::new(Backend::Redis, "[retention]\nsessions = \"30d\"\ninterval = \"1s\"\n");
    let second = setup._dir.path().join("ws2");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::copy(setup.ws.join("harness.toml"), second.join("harness.toml")).unwrap();
    let spawn = |ws: &Path| {
        let mut command = harness();
        command
            .env("OPENAI_API_KEY", "sk-test")
            .env("OPENAI_BASE_URL", &setup.base)
            .args([
                "serve",
                "--model",
                "openai:fake",
                "--bind",
                "127.0.0.1:0",
                "--workspace",
            ])
            .arg(ws)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command.spawn().unwrap()
    };
    let mut replicas = [spawn(&setup.ws), spawn(&second)];
    let lines: Vec<Arc<std::sync::Mutex<Vec<String>>>> = replicas
        .iter_mut()
        .map(|child| {
            let stderr = child.stderr.take().unwrap();
            let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
            let sink = Arc::clone(&lines);
            std::thread::spawn(move || {
                use std::io::BufRead as _;
                for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                    sink.lock().unwrap().push(line);
                }
            });
            lines
        })
        .collect();
    let runs = |i: usize| {
        lines[i]
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("maintenance: removed"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while runs(0).max(runs(1)) < 3 {
        assert!(
            Instant::now() < deadline,
            "no replica ran maintenance three times: {:?} / {:?}",
            lines[0].lock().unwrap(),
            lines[1].lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (a, b) = (runs(0), runs(1));
    for child in &mut replicas {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(a == 0 || b == 0, "both replicas ran maintenance: {a} and {b}");
}

/// `harness init`'s commented `[retention]` block, uncommented, is what maintenance applies.
#[test]
fn the_init_templates_retention_block_uncommented_applies() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let output = harness().arg("init").arg(&ws).output().unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let template = std::fs::read_to_string(ws.join("harness.toml")).unwrap();
    let mut inside = false;
    let mut uncommented = String::new();
    for line in template.lines() {
        if line == "# [retention]" {
            inside = true;
        } else if line.trim().is_empty() {
            inside = false;
        }
        let line = if inside { line.trim_start_matches("# ") } else { line };
        uncommented.push_str(line);
        uncommented.push('\n');
    }
    assert!(
        uncommented.contains("\n[retention]\nsessions = \"90d\""),
        "{uncommented}"
    );
    std::fs::write(ws.join("harness.toml"), uncommented).unwrap();
    let output = harness()
        .args(["maintenance", "--dry-run", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("would remove 0 item(s)"), "{stdout}");
}

/// `harness doctor`'s disk line counts what is past `[retention]` (a dry run) and warns until
/// maintenance removed it.
#[test]
fn doctor_measures_disk_use_against_retention() {
    let setup = Setup::new(Backend::File, RETENTION);
    let fs = setup.fs();
    write(fs.as_ref(), "default/memory/2020-01-01.md", b"- merged fact\n");
    write(
        fs.as_ref(),
        "default/memory/.consolidation_state",
        br#"{"v":1,"files":{"2020-01-01.md":1}}"#,
    );
    let doctor = || {
        let output = setup.command(&["doctor", "--model", "openai:fake"]).output().unwrap();
        (output.status.code(), text(&output).0)
    };
    let (code, out) = doctor();
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("warn  disk: ")
            && out.contains("1 item(s) past [retention] (sessions 30d, offloads 7d, daily_logs 30d)"),
        "{out}"
    );
    assert!(out.contains("fix: run `harness maintenance`"), "{out}");
    assert!(
        exists(fs.as_ref(), "default/memory/2020-01-01.md"),
        "the doctor deletes nothing"
    );
    setup.maintenance(&[]);
    let (code, out) = doctor();
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("ok    disk: ") && out.contains("nothing past [retention]"),
        "{out}"
    );
}

/// A UUIDv7 snapshot id created `ms` milliseconds after the epoch (the `n`th of that time).
fn snapshot_id(ms: i64, n: u64) -> String {
    let time = format!("{ms:012x}");
    format!("{}-{}-7000-8000-{n:012x}", &time[..8], &time[8..])
}

/// `[retention] snapshots = 2` on Redis state: per scope the last two heads and what they
/// reach (a delta's full base, however old) are kept, an older head's snapshot and an
/// orphaned object are deleted, and an object created within the grace period (an upload in
/// flight) is kept. Ages come from the recorded creation times (the ids), not file times:
/// the fresh-looking file of an old snapshot goes, the old-looking file of a new one stays.
/// The dry run deletes nothing; every deletion is reported.
#[test]
fn snapshot_retention_keeps_the_last_heads_and_what_they_reach() {
    let setup = Setup::new(
        Backend::Redis,
        "[sandbox]\nkind = \"namespace\"\n[sandbox.snapshots]\n\n[retention]\nsnapshots = 2\n",
    );
    let day = 86_400_000;
    let now = jiff::Timestamp::now().as_millisecond();
    let (x, a, b, orphan, fresh) = (
        snapshot_id(now - 20 * day, 1),
        snapshot_id(now - 10 * day, 2),
        snapshot_id(now - 5 * day, 3),
        snapshot_id(now - 30 * day, 4),
        snapshot_id(now, 5),
    );
    let scope = "3f2a9c0d1e4b5a6978a1b2c3d4e5f601";
    let objects = setup.ws.join(".harness/snapshots/snapshots").join(scope);
    std::fs::create_dir_all(&objects).unwrap();
    let files = |id: &str| {
        [
            objects.join(format!("{id}.tar.zst")),
            objects.join(format!("{id}.manifest.json")),
        ]
    };
    for id in [&x, &a, &b, &orphan, &fresh] {
        for file in files(id) {
            std::fs::write(file, b"x").unwrap();
        }
    }
    // The new upload's files look old; the old snapshot's look new (they were just written).
    for file in files(&fresh) {
        let status = Command::new("touch")
            .args(["-d", "2020-01-01"])
            .arg(&file)
            .status()
            .unwrap();
        assert!(status.success());
    }
    // The heads, in the shared state store: X, then a full A, then B (a delta on A).
    block_on(async {
        let sections = harness_serve::sections().with(harness_ops::RETENTION);
        let config = harness::HarnessConfig::load_with(&setup.ws, &sections).unwrap();
        let kv = harness::state::open_kv(config.state.as_ref().unwrap(), "sandbox")
            .await
            .unwrap()
            .unwrap();
        let heads = harness_snapshot::Heads::new(kv);
        let fence = harness_snapshot::WriterFence::default();
        for chain in [vec![x.clone()], vec![a.clone()], vec![a.clone(), b.clone()]] {
            heads.advance(scope, chain, &fence, 3, now).await.unwrap();
        }
    });
    let all = |id: &str| files(id).iter().all(|file| file.exists());

    let dry = setup.maintenance(&["--dry-run"]);
    for id in [&x, &orphan] {
        assert!(
            dry.contains(&format!("would remove snapshot snapshots/{scope}/{id}.tar.zst")),
            "{dry}"
        );
        assert!(all(id), "the dry run deleted {id}");
    }
    let report = setup.maintenance(&[]);
    for id in [&x, &orphan] {
        assert!(
            report.contains(&format!("removed snapshot snapshots/{scope}/{id}.manifest.json (scope {scope}: not in the last 2 head(s), created ")),
            "{report}"
        );
        assert!(
            files(id).iter().all(|file| !file.exists()),
            "{id} is still there:\n{report}"
        );
    }
    for id in [&a, &b, &fresh] {
        assert!(all(id), "{id} was deleted:\n{report}");
        assert!(
            !report.contains(&format!("snapshot snapshots/{scope}/{id}.tar")),
            "{report}"
        );
    }
    assert!(
        report.contains("created within the grace period: an upload may be in flight"),
        "{report}"
    );
    assert!(report.contains("removed 4 item(s)"), "{report}");

    // Zero heads would drop the current one: refused, naming the key.
    let setup = Setup::new(Backend::File, "[retention]\nsnapshots = 0\n");
    let output = setup.command(&["maintenance"]).output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("snapshots = 0 would delete every head"), "{stderr}");
}
