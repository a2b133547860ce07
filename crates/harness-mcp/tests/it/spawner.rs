//! [`StdioSpawner`]: with one, stdio servers are started by it (a sandbox in the harness),
//! with only their configured `env`; a server it cannot start is a failure with its message,
//! never a host child; shutdown kills each server through it and then shuts it down.

use crate::servers::{call, config, host_env, time_bin, wait_for};
use async_trait::async_trait;
use harness_mcp::{McpManager, RestartPolicy, ServerProcess, SpawnedServer, StdioCommand, StdioSpawner};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A test double standing in for a sandbox: starts the command as a plain child with only
/// the configured `env`, and records what it was asked.
#[derive(Default)]
struct Recording {
    asked: Mutex<Vec<StdioCommand>>,
    refuse: Option<String>,
    kills: Arc<AtomicUsize>,
    shutdowns: AtomicUsize,
    pids: Mutex<Vec<u32>>,
}

struct Child {
    child: tokio::process::Child,
    kills: Arc<AtomicUsize>,
}

#[async_trait]
impl ServerProcess for Child {
    async fn kill(&mut self) {
        self.kills.fetch_add(1, Ordering::SeqCst);
        let _ = self.child.kill().await;
    }
}

#[async_trait]
impl StdioSpawner for Recording {
    async fn spawn(&self, command: StdioCommand) -> Result<SpawnedServer, String> {
        self.asked.lock().unwrap().push(command.clone());
        if let Some(refusal) = &self.refuse {
            return Err(refusal.clone());
        }
        let mut child = tokio::process::Command::new(&command.command)
            .args(&command.args)
            .env_clear()
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| err.to_string())?;
        self.pids.lock().unwrap().extend(child.id());
        Ok(SpawnedServer {
            stdin: Box::new(child.stdin.take().unwrap()),
            stdout: Box::new(child.stdout.take().unwrap()),
            stderr: Some(Box::new(child.stderr.take().unwrap())),
            process: Box::new(Child {
                child,
                kills: Arc::clone(&self.kills),
            }),
        })
    }

    async fn shutdown(&self) {
        self.shutdowns.fetch_add(1, Ordering::SeqCst);
    }
}

fn time_server() -> String {
    format!(
        r#"{{"mcpServers": {{"time": {{"transport": "stdio", "command": {:?}, "args": ["--local-timezone", "UTC"], "env": {{"TZ_HINT": "utc"}}}}}}}}"#,
        time_bin()
    )
}

#[tokio::test]
async fn a_spawner_starts_the_stdio_servers_with_only_their_configured_env() {
    let spawner = Arc::new(Recording::default());
    let servers = config(&time_server()).mcp_servers.into_values();
    let manager = McpManager::start_with(
        servers,
        &host_env(),
        Some(Arc::clone(&spawner) as Arc<dyn StdioSpawner>),
        RestartPolicy::default(),
    )
    .await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    let output = call(&manager, "mcp__time__get_current_time", json!({"timezone": "UTC"}))
        .await
        .unwrap();
    assert!(output.text_content().contains("UTC"), "{}", output.text_content());
    {
        let asked = spawner.asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].server, "time");
        assert_eq!(asked[0].command, time_bin());
        assert_eq!(asked[0].args, ["--local-timezone", "UTC"]);
        // The configured env only: nothing of the host's (its secret included).
        assert_eq!(asked[0].env, [("TZ_HINT".to_owned(), "utc".to_owned())]);
    }
    // No host pid: the server is not a host child of the manager's.
    assert_eq!(manager.status("time").unwrap().borrow().pid, None);
    manager.shutdown().await;
    assert_eq!(
        spawner.kills.load(Ordering::SeqCst),
        1,
        "shutdown killed it through the spawner"
    );
    assert_eq!(
        spawner.shutdowns.load(Ordering::SeqCst),
        1,
        "then shut the spawner down"
    );
}

#[tokio::test]
async fn a_server_the_spawner_cannot_start_fails_with_its_message_and_never_starts_on_the_host() {
    let marker = std::env::temp_dir().join(format!("hmcp-host-spawn-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let spawner = Arc::new(Recording {
        refuse: Some("`touch` is not found inside the sandbox: list its directory in [sandbox] read_only".to_owned()),
        ..Recording::default()
    });
    let text = format!(
        r#"{{"mcpServers": {{"host": {{"transport": "stdio", "command": "touch", "args": [{:?}]}}}}}}"#,
        marker.display().to_string()
    );
    let manager = McpManager::start_with(
        config(&text).mcp_servers.into_values(),
        &host_env(),
        Some(Arc::clone(&spawner) as Arc<dyn StdioSpawner>),
        RestartPolicy::default(),
    )
    .await;
    assert!(manager.tools().is_empty());
    let failure = &manager.failures()[0];
    assert_eq!(failure.server, "host");
    assert!(
        failure.reason.contains("cannot start `touch`") && failure.reason.contains("[sandbox] read_only"),
        "{}",
        failure.reason
    );
    assert!(!marker.exists(), "the server ran on the host");
    assert_eq!(spawner.asked.lock().unwrap().len(), 1);
    manager.shutdown().await;
}

/// A server started by the spawner that dies is restarted through the spawner again.
#[tokio::test]
async fn a_spawned_server_that_dies_is_restarted_through_the_spawner() {
    let spawner = Arc::new(Recording::default());
    let policy = RestartPolicy {
        backoff: std::time::Duration::from_millis(50),
        ..RestartPolicy::default()
    };
    let manager = McpManager::start_with(
        config(&time_server()).mcp_servers.into_values(),
        &host_env(),
        Some(Arc::clone(&spawner) as Arc<dyn StdioSpawner>),
        policy,
    )
    .await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    let first = spawner.pids.lock().unwrap()[0];
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut status = manager.status("time").unwrap();
    wait_for(&mut status, |s| {
        s.restarts == 1 && s.phase == harness_mcp::ServerPhase::Ready
    })
    .await;
    assert_eq!(spawner.asked.lock().unwrap().len(), 2, "restarted through the spawner");
    let output = call(&manager, "mcp__time__get_current_time", json!({"timezone": "UTC"}))
        .await
        .unwrap();
    assert!(output.text_content().contains("UTC"), "{}", output.text_content());
    manager.shutdown().await;
}
