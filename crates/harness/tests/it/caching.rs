//! The prompt's change check: unchanged files are not re-read on every step.

use crate::support::*;
use harness_core::async_trait;
use harness_fs::{FileInfo, FileVersion, Filesystem, FsError, GrepMatch, GrepOptions, WriteMode, WsPath};
use harness_models::{Reply, ScriptedModel};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts whole-file reads of `AGENTS.md`, passing everything else through.
struct CountingFs {
    inner: Arc<dyn Filesystem>,
    reads: AtomicUsize,
}

#[async_trait]
impl Filesystem for CountingFs {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        if path.as_str().ends_with("AGENTS.md") {
            self.reads.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.read(path).await
    }
    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        self.inner.read_versioned(path).await
    }
    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        self.inner.write(path, bytes, mode).await
    }
    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        self.inner.append(path, bytes).await
    }
    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        self.inner.stat(path).await
    }
    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        self.inner.list(path).await
    }
    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        self.inner.glob(base, pattern, limit).await
    }
    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        self.inner.grep(base, options).await
    }
    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        self.inner.delete(path).await
    }
    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        self.inner.mkdir(path).await
    }
}

#[tokio::test]
async fn unchanged_injected_files_are_read_once_and_edits_are_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "You are Ada.").unwrap();
    let counting = Arc::new(CountingFs {
        inner: Arc::new(harness_fs::LocalFs::new(dir.path()).unwrap()),
        reads: AtomicUsize::new(0),
    });
    let model = ScriptedModel::new()
        .reply(Reply::tool_call("sleep", json!({"ms": 1})))
        .reply(Reply::tool_call("sleep", json!({"ms": 1})))
        .reply_text("a")
        .reply_text("b")
        .reply_text("c");
    let agent = builder()
        .workspace(dir.path())
        .filesystem(counting.clone())
        .model(model.clone())
        .tool(tool(Sleep))
        .build()
        .unwrap();
    agent.call("one", ctx("u", "s")).await.unwrap(); // three steps
    agent.call("two", ctx("u", "s")).await.unwrap(); // one more step
    assert_eq!(model.request_count(), 4);
    assert_eq!(
        counting.reads.load(Ordering::SeqCst),
        1,
        "AGENTS.md was re-read although unchanged"
    );
    // An edit (new size) is seen on the next step.
    std::fs::write(dir.path().join("AGENTS.md"), "You are Bea, edited.").unwrap();
    agent.call("three", ctx("u", "s")).await.unwrap();
    assert_eq!(counting.reads.load(Ordering::SeqCst), 2);
    assert!(
        model
            .last_request()
            .unwrap()
            .system
            .render()
            .contains("You are Bea, edited.")
    );
}
