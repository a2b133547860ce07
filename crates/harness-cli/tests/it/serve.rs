//! `harness serve` through the binary: the official `openai` Python SDK as the client,
//! SIGTERM during a turn, and two replicas serving one session.

use super::cli::harness;
use super::replicas::{Deployment, StateKind, server};
use serde_json::{Value, json};
use sha2::Digest;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// A running `harness serve` and its address.
struct Serve {
    child: Child,
    url: String,
    /// Every stderr line after `listening on`, as it arrives.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Serve {
    /// Starts the server on a free port and waits for its `listening on` line.
    fn start(workspace: &Path, model_base: &str) -> Self {
        Self::start_model(workspace, model_base, "openai:fake")
    }

    /// [`start`](Self::start) serving `model` (a `provider:model` spec).
    fn start_model(workspace: &Path, model_base: &str, model: &str) -> Self {
        let mut child = harness()
            .env("OPENAI_API_KEY", "sk-test")
            .env("OPENAI_BASE_URL", model_base)
            .args(["serve", "--bind", "127.0.0.1:0", "--model", model, "--workspace"])
            .arg(workspace)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("harness serve exited before listening").unwrap();
            if let Some(url) = line.strip_prefix("listening on ") {
                break url.to_owned();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Self { child, url, log }
    }

    /// The stderr lines so far, joined.
    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Sends SIGTERM to the server (our own child, by pid).
    fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace(dir: &Path, extra: &str) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), format!("[memory]\nenabled = false\n{extra}")).unwrap();
    ws
}

/// The interpreter of the venv `scripts/python-env.sh` prints (HARNESS_TEST_PYTHON).
fn python() -> PathBuf {
    let path = std::env::var_os("HARNESS_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/harness-py/bin/python"));
    assert!(
        path.exists(),
        "{} not found: run `bash scripts/python-env.sh` (scripts/test.sh does) and export HARNESS_TEST_PYTHON",
        path.display()
    );
    path
}

