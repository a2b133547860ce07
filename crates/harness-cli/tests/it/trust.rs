//! What leaves the process and who may reach `harness serve`, through the binary: planted
//! secrets never appear in anything printed or logged; a reserved user name is a usage
//! error; a server under a lowered descriptor limit stays reachable while half-sent
//! requests pile up.

use super::cli::{harness, script, text};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const OPENAI_KEY: &str = "sk-test-PLANTEDopenai9f8e7d6c";
const URL_PASSWORD: &str = "PLANTEDurlpw4711";
const MCP_TOKEN: &str = "PLANTEDmcptoken5150";
const HEADER_VALUE: &str = "PLANTEDinlineheader8086";

fn planted(command: &mut std::process::Command) -> &mut std::process::Command {
    command
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("OPENAI_BASE_URL", format!("http://user:{URL_PASSWORD}@127.0.0.1:9/v1"))
        .env("HARNESS_TEST_MCP_TOKEN", MCP_TOKEN)
        .env("HARNESS_LOG", "trace")
}

fn assert_clean(what: &str, output: &std::process::Output) {
    let (stdout, stderr) = text(output);
    for secret in [OPENAI_KEY, URL_PASSWORD, MCP_TOKEN, HEADER_VALUE] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{what} printed {secret}:\nstdout: {stdout}\nstderr: {stderr}"
        );
    }
}

#[test]
fn planted_secrets_never_appear_in_output_or_logs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("harness.toml"),
        "[memory]\nenabled = false\n[model]\nmax_retries = 0\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("tools.json"),
        format!(
            r#"{{"mcpServers": {{"docs": {{"transport": "streamableHttp",
                "url": "http://127.0.0.1:9/mcp?key=${{HARNESS_TEST_MCP_TOKEN}}",
                "headers": {{"Authorization": "Bearer ${{HARNESS_TEST_MCP_TOKEN}}", "X-Other": "{HEADER_VALUE}"}}}}}}}}"#
        ),
    )
    .unwrap();
    // A failing run: the provider at the URL with a password cannot be reached.
    let output = planted(&mut harness())
        .args(["run", "--model", "openai:gpt-4o-mini", "--workspace"])
        .arg(ws)
        .arg("hi")
        .output()
        .unwrap();
    assert!(!output.status.success(), "{:?}", text(&output));
    assert!(
        text(&output).1.contains("***"),
        "the error should show the masked URL: {:?}",
        text(&output)
    );
    assert_clean("a failing run", &output);
    // `harness tools` (the MCP server fails, naming its URL).
    for json in [false, true] {
        let mut command = harness();
        planted(&mut command).args(["tools", "--workspace"]).arg(ws);
        if json {
            command.arg("--json");
        }
        let output = command.output().unwrap();
        assert_clean("harness tools", &output);
    }
    // A succeeding run on a scripted model that echoes what it is given.
    let model = script(ws, r#"{"replies": [{"text": "done"}]}"#);
    let output = planted(&mut harness())
        .args(["run", "--json", "--model", &model, "--workspace"])
        .arg(ws)
        .arg("hello")
        .output()
        .unwrap();
    assert_clean("a succeeding run", &output);
}

#[test]
fn a_reserved_user_name_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = script(dir.path(), r#"{"replies": [{"text": "never"}]}"#);
    let output = harness()
        .args(["run", "--model", &model, "--user", "memory", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("reserved"), "{stderr}");
}

/// A running `harness serve` under `prlimit --nofile=LIMIT`.
struct Serve {
    child: std::process::Child,
    addr: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_limited(ws: &Path, nofile: u32) -> Serve {
    let model = script(ws, r#"{"replies": [{"text": "hi"}]}"#);
    let mut child = std::process::Command::new("prlimit")
        .arg(format!("--nofile={nofile}"))
        .arg(env!("CARGO_BIN_EXE_harness"))
        .args(["serve", "--bind", "127.0.0.1:0", "--model", &model, "--workspace"])
        .arg(ws)
        .env_remove("HARNESS_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit (util-linux) runs the server");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("harness serve exited before listening").unwrap();
        if let Some(url) = line.strip_prefix("listening on http://") {
            break url.to_owned();
        }
    };
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = std::sync::Arc::clone(&log);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push_str(&line);
        }
    });
    Serve { child, addr, log }
}

#[test]
fn half_sent_requests_beyond_the_descriptor_limit_do_not_lock_clients_out() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    // 64 descriptors; at most 24 connections, so accepting never runs out of them.
    std::fs::write(
        ws.join("harness.toml"),
        "[memory]\nenabled = false\n[serve]\nmax_connections = 24\n",
    )
    .unwrap();
    let serve = serve_limited(ws, 64);
    // More half-sent requests than the process has descriptors.
    let mut attackers = Vec::new();
    for _ in 0..120 {
        if let Ok(mut stream) = std::net::TcpStream::connect(&serve.addr) {
            let _ = stream
                .write_all(b"POST /api/agents/harness/sessions/s/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le");
            attackers.push(stream);
        }
    }
    // A normal request during the attack (a generous bound: it must not hang).
    let mut client = std::net::TcpStream::connect(&serve.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    client
        .write_all(
            format!(
                "GET /api/agents HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                serve.addr
            )
            .as_bytes(),
        )
        .unwrap();
    let mut answer = String::new();
    let read = client.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "no answer during the attack ({read:?}): {answer}; log: {}",
        serve.log.lock().unwrap()
    );
    drop(attackers);
    // The start-up line says what the scope shares.
    let expected = "sharing: agent `harness` (isolation = \"user\") shares nothing between users";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !serve.log.lock().unwrap().contains(expected) {
        assert!(std::time::Instant::now() < deadline, "{}", serve.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
}
