//! HarnessAgent's workspace on other filesystems: a KV store, and a composite on real Redis.

use crate::support::*;
use harness_fs::{Filesystem, KvFs, WsPath};
use harness_models::ScriptedModel;
use harness_store::InMemoryKv;
use std::sync::Arc;

#[tokio::test]
async fn an_agent_runs_on_a_kv_backed_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), WsPath::root()));
    fs.write(
        &WsPath::parse("AGENTS.md").unwrap(),
        b"You are Kay, stored in a KV store.",
        harness_fs::WriteMode::Overwrite,
    )
    .await
    .unwrap();
    let model = ScriptedModel::new().reply_text("one").reply_text("two");
    let agent = builder()
        .workspace(dir.path())
        .filesystem(fs.clone())
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("first", ctx("u", "s")).await.unwrap();
    agent.call("second", ctx("u", "s")).await.unwrap();
    let requests = model.requests();
    assert!(requests[0].system.render().contains("You are Kay"));
    assert_eq!(requests[1].messages.len(), 3);
    // Runtime data lives in the KV store, in the user's namespace, not on the local disk.
    let transcript = fs
        .read(&WsPath::parse("u/agents/harness/sessions/s.log.jsonl").unwrap())
        .await
        .unwrap();
    assert_eq!(harness::session::parse_transcript(&transcript).0.len(), 4);
    assert!(!dir.path().join("u/agents/harness/sessions").exists());
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn two_replicas_share_sessions_through_redis() {
    use harness::filesystem::{FilesystemConfig, FilesystemKind, open};
    use harness_store::{KvStore, RedisKv, RedisKvConfig};

    let url = harness_test_support::services::redis_url();
    let keys = harness_test_support::services::RedisPrefix::new("replicas");
    let key_prefix = keys.prefix().to_owned();
    let config = FilesystemConfig {
        kind: FilesystemKind::Composite,
        redis_url: url.clone(),
        key_prefix: key_prefix.clone(),
        ..FilesystemConfig::default()
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fs_a = open(&config, dir_a.path(), "harness")
        .await
        .expect("Redis must answer at HARNESS_TEST_REDIS_URL (scripts/services.sh starts it)");
    let fs_b = open(&config, dir_b.path(), "harness").await.unwrap();
    // Without a shared state store the builder refuses: the state and the session lease would
    // stay on each replica's disk.
    let refused = builder()
        .workspace(dir_a.path())
        .filesystem(fs_a.clone())
        .model(ScriptedModel::new())
        .build()
        .unwrap_err();
    assert!(
        matches!(refused, harness::BuildError::ReplicaLocalState { .. }),
        "{refused}"
    );
    let state = harness::state::StateConfig {
        kind: harness::state::StateKind::Redis,
        url: Some(url.clone()),
        key_prefix: Some(format!("{key_prefix}state:")),
        ..harness::state::StateConfig::default()
    };
    let state = harness::state::open(&state).await.unwrap().unwrap();
    let model = ScriptedModel::new().reply_text("noted").reply_text("you said hello");
    let replica_a = builder()
        .workspace(dir_a.path())
        .filesystem(fs_a)
        .state_store(state.store.clone())
        .session_lease(state.lease.clone())
        .model(model.clone())
        .build()
        .unwrap();
    let replica_b = builder()
        .workspace(dir_b.path())
        .filesystem(fs_b)
        .state_store(state.store)
        .session_lease(state.lease)
        .model(model.clone())
        .build()
        .unwrap();
    replica_a.call("hello", ctx("u", "shared")).await.unwrap();
    // Another replica, with an empty local disk, continues from the transcript in Redis.
    replica_b.call("what did I say?", ctx("u", "shared")).await.unwrap();
    let texts: Vec<String> = model.requests()[1].messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["hello", "noted", "what did I say?"]);
    assert!(
        !dir_a.path().join("u/agents/harness/sessions").exists(),
        "sessions went to Redis, not the disk"
    );

    let store = RedisKv::connect(&RedisKvConfig {
        url,
        key_prefix,
        ..RedisKvConfig::default()
    })
    .await
    .unwrap();
    let page = store.list("", None, 10_000).await.unwrap();
    assert!(
        page.entries.iter().any(|e| e.key.contains("shared.log.jsonl")),
        "{:?}",
        page.entries.iter().map(|e| &e.key).collect::<Vec<_>>()
    );
    drop(keys);
}
