//! Issue 15 items 3 and 9 (memory), black-box through the binary against the project's fake
//! server (`mock-llm`): one `harness run` per turn costs the turn's requests plus extraction
//! at the configured rate; a later process catches up; the wait at exit is bounded and
//! announced; `memory consolidate` keeps a history and refuses a drastic rewrite.

use crate::cli::{harness, script, text};
use crate::readme::binaries;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `mock-llm` (killed on drop) and its base URL.
struct Mock {
    child: Child,
    base: String,
}

impl Mock {
    fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(binaries().join("mock-llm"))
            .args(["--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line.trim().rsplit(' ').next().unwrap().to_owned();
        assert!(base.starts_with("http://"), "{line}");
        Self { child, base }
    }

    /// `GET /stats`: (all requests, memory requests).
    fn stats(&self) -> (u64, u64) {
        let host = self.base.trim_start_matches("http://").trim_end_matches("/v1");
        let mut stream = std::net::TcpStream::connect(host).unwrap();
        write!(stream, "GET /stats HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let body = &response[response.find("\r\n\r\n").unwrap() + 4..];
        let stats: serde_json::Value = serde_json::from_str(body).unwrap();
        (
            stats["requests"].as_u64().unwrap(),
            stats["memory_requests"].as_u64().unwrap(),
        )
    }

    /// `harness` talking to this mock, in workspace `ws`.
    fn harness(&self, ws: &Path) -> Command {
        let mut command = harness();
        command
            .env("OPENAI_API_KEY", "x")
            .env("OPENAI_BASE_URL", &self.base)
            .env_remove("HARNESS_MODEL")
            .env("HARNESS_WORKSPACE", ws);
        command
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace(dir: &Path, toml: &str) -> std::path::PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), toml).unwrap();
    ws
}

fn daily_logs(ws: &Path) -> String {
    let mut text = String::new();
    let Ok(entries) = std::fs::read_dir(ws.join("default").join("memory")) else {
        return text;
    };
    for entry in entries.flatten() {
        if entry.path().extension().is_some_and(|ext| ext == "md") {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap());
        }
    }
    text
}

const THROTTLED: &str = "[memory]\nextraction_throttle = \"1h\"\nconsolidation_min_interval = \"1h\"\n";

#[test]
fn twenty_cli_turns_cost_the_turns_plus_throttled_extraction_and_a_later_process_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), THROTTLED);
    let mock = Mock::start(&[]);
    for turn in 1..=20 {
        let output = mock
            .harness(&ws)
            .args(["run", "--model", "openai:mock", "--session", "s1"])
            .arg(format!("fact number {turn}"))
            .output()
            .unwrap();
        assert!(output.status.success(), "turn {turn}: {}", text(&output).1);
    }
    let (requests, memory) = mock.stats();
    let turns = requests - memory;
    assert_eq!(
        turns % 20,
        0,
        "every turn costs the same: {requests} requests, {memory} memory"
    );
    // The first run extracts (and consolidates what it wrote); the other nineteen fall in the
    // persisted throttle window and the consolidation gap, so they start none.
    assert_eq!(memory, 2, "{requests} requests, {memory} of them memory");
    let log = daily_logs(&ws);
    assert!(
        log.contains("fact number 1") && !log.contains("fact number 20"),
        "{log}"
    );

    // A later process catches up on what the throttle left pending, ignoring the throttle.
    let output = mock
        .harness(&ws)
        .args(["memory", "extract", "--model", "openai:mock"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("s1: ") && stdout.contains("new facts written"),
        "{stdout}"
    );
    let log = daily_logs(&ws);
    for turn in 1..=20 {
        assert!(
            log.contains(&format!("fact number {turn}")),
            "turn {turn} missing: {log}"
        );
    }
    assert_eq!(mock.stats().1, 3, "one extraction; the consolidation gap holds");
    // Nothing is pending any more.
    let output = mock
        .harness(&ws)
        .args(["memory", "extract", "--model", "openai:mock", "--session", "s1"])
        .output()
        .unwrap();
    assert_eq!(text(&output).0.trim(), "s1: nothing pending");
    assert_eq!(mock.stats().1, 3);
}

#[test]
fn the_wait_for_a_slow_extraction_is_announced_and_bounded_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    let slow = Mock::start(&["--memory-latency-ms", "60000"]);
    let started = std::time::Instant::now();
    let output = slow
        .harness(&ws)
        .args(["run", "--model", "openai:mock", "--session", "s1", "I keep bees."])
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(!stdout.trim().is_empty(), "the reply is printed");
    assert!(stderr.contains("finishing memory extraction, up to 10 s"), "{stderr}");
    // The bound: the extraction would take a minute.
    assert!(elapsed < std::time::Duration::from_secs(40), "{elapsed:?}");
    assert_eq!(slow.stats().1, 1, "the extraction was started");
    assert!(!daily_logs(&ws).contains("I keep bees"));
    assert!(
        !ws.join("default/memory/.extraction/harness/s1.json").exists(),
        "an abandoned extraction does not move the watermark"
    );

    // A later process with a fast model catches up on the abandoned extraction.
    let fast = Mock::start(&[]);
    let output = fast
        .harness(&ws)
        .args(["memory", "extract", "--model", "openai:mock", "--session", "s1"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(daily_logs(&ws).contains("I keep bees"), "{}", daily_logs(&ws));
}

const HAND_EDITED: &str = "# Memory\n## Work\n- The user works on Harness, a Rust runtime.\n\
    - The user prefers green tea.\n- The user's cat is called Miso.\n- The user lives in Lyon.\n";

#[test]
fn consolidate_refuses_a_drastic_rewrite_and_keeps_previous_versions() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    let user = ws.join("default");
    std::fs::create_dir_all(user.join("memory")).unwrap();
    std::fs::write(user.join("MEMORY.md"), HAND_EDITED).unwrap();
    std::fs::write(
        user.join("memory/2026-11-29.md"),
        "- The user likes jazz. <!-- session=s1 at=2026-11-29T09:00:00Z -->\n",
    )
    .unwrap();

    let drastic = script(
        dir.path(),
        r##"{"replies": [{"text": "# Memory\n- The user likes jazz.\n"}]}"##,
    );
    let output = harness()
        .args(["memory", "consolidate", "--model", &drastic, "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("would keep only 0 of its 4 current lines") && stderr.contains("MEMORY.md was left unchanged"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(user.join("MEMORY.md")).unwrap(), HAND_EDITED);
    assert!(!user.join("memory/.history").exists());

    let merged = format!("{HAND_EDITED}- The user likes jazz.\n");
    let keeps = script(
        dir.path(),
        &serde_json::json!({"replies": [{"text": merged}]}).to_string(),
    );
    let output = harness()
        .args(["memory", "consolidate", "--model", &keeps, "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output).1);
    assert_eq!(std::fs::read_to_string(user.join("MEMORY.md")).unwrap(), merged);
    let history: Vec<_> = std::fs::read_dir(user.join("memory/.history"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .collect();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(std::fs::read_to_string(&history[0]).unwrap(), HAND_EDITED);
}