#[test]
fn the_openai_python_sdk_works_against_harness_serve() {
    let (base, _seen, _runtime) = server::start();
    let dir = tempfile::tempdir().unwrap();
    let hash = hex::encode(sha2::Sha256::digest(b"sk-alice"));
    let ws = workspace(
        dir.path(),
        &format!("[serve]\n[[serve.keys]]\nuser = \"alice\"\nsha256 = \"{hash}\"\n"),
    );
    let serve = Serve::start(&ws, &base);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai_client.py");
    let output = std::process::Command::new(python())
        .arg(script)
        .env("HARNESS_URL", &serve.url)
        .env("HARNESS_KEY", "sk-alice")
        .output()
        .unwrap();
    let (stdout, stderr) = super::cli::text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "ok");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn send(client: &reqwest::Client, url: &str, session: &str, message: &str) -> Value {
    let response = client
        .post(format!("{url}/api/agents/harness/sessions/{session}/messages"))
        .json(&json!({"message": message}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn sigterm_during_a_turn_lets_it_finish_then_exits_0() {
    let (base, seen, _model_runtime) = server::start();
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    let mut serve = Serve::start(&ws, &base);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let url = serve.url.clone();
    // The fake model answers a message containing `slow` after 3 s.
    let turn = runtime.spawn(async move { send(&client, &url, "s", "slow please").await });
    while seen.lock().unwrap().is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    serve.terminate();
    let reply = runtime.block_on(turn).unwrap();
    assert_eq!(reply["text"], "turn 1");
    let status = serve.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // The turn is in the transcript.
    let output = harness()
        .args(["sessions", "show", "s", "--json", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let transcript = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        transcript.lines().filter(|l| !l.trim().is_empty()).count(),
        2,
        "{transcript}"
    );
}

#[test]
fn two_replicas_serve_fifty_turns_of_one_session_none_lost_or_duplicated() {
    let deployment = Deployment::new(StateKind::Redis, "5s");
    let replicas: Vec<Serve> = deployment
        .replicas
        .iter()
        .map(|ws| Serve::start(ws, &deployment.base))
        .collect();
    let urls: Vec<String> = replicas.iter().map(|serve| serve.url.clone()).collect();
    let runtime = runtime();
    let client = reqwest::Client::new();
    // 50 concurrent messages, alternating between the replicas (a round-robin client).
    let replies = runtime.block_on(futures::future::join_all((0..50).map(|n| {
        let client = client.clone();
        let url = urls[n % 2].clone();
        async move { send(&client, &url, "s", &format!("message {n}")).await }
    })));
    let mut turns: Vec<String> = replies.iter().map(|r| r["text"].as_str().unwrap().to_owned()).collect();
    turns.sort_by_key(|t| t.trim_start_matches("turn ").parse::<u32>().unwrap());
    assert_eq!(turns, (1..=50).map(|n| format!("turn {n}")).collect::<Vec<_>>());
    let mut counts = deployment.user_counts();
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=50).collect::<Vec<_>>(),
        "each turn saw every earlier turn once"
    );
    // Both replicas read the same history: 50 user messages, each once.
    for url in &urls {
        let history: Value = runtime.block_on(async {
            client
                .get(format!("{url}/api/agents/harness/sessions/s"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        let mut users: Vec<String> = history["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"][0]["text"].as_str().unwrap().to_owned())
            .collect();
        users.sort();
        users.dedup();
        assert_eq!(users.len(), 50);
    }
}

/// `[serve] agents` serves more workspaces beside the main one, each under its own
/// `[agent] name`: `/v1/models` lists both, a message to the second runs in its own
/// workspace, and a directory that does not exist is a usage error naming it.
#[test]
fn serve_agents_adds_more_workspaces_under_their_own_names() {
    let (base, _seen, _model_runtime) = server::start();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("support");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("harness.toml"),
        "[agent]\nname = \"support\"\n[memory]\nenabled = false\n",
    )
    .unwrap();
    let ws = workspace(dir.path(), "[serve]\nagents = [\"../support\"]\n");
    let serve = Serve::start(&ws, &base);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let models: Value = runtime.block_on(async {
        client
            .get(format!("{}/v1/models", serve.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    let mut names: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["id"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["harness", "support"], "{models}");
    let reply: Value = runtime.block_on(async {
        let response = client
            .post(format!("{}/api/agents/support/sessions/s1/messages", serve.url))
            .json(&json!({"message": "hello support"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    });
    assert_eq!(reply["text"], "turn 1", "{reply}");
    let transcript = other.join("default/agents/support/sessions/s1.log.jsonl");
    assert!(
        std::fs::read_to_string(&transcript).unwrap().contains("hello support"),
        "the second agent's turn is in its own workspace"
    );
    assert!(!ws.join("default/agents/support").exists());
    drop(serve);

    let broken = workspace(&dir.path().join("b"), "[serve]\nagents = [\"../missing\"]\n");
    let output = harness()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &base)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "openai:fake",
            "--workspace",
        ])
        .arg(&broken)
        .output()
        .unwrap();
    let (_, stderr) = super::cli::text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[serve] agents") && stderr.contains("missing"),
        "{stderr}"
    );
}

/// `harness serve` prints what it refused at its default log level: a request from another
/// origin is refused (403) and the operator sees a line naming the origin, without setting
/// `HARNESS_LOG`.
#[test]
fn a_refused_cross_origin_request_is_logged_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    // No model call is made: the request is refused before a turn is queued.
    let serve = Serve::start(&ws, "http://127.0.0.1:9/v1");
    let status = runtime().block_on(async {
        reqwest::Client::new()
            .post(format!("{}/api/agents/harness/sessions/s1/messages", serve.url))
            .header("Origin", "http://evil.example")
            .json(&json!({"message": "run something"}))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 403);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !serve.log().contains("evil.example") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = serve.log();
    assert!(log.contains("evil.example") && log.contains("WARN"), "{log}");
}

/// The mockllm binary `scripts/mockllm.sh` builds (HARNESS_TEST_MOCKLLM).
pub(super) fn mockllm() -> PathBuf {
    let path = std::env::var_os("HARNESS_TEST_MOCKLLM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/harness-mockllm/mockllm"));
    assert!(
        path.exists(),
        "{} not found: run `bash scripts/mockllm.sh` (scripts/test.sh does) and export HARNESS_TEST_MOCKLLM",
        path.display()
    );
    path
}

/// A running mockllm with `--script` rules, on a port of its own choosing.
pub(super) struct MockLlm {
    child: Child,
    /// The OpenAI base URL (`http://127.0.0.1:PORT/v1`).
    pub(super) base: String,
}

impl MockLlm {
    pub(super) fn start(script: &Path) -> Self {
        let mut child = std::process::Command::new(mockllm())
            .args(["--port", "0", "--script"])
            .arg(script)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("mockllm exited before listening").unwrap();
            if let Some(rest) = line.strip_prefix("mockllm listening on ") {
                break format!("{}/v1", rest.split_whitespace().next().unwrap());
            }
        };
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        Self { child, base }
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every task file under `dir`, recursively.
fn task_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            task_files(&path, found);
        } else if path.parent().is_some_and(|parent| parent.ends_with("tasks")) {
            found.push(path);
        }
    }
}

/// Through the binary: a chat completion (a `chatcmpl-…` session, 41 bytes) delegates to
/// `general-purpose`, which delegates again; the grandchild's answer comes back to the
/// client through both levels, and each level's task is recorded with its depth.
#[test]
fn a_depth_two_delegation_from_a_chat_completion_returns_the_grandchilds_answer() {
    let dir = tempfile::tempdir().unwrap();
    let spawn = |task: &str| {
        json!({"tool_calls": [{"name": "agent_spawn",
            "arguments": {"agent_id": "general-purpose", "task": task, "timeout_seconds": 120}}]})
    };
    let rules = json!([
        {"name": "grandchild answers", "when": {"last_role": "user", "last_text_contains": "level 2"},
         "reply": {"text": "GRANDCHILD-ANSWER-42"}},
        {"name": "child delegates", "when": {"last_role": "user", "last_text_contains": "level 1"},
         "reply": spawn("level 2")},
        {"name": "parent delegates", "when": {"last_role": "user", "last_text_contains": "question"},
         "reply": spawn("level 1")},
        {"name": "relay", "when": {"last_role": "tool", "last_text_contains": "GRANDCHILD-ANSWER-42"},
         "reply": {"text": "relayed GRANDCHILD-ANSWER-42"}},
        {"name": "lost", "when": {"last_role": "tool"}, "reply": {"text": "no answer"}}
    ]);
    let script = dir.path().join("rules.json");
    std::fs::write(&script, rules.to_string()).unwrap();
    let model = MockLlm::start(&script);
    let ws = workspace(dir.path(), "[subagents]\nmax_depth = 2\n");
    let serve = Serve::start(&ws, &model.base);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let body: Value = runtime.block_on(async {
        let response = client
            .post(format!("{}/v1/chat/completions", serve.url))
            .json(&json!({"model": "harness", "messages": [{"role": "user", "content": "question"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    });
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "relayed GRANDCHILD-ANSWER-42",
        "{body}\n{}",
        serve.log()
    );
    // The parent's task file is named by its chatcmpl session, the child's by its bounded id.
    let mut files = Vec::new();
    task_files(&ws, &mut files);
    let mut depths = Vec::new();
    for file in &files {
        let tasks: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        for record in tasks["tasks"].as_object().unwrap().values() {
            assert_eq!(record["status"], "completed", "{record}");
            assert!(record["child_session"].as_str().unwrap().len() <= 101, "{record}");
            let parent = record["parent_session"].as_str().unwrap();
            let name = file.file_stem().unwrap().to_str().unwrap();
            assert_eq!(parent, name, "{record}");
            depths.push((record["depth"].as_u64().unwrap(), parent.to_owned()));
        }
    }
    depths.sort();
    assert_eq!(depths.len(), 2, "{files:?}");
    assert_eq!(depths[0].0, 1);
    assert!(
        depths[0].1.starts_with("chatcmpl-") && depths[0].1.len() == 41,
        "{depths:?}"
    );
    assert_eq!(depths[1].0, 2);
    assert!(depths[1].1.starts_with("sub.general-purpose."), "{depths:?}");
}

/// Issue 31, row 8: two `harness serve` processes on Redis state. A cancel posted to replica
/// B reaches the turn running on replica A (through the session's inbox in Redis), and a
/// message injected through B while A runs a turn reaches the model on the session's next
/// step.
#[test]
fn a_cancel_and_an_interrupt_posted_to_replica_b_reach_the_turn_on_replica_a() {
    let deployment = Deployment::new(StateKind::Redis, "5s");
    let replicas: Vec<Serve> = deployment
        .replicas
        .iter()
        .map(|ws| Serve::start(ws, &deployment.base))
        .collect();
    let (a, b) = (replicas[0].url.clone(), replicas[1].url.clone());
    let runtime = runtime();
    let client = reqwest::Client::new();
    let session = "/api/agents/harness/sessions/s";

    // Cancel: the model would take two minutes to answer `hang`.
    let running = {
        let (client, a) = (client.clone(), a.clone());
        runtime.spawn(async move {
            let url = format!("{a}{session}/messages");
            client.post(url).json(&json!({"message": "hang"})).send().await.unwrap()
        })
    };
    deployment.await_requests(1);
    let cancel: Value = runtime.block_on(async {
        let url = format!("{b}{session}/cancel");
        client
            .post(url)
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(cancel, json!({"cancelled": false, "posted": true}));
    // A liveness bound (the model would answer after 120 s), not a performance assertion.
    let response = runtime
        .block_on(async { tokio::time::timeout(std::time::Duration::from_secs(60), running).await })
        .expect("the cancel reached replica A")
        .unwrap();
    assert_eq!(response.status(), 503);

    // Interrupt with a message while A runs a slow turn; the message reaches the model.
    let running = {
        let (client, a) = (client.clone(), a.clone());
        runtime.spawn(async move { send(&client, &a, "s", "slow").await })
    };
    deployment.await_requests(2);
    let posted = runtime.block_on(async {
        let url = format!("{b}{session}/interrupt");
        client
            .post(url)
            .json(&json!({"message": "PS: metric units"}))
            .send()
            .await
            .unwrap()
    });
    assert_eq!(posted.status(), 200);
    runtime.block_on(running).unwrap();
    runtime.block_on(send(&client, &b, "s", "next"));
    let seen = deployment.seen.lock().unwrap().clone();
    let last = seen.last().unwrap().to_string();
    assert!(last.contains("PS: metric units"), "{last}");
    drop(replicas);
}

/// `/metrics` after real turns, parsed by the official `prometheus_client` text parser: the
/// turn, model-call, token and tool series, under the API's keys, with no user or session
/// label anywhere.
#[test]
fn metrics_after_real_turns_parse_with_prometheus_client_and_carry_no_user_or_session() {
    let (base, _seen, _model) = server::start();
    let dir = tempfile::tempdir().unwrap();
    let hash = hex::encode(sha2::Sha256::digest(b"sk-alice"));
    let ws = workspace(
        dir.path(),
        &format!("[serve]\n[[serve.keys]]\nuser = \"alice\"\nsha256 = \"{hash}\"\n"),
    );
    let serve = Serve::start(&ws, &base);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let url = serve.url.clone();
    let body = runtime.block_on(async {
        for (session, message) in [("sess-one", "hello"), ("sess-one", "again"), ("sess-two", "hi")] {
            let response = client
                .post(format!("{url}/api/agents/harness/sessions/{session}/messages"))
                .bearer_auth("sk-alice")
                .json(&json!({"message": message}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
        let refused = client.get(format!("{url}/metrics")).send().await.unwrap();
        assert_eq!(refused.status(), 401, "the API's keys guard /metrics");
        let response = client
            .get(format!("{url}/metrics"))
            .bearer_auth("sk-alice")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain; version=0.0.4")
        );
        response.text().await.unwrap()
    });
    let samples = parse_metrics(&body);
    let value = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
            .and_then(|s| s["value"].as_f64())
            .unwrap_or_else(|| panic!("{name} {labels:?} in\n{body}"))
    };
    assert_eq!(
        value("harness_turns_total", &[("agent", "harness"), ("outcome", "ok")]),
        3.0
    );
    assert_eq!(
        value("harness_turn_duration_seconds_count", &[("agent", "harness")]),
        3.0
    );
    assert_eq!(
        value(
            "harness_model_call_duration_seconds_count",
            &[("provider", "openai"), ("model", "fake")]
        ),
        3.0
    );
    assert_eq!(
        value("harness_model_calls_total", &[("model", "fake"), ("outcome", "ok")]),
        3.0
    );
    value("harness_tokens_total", &[("model", "fake"), ("kind", "input")]);
    assert_eq!(value("harness_queue_depth", &[]), 0.0);
    assert_eq!(value("harness_turns_running", &[]), 0.0);
    for sample in &samples {
        let labels = sample["labels"].as_object().unwrap();
        for (key, label) in labels {
            assert!(!key.contains("user") && !key.contains("session"), "{sample}");
            let label = label.as_str().unwrap();
            assert!(!label.contains("alice") && !label.contains("sess-"), "{sample}");
        }
    }
}

/// `/metrics` text parsed by the official `prometheus_client` parser: one JSON object per
/// sample (`family`, `type`, `name`, `labels`, `value`).
fn parse_metrics(body: &str) -> Vec<Value> {
    let parse = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        out.append({"family": family.name, "type": family.type, "name": sample.name,
                    "labels": sample.labels, "value": sample.value})
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(python())
        .args(["-c", parse])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), body.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = super::cli::text(&output);
    assert!(output.status.success(), "{stderr}\n{body}");
    serde_json::from_str(&stdout).unwrap()
}

/// The value of the sample `name` with `labels` (among others), if there is one.
fn sample(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .and_then(|s| s["value"].as_f64())
}

/// `GET /metrics` with `key`, parsed.
async fn scrape(client: &reqwest::Client, url: &str, key: &str) -> Vec<Value> {
    let response = client
        .get(format!("{url}/metrics"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    parse_metrics(&response.text().await.unwrap())
}

/// Scrapes until `name{labels}` is `want` (a generous deadline: the value is reached when
/// a background task or a turn gets there, which a loaded machine may take a while to do).
async fn await_metric(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    name: &str,
    labels: &[(&str, &str)],
    want: f64,
) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let samples = scrape(client, url, key).await;
        if sample(&samples, name, labels) == Some(want) {
            return samples;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} {labels:?} never became {want}: {:?}",
            sample(&samples, name, labels)
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `/metrics`' gauges after real turns (issue 29): a turn that waits for approval counts
/// its call in `harness_approvals_pending{kind="session"}`, a running background task shows
/// in `harness_background_tasks{state="running"}` (read from the task records), and no
/// label carries a user or session id.
#[test]
fn metrics_count_a_pending_approval_and_a_running_background_task() {
    let dir = tempfile::tempdir().unwrap();
    let spawn = json!({"tool_calls": [{"name": "agent_spawn",
        "arguments": {"agent_id": "general-purpose", "task": "slow child work", "timeout_seconds": 0}}]});
    let rules = json!([
        {"name": "asks", "when": {"last_role": "user", "last_text_contains": "approve me"},
         "reply": {"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}},
        {"name": "child hangs", "when": {"last_role": "user", "last_text_contains": "slow child work"},
         "reply": {"text": "child done"}, "delay_ms": 600000},
        {"name": "parent spawns", "when": {"last_role": "user", "last_text_contains": "in the background"},
         "reply": spawn},
        {"name": "parent answers", "when": {"last_role": "tool"}, "reply": {"text": "spawned"}}
    ]);
    let script = dir.path().join("rules.json");
    std::fs::write(&script, rules.to_string()).unwrap();
    let model = MockLlm::start(&script);
    let hash = hex::encode(sha2::Sha256::digest(b"sk-alice"));
    let ws = workspace(
        dir.path(),
        &format!(
            "[permissions]\nask = [\"list_files\"]\n[serve]\n[[serve.keys]]\nuser = \"alice\"\nsha256 = \"{hash}\"\n"
        ),
    );
    let serve = Serve::start(&ws, &model.base);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let url = serve.url.clone();
    runtime.block_on(async {
        let before = scrape(&client, &url, "sk-alice").await;
        assert_eq!(
            sample(&before, "harness_approvals_pending", &[("kind", "session")]),
            Some(0.0)
        );
        assert_eq!(
            sample(&before, "harness_approvals_pending", &[("kind", "task")]),
            Some(0.0)
        );
        assert_eq!(
            sample(&before, "harness_background_tasks", &[("state", "running")]),
            Some(0.0)
        );
        assert_eq!(sample(&before, "harness_sandboxes_active", &[]), Some(0.0));

        let post = |session: &str, message: &str| {
            client
                .post(format!("{url}/api/agents/harness/sessions/{session}/messages"))
                .bearer_auth("sk-alice")
                .json(&json!({"message": message}))
                .send()
        };
        let asked: Value = post("sess-ask", "approve me").await.unwrap().json().await.unwrap();
        assert_eq!(asked["status"], "awaiting_approval", "{asked}");
        let after = scrape(&client, &url, "sk-alice").await;
        assert_eq!(
            sample(&after, "harness_approvals_pending", &[("kind", "session")]),
            Some(1.0)
        );

        let spawned = post("sess-bg", "work in the background").await.unwrap();
        assert_eq!(spawned.status(), 200);
        let body: Value = spawned.json().await.unwrap();
        assert_eq!(body["text"], "spawned", "{body}");
        let samples = await_metric(
            &client,
            &url,
            "sk-alice",
            "harness_background_tasks",
            &[("state", "running")],
            1.0,
        )
        .await;
        assert_eq!(
            sample(&samples, "harness_background_tasks", &[("state", "completed")]),
            Some(0.0)
        );
        assert_eq!(
            sample(&samples, "harness_approvals_pending", &[("kind", "session")]),
            Some(1.0)
        );
        for s in &samples {
            for (key, label) in s["labels"].as_object().unwrap() {
                assert!(!key.contains("user") && !key.contains("session"), "{s}");
                let label = label.as_str().unwrap();
                assert!(!label.contains("alice") && !label.contains("sess-"), "{s}");
            }
        }

        // Deciding the call clears it.
        let decided = client
            .post(format!("{url}/api/agents/harness/sessions/sess-ask/approvals"))
            .bearer_auth("sk-alice")
            .json(&json!({"all": "deny"}))
            .send()
            .await
            .unwrap();
        assert_eq!(decided.status(), 200);
        let after = scrape(&client, &url, "sk-alice").await;
        assert_eq!(
            sample(&after, "harness_approvals_pending", &[("kind", "session")]),
            Some(0.0)
        );
    });
    drop(serve);
}

/// `harness_sandboxes_active` counts the sandbox a running turn holds bound: 1 while a
/// sandboxed turn waits for its model, 0 once the turn is cancelled and releases it.
#[test]
fn metrics_count_the_sandbox_a_running_turn_holds() {
    use std::os::unix::fs::PermissionsExt;
    // A scratch directory a sandbox uid can traverse, as in the sandbox tests (their uid
    // range and state directory: uid locks there keep concurrent tests apart).
    let dir = tempfile::Builder::new()
        .prefix("hcli-sbx-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let (base, _seen, _model) = server::start();
    let hash = hex::encode(sha2::Sha256::digest(b"sk-alice"));
    let ws = workspace(
        dir.path(),
        &format!(
            "[agent]\nisolation = \"user\"\n[permissions]\nmode = \"bypass\"\n\
             [sandbox]\nkind = \"namespace\"\nuid_range = [231200, 231399]\nstate_dir = \"/var/tmp/harness-sandbox-test-state\"\n\
             [serve]\n[[serve.keys]]\nuser = \"alice\"\nsha256 = \"{hash}\"\n"
        ),
    );
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut serve = Serve::start(&ws, &base);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let url = serve.url.clone();
    let session = format!("{url}/api/agents/harness/sessions/sess-sbx");
    runtime.block_on(async {
        let before = scrape(&client, &url, "sk-alice").await;
        assert_eq!(sample(&before, "harness_sandboxes_active", &[]), Some(0.0));
        // The model would answer after 120 s: the turn holds its sandbox meanwhile.
        let running = {
            let (client, session) = (client.clone(), session.clone());
            tokio::spawn(async move {
                client
                    .post(format!("{session}/messages"))
                    .bearer_auth("sk-alice")
                    .json(&json!({"message": "hang"}))
                    .send()
                    .await
                    .unwrap()
            })
        };
        await_metric(&client, &url, "sk-alice", "harness_sandboxes_active", &[], 1.0).await;
        let cancelled = client
            .post(format!("{session}/cancel"))
            .bearer_auth("sk-alice")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(cancelled.status(), 200);
        let _ = running.await.unwrap();
        await_metric(&client, &url, "sk-alice", "harness_sandboxes_active", &[], 0.0).await;
    });
    // A clean stop shuts the warm sandbox down.
    serve.terminate();
    let _ = serve.child.wait();
}

/// A chat completion as `user` (no session header): the session it ran in, and the body.
async fn chat(client: &reqwest::Client, url: &str, user: &str, messages: &[Value]) -> (String, Value) {
    let response = client
        .post(format!("{url}/v1/chat/completions"))
        .header("x-harness-user", user)
        .json(&json!({"model": "harness", "messages": messages}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let session = response
        .headers()
        .get("x-harness-session")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    (session, body)
}

/// The messages a client holds after `body` answered `messages`.
fn with_reply(messages: &[Value], body: &Value, next: &str) -> Vec<Value> {
    let mut messages = messages.to_vec();
    messages.push(body["choices"][0]["message"].clone());
    messages.push(json!({"role": "user", "content": next}));
    messages
}

/// A stateless chat continued after `harness serve` restarts is one session: the
/// conversation's record is in the `[state]` store, not in the process.
#[test]
fn a_stateless_chat_is_one_session_across_a_restart_of_serve() {
    let (base, seen, _model_runtime) = server::start();
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    let runtime = runtime();
    let client = reqwest::Client::new();
    let first = vec![json!({"role": "user", "content": "one"})];
    let mut serve = Serve::start(&ws, &base);
    let (session, body) = runtime.block_on(chat(&client, &serve.url, "alice", &first));
    assert_eq!(body["choices"][0]["message"]["content"], "turn 1");
    serve.terminate();
    assert_eq!(serve.child.wait().unwrap().code(), Some(0));
    let serve = Serve::start(&ws, &base);
    let second = with_reply(&first, &body, "two");
    let (again, body) = runtime.block_on(chat(&client, &serve.url, "alice", &second));
    assert_eq!(again, session, "the restarted server continued the session");
    assert_eq!(body["choices"][0]["message"]["content"], "turn 2");
    // The model got the session's own history plus the one new message.
    let users = seen.lock().unwrap().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 2);
}

/// Two replicas sharing `[state]` on Redis: turn 1 on A, turn 2 on B is one session; another
/// user resending the same history is never matched to it.
#[test]
fn replicas_on_shared_state_continue_one_stateless_chat_only_for_its_user() {
    let deployment = Deployment::new(StateKind::Redis, "5s");
    let replicas: Vec<Serve> = deployment
        .replicas
        .iter()
        .map(|ws| Serve::start(ws, &deployment.base))
        .collect();
    let runtime = runtime();
    let client = reqwest::Client::new();
    let first = vec![json!({"role": "user", "content": "one"})];
    let (session, body) = runtime.block_on(chat(&client, &replicas[0].url, "alice", &first));
    let second = with_reply(&first, &body, "two");
    let (on_b, body) = runtime.block_on(chat(&client, &replicas[1].url, "alice", &second));
    assert_eq!(on_b, session, "replica B continued replica A's session");
    assert_eq!(body["choices"][0]["message"]["content"], "turn 2");
    let (bobs, _) = runtime.block_on(chat(&client, &replicas[1].url, "bob", &second));
    assert_ne!(bobs, session, "bob's request never continues alice's session");
    let third = with_reply(&second, &body, "three");
    let (on_a, body) = runtime.block_on(chat(&client, &replicas[0].url, "alice", &third));
    assert_eq!(on_a, session);
    assert_eq!(body["choices"][0]["message"]["content"], "turn 3");
}

/// An image request to `model` served with `[model] vision = ...`: the status, and whether
/// the provider received the image part.
fn image_request(vision: bool, model: &str) -> (u16, Value, bool) {
    let (base, seen, _model_runtime) = server::start();
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), &format!("[model]\nvision = {vision}\n"));
    let serve = Serve::start_model(&ws, &base, model);
    let body = json!({"model": "harness", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]});
    let (status, answer) = runtime().block_on(async {
        let response = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", serve.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json::<Value>().await.unwrap())
    });
    let sent = seen
        .lock()
        .unwrap()
        .iter()
        .any(|request| request["messages"].to_string().contains("image_url"));
    (status, answer, sent)
}

/// `[model] vision` overrides what the name suggests, both ways, through `harness serve`.
#[test]
fn model_vision_declares_whether_image_parts_are_taken() {
    // `fake` is no vision model by name; declared one, the image reaches the provider.
    let (status, answer, sent) = image_request(true, "openai:fake");
    assert_eq!(status, 200, "{answer}");
    assert!(sent, "the provider got the image part");
    // `gpt-4o` is one by name; declared not, the request is a clear 400 and nothing is sent.
    let (status, answer, sent) = image_request(false, "openai:gpt-4o");
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("takes no images"), "{message}");
    assert!(!sent);
}

/// The model of the takeover tests: the parent's `start the job` spawns a background child
/// (`CHILD-TASK`), whose first model call hangs (its process is killed during it) and whose
/// next one answers `CHILD-RESULT-7`. Returns the server and the count of child calls.
fn takeover_model() -> (
    harness_test_support::openai::FakeOpenAi,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use harness_test_support::openai::{FakeOpenAi, Reply};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let child_calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&child_calls);
    let server = FakeOpenAi::start(move |request| {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .unwrap_or_default();
        if last_user.contains("CHILD-TASK") {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                return Reply::text("never sent").after(std::time::Duration::from_secs(600));
            }
            return Reply::text("CHILD-RESULT-7");
        }
        if messages.last().is_some_and(|m| m["role"] == "tool") {
            return Reply::text("spawned it");
        }
        if last_user.contains("start the job") {
            return Reply::tool_call(
                "agent_spawn",
                &json!({"agent_id": "general-purpose", "task": "CHILD-TASK: count the files", "timeout_seconds": 0}),
            );
        }
        Reply::text("parent answer")
    });
    (server, child_calls)
}

/// The task records of session `s` through replica `url`'s native API.
fn session_tasks(runtime: &tokio::runtime::Runtime, url: &str) -> Vec<Value> {
    runtime.block_on(async {
        let response = reqwest::get(format!("{url}/api/agents/harness/sessions/s/tasks"))
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap_or_default();
        body["tasks"].as_array().cloned().unwrap_or_default()
    })
}

/// Polls `url`'s task records of session `s` until `done` holds for the one task (a
/// generous liveness bound, not a performance assertion).
fn await_task(runtime: &tokio::runtime::Runtime, url: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let tasks = session_tasks(runtime, url);
        if let [task] = tasks.as_slice()
            && done(task)
        {
            return task.clone();
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {tasks:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// How many messages of `request` contain `needle`.
fn mentions(request: &Value, needle: &str) -> usize {
    request["messages"].as_array().map_or(0, |messages| {
        messages.iter().filter(|m| m.to_string().contains(needle)).count()
    })
}

const TAKEOVER_CONFIG: &str = "\n[permissions]\nallow = [\"agent_spawn\"]\n";

/// Issue 29: two `harness serve` replicas on one Redis `[state]` and composite filesystem.
/// The parent's turn on A spawns a background child whose model call hangs; A is killed
/// with SIGKILL; after the task's lease expired B claims it, continues the child's turn from
/// its shared session (the task's message is not added twice), completes it, and the
/// parent's next step on B receives the result exactly once.
#[test]
fn a_killed_replicas_background_task_is_taken_over_and_delivered_once() {
    taken_over_and_delivered_once(StateKind::Redis);
}

/// The same on PostgreSQL alone (state, leases and shared files).
#[cfg(feature = "postgres")]
#[test]
fn a_killed_replicas_background_task_on_postgres_is_taken_over_and_delivered_once() {
    taken_over_and_delivered_once(StateKind::Postgres);
}

fn taken_over_and_delivered_once(state: StateKind) {
    let (server, child_calls) = takeover_model();
    let deployment = Deployment::with_server(state, "2s", TAKEOVER_CONFIG, server);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let mut a = Serve::start(&deployment.replicas[0], &deployment.base);
    let b = Serve::start(&deployment.replicas[1], &deployment.base);
    let reply = runtime.block_on(send(&client, &a.url, "s", "start the job"));
    assert_eq!(reply["text"], "spawned it", "{reply}");
    let started = await_task(&runtime, &a.url, "the child's model call never started", |_| {
        child_calls.load(std::sync::atomic::Ordering::SeqCst) == 1
    });
    assert_eq!(started["status"], "running", "{started}");
    assert!(
        started["lease_ms"].as_u64().is_some(),
        "a served task carries a lease: {started}"
    );
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let done = await_task(&runtime, &b.url, "replica B never completed the task", |task| {
        task["status"] != "running"
    });
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"], "CHILD-RESULT-7", "{done}");
    assert_ne!(done["runner"], started["runner"], "B ran it: {done}");
    assert_eq!(done["delivered"], false, "{done}");
    assert!(b.log().contains("takeover:"), "{}", b.log());
    assert_eq!(child_calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    // The continued turn sent the task's message once.
    let child_requests: Vec<Value> = deployment
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| mentions(r, "CHILD-TASK") > 0 && mentions(r, "start the job") == 0)
        .cloned()
        .collect();
    assert_eq!(child_requests.len(), 2, "{child_requests:?}");
    assert_eq!(mentions(&child_requests[1], "CHILD-TASK: count the files"), 1);
    runtime.block_on(send(&client, &b.url, "s", "what came back"));
    runtime.block_on(send(&client, &b.url, "s", "and now"));
    let seen = deployment.seen.lock().unwrap().clone();
    let parent: Vec<&Value> = seen.iter().filter(|r| mentions(r, "start the job") > 0).collect();
    let next_step = parent[parent.len() - 2];
    assert!(mentions(next_step, "what came back") == 1, "{next_step}");
    assert_eq!(
        mentions(next_step, "CHILD-RESULT-7"),
        1,
        "delivered to the next step: {next_step}"
    );
    let after = parent[parent.len() - 1];
    assert_eq!(mentions(after, "CHILD-RESULT-7"), 1, "delivered once: {after}");
    let delivered = session_tasks(&runtime, &b.url);
    assert_eq!(delivered[0]["delivered"], true, "{delivered:?}");
}

/// Issue 29: a one-shot `harness run` (here waiting for its task) killed with SIGKILL while
/// its background child runs lists nothing for takeover: the replica serving the workspace
/// never runs the child again, and the parent's next step receives it `lost`, with the reason.
#[test]
fn a_killed_one_shot_runs_task_is_lost_never_taken_over() {
    let (server, child_calls) = takeover_model();
    let deployment = Deployment::with_server(StateKind::Redis, "2s", TAKEOVER_CONFIG, server);
    let runtime = runtime();
    let client = reqwest::Client::new();
    let b = Serve::start(&deployment.replicas[1], &deployment.base);
    let mut run = harness()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &deployment.base)
        .args([
            "run",
            "--wait-tasks",
            "--model",
            "openai:fake",
            "--session",
            "s",
            "--workspace",
        ])
        .arg(&deployment.replicas[0])
        .arg("start the job")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = await_task(&runtime, &b.url, "the child's model call never started", |_| {
        child_calls.load(std::sync::atomic::Ordering::SeqCst) == 1
    });
    assert!(
        started["lease_ms"].is_null(),
        "a one-shot run's task has no lease: {started}"
    );
    run.kill().unwrap();
    run.wait().unwrap();
    // The sweep's signal: the record's heartbeat is older than the stale limit (30 s).
    let heartbeat = started["heartbeat_ms"].as_u64().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let now = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap();
        let record = &session_tasks(&runtime, &b.url)[0];
        assert_eq!(record["status"], "running", "nothing ended it: {record}");
        assert_eq!(record["runner"], started["runner"], "never claimed: {record}");
        if now.saturating_sub(heartbeat) > 31_000 {
            break;
        }
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    runtime.block_on(send(&client, &b.url, "s", "what came back"));
    let lost = &session_tasks(&runtime, &b.url)[0];
    assert_eq!(lost["status"], "lost", "{lost}");
    let reason = lost["result"].as_str().unwrap_or_default();
    assert!(reason.contains("one-shot `harness run`"), "{reason}");
    assert_eq!(
        child_calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the child never ran again"
    );
    let seen = deployment.seen.lock().unwrap().clone();
    let last = seen.last().unwrap();
    assert!(mentions(last, "status: lost") == 1, "{last}");
}
