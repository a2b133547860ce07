//! Real OpenAI clients against the served agent: the openai Python SDK and LangChain
//! (`scripts/python-env.sh`, HARNESS_TEST_PYTHON), the openai npm SDK and the Vercel AI SDK
//! (`scripts/node-clients.sh`, HARNESS_TEST_NODE_DIR). Each fixture prints `ok` when every
//! check passed.

use super::support::Server;
use harness_serve::ServeOptions;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Runs `program args` with HARNESS_URL set, off the runtime (the server keeps serving), and
/// asserts it printed `ok`.
async fn run_client(server: &Server, program: PathBuf, args: Vec<PathBuf>, dir: Option<PathBuf>) {
    let url = server.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(&program);
        command.args(&args).env("HARNESS_URL", url);
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        command
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "ok", "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_and_langchain_work_against_the_served_agent() {
    let python = std::env::var_os("HARNESS_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/harness-py/bin/python"));
    assert!(
        python.exists(),
        "{} not found: run `bash scripts/python-env.sh` and export HARNESS_TEST_PYTHON",
        python.display()
    );
    let server = Server::start(ServeOptions::default()).await;
    run_client(&server, python, vec![fixture("python_clients.py")], None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_node_sdk_and_the_vercel_ai_sdk_work_against_the_served_agent() {
    let dir = std::env::var_os("HARNESS_TEST_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/harness-node"));
    assert!(
        dir.join("node_modules/ai").exists(),
        "{} has no node_modules/ai: run `bash scripts/node-clients.sh` and export HARNESS_TEST_NODE_DIR",
        dir.display()
    );
    // ES modules resolve packages from the script's directory: a copy of the fixture runs
    // there, removed when the test ends.
    let script = tempfile::Builder::new()
        .prefix("harness-test-")
        .suffix(".mjs")
        .tempfile_in(&dir)
        .unwrap();
    std::fs::copy(fixture("node_clients.mjs"), script.path()).unwrap();
    let server = Server::start(ServeOptions::default()).await;
    run_client(
        &server,
        PathBuf::from("node"),
        vec![script.path().to_owned()],
        Some(dir),
    )
    .await;
}
