//! `SessionReader`: listing, history and search of saved sessions without an agent.

use harness::history::SessionReader;
use harness_core::{AgentId, Msg, SessionId, UserId};
use harness_fs::{Filesystem, IsolationScope, Namespaced, WriteMode, WsPath};
use std::path::Path;
use std::sync::Arc;

fn reader(dir: &Path) -> SessionReader {
    let fs: Arc<dyn Filesystem> = Arc::new(harness_fs::LocalFs::new(dir).unwrap_or_else(|e| panic!("{e}")));
    let agent = AgentId::parse("harness").unwrap_or_else(|e| panic!("{e}"));
    SessionReader::new(fs, IsolationScope::User, agent)
}

async fn write(fs: &dyn Filesystem, path: &str, bytes: &[u8]) {
    let path = WsPath::parse(path).unwrap_or_else(|e| panic!("{e}"));
    fs.write(&path, bytes, WriteMode::Overwrite)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

fn line(msg: &Msg) -> String {
    format!("{}\n", serde_json::to_string(msg).unwrap_or_default())
}

#[tokio::test]
async fn a_transcript_without_an_index_entry_is_listed_and_searchable() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let reader = reader(dir.path());
    let alice = UserId::parse("alice").unwrap_or_else(|e| panic!("{e}"));
    // Alice's layer under the user scope.
    let root: Arc<dyn Filesystem> = Arc::new(harness_fs::LocalFs::new(dir.path()).unwrap_or_else(|e| panic!("{e}")));
    let fs: Arc<dyn Filesystem> = Arc::new(Namespaced::new(
        root,
        WsPath::parse("alice").unwrap_or_else(|e| panic!("{e}")),
    ));
    // s1 is indexed; s2 died during its first turn (transcript only).
    let index = r#"{"v":1,"sessions":{"s1":{"summary":"hello","created":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:00Z","message_count":2}}}"#;
    write(fs.as_ref(), "agents/harness/sessions/sessions.json", index.as_bytes()).await;
    let s1 = line(&Msg::user("hello")) + &line(&Msg::assistant("Green tea is my favourite."));
    write(fs.as_ref(), "agents/harness/sessions/s1.log.jsonl", s1.as_bytes()).await;
    let s2 = line(&Msg::user("plan a trip\nto Kyoto"));
    write(fs.as_ref(), "agents/harness/sessions/s2.log.jsonl", s2.as_bytes()).await;

    let listed = reader.list(&alice).await.unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<(&str, bool)> = listed.iter().map(|l| (l.id.as_str(), l.unindexed)).collect();
    assert_eq!(ids, [("s1", false), ("s2", true)]);
    assert_eq!(listed[1].summary.summary, "plan a trip to Kyoto");
    assert_eq!(listed[1].summary.message_count, 1);

    let s1 = SessionId::parse("s1").unwrap_or_else(|e| panic!("{e}"));
    let history = reader.history(&alice, &s1).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(history.len(), 2);

    let hits = reader
        .search(&alice, "GREEN kyoto", 10)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let found: Vec<(&str, usize)> = hits.iter().map(|h| (h.session.as_str(), h.line)).collect();
    assert_eq!(found.len(), 2, "{hits:?}");
    assert!(found.contains(&("s1", 2)) && found.contains(&("s2", 1)), "{found:?}");
    // Another user sees nothing; a bad id is an error, not an empty listing.
    let bob = UserId::parse("bob").unwrap_or_else(|e| panic!("{e}"));
    assert!(reader.list(&bob).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
}

#[tokio::test]
async fn under_session_isolation_every_sessions_namespace_is_listed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let fs: Arc<dyn Filesystem> = Arc::new(harness_fs::LocalFs::new(dir.path()).unwrap_or_else(|e| panic!("{e}")));
    let agent = AgentId::parse("harness").unwrap_or_else(|e| panic!("{e}"));
    let reader = SessionReader::new(Arc::clone(&fs), IsolationScope::Session, agent);
    for session in ["s1", "s2"] {
        let body = line(&Msg::user(format!("hello from {session}")));
        write(
            fs.as_ref(),
            &format!("{session}/agents/harness/sessions/{session}.log.jsonl"),
            body.as_bytes(),
        )
        .await;
    }
    write(fs.as_ref(), "knowledge/KNOWLEDGE.md", b"# k").await;
    let user = UserId::parse("anyone").unwrap_or_else(|e| panic!("{e}"));
    let listed = reader.list(&user).await.unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = listed.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2"]);
    let s2 = SessionId::parse("s2").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        reader.history(&user, &s2).await.unwrap_or_else(|e| panic!("{e}")).len(),
        1
    );
}

#[tokio::test]
async fn opening_a_workspace_creates_nothing() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let reader = SessionReader::open(dir.path(), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let user = UserId::parse("default").unwrap_or_else(|e| panic!("{e}"));
    assert!(reader.list(&user).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    assert_eq!(std::fs::read_dir(dir.path()).map(|d| d.count()).unwrap_or(1), 0);
}
