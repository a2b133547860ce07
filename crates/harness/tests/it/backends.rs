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

/// The configured prefixes share one store but never a key: a model that may read `memory/`
/// does not reach the session transcripts (layout 1 stripped each prefix, so
/// `memory/s1.log.jsonl` *was* `agents/harness/sessions/s1.log.jsonl`), and `MEMORY.md` is
/// not `memory/MEMORY.md`.
#[cfg(feature = "redis")]
#[tokio::test]
async fn shared_prefixes_never_meet_in_the_store() {
    use harness::filesystem::{FilesystemConfig, FilesystemKind, open};
    use harness_fs::{FsError, Namespaced, WriteMode};

    let keys = harness_test_support::services::RedisPrefix::new("prefixes");
    let config = FilesystemConfig {
        kind: FilesystemKind::Composite,
        redis_url: harness_test_support::services::redis_url(),
        key_prefix: keys.prefix().to_owned(),
        ..FilesystemConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let root = open(&config, dir.path(), "harness")
        .await
        .expect("Redis must answer (scripts/services.sh starts it)");
    let p = |path: &str| WsPath::parse(path).unwrap();
    // In the shared namespace and inside a user's layer alike.
    let alice: Arc<dyn Filesystem> = Arc::new(Namespaced::new(Arc::clone(&root), p("alice")));
    for fs in [&root, &alice] {
        fs.write(
            &p("agents/harness/sessions/s1.log.jsonl"),
            b"{\"secret\":1}\n",
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
        fs.write(
            &p("agents/harness/tasks/s1.json"),
            b"{\"task\":1}",
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
        fs.write(&p("MEMORY.md"), b"# curated", WriteMode::Overwrite)
            .await
            .unwrap();
        for leaked in [
            "memory/s1.log.jsonl",
            "memory/s1.json",
            "agents/harness/sessions/s1.json",
            "memory/MEMORY.md",
        ] {
            assert!(
                matches!(fs.read(&p(leaked)).await, Err(FsError::NotFound { .. })),
                "{leaked} must not show another prefix's file"
            );
        }
        let listed: Vec<String> = fs
            .glob(&p("memory"), "**", 100)
            .await
            .unwrap()
            .into_iter()
            .map(|info| info.path.as_str().to_owned())
            .collect();
        assert!(listed.is_empty(), "memory/ lists only memory: {listed:?}");
        assert_eq!(
            fs.read(&p("agents/harness/sessions/s1.log.jsonl")).await.unwrap(),
            b"{\"secret\":1}\n"
        );
    }
    // Whole paths as keys, each user's under its namespace.
    let stored = keys.keys();
    for key in [
        "alice/agents/harness/sessions/s1.log.jsonl",
        "agents/harness/tasks/s1.json",
        "alice/MEMORY.md",
    ] {
        assert!(stored.iter().any(|k| k.ends_with(key)), "{key} in {stored:?}");
    }
}

/// A store written by an older Harness (layout 1: prefixes stripped, one key for all of them)
/// is upgraded when it is opened: each file lands under the prefix that holds its kind, the
/// agent continues from it, and the transcript is no longer readable through `memory/`.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_layout_1_store_is_upgraded_when_opened() {
    use harness::filesystem::{FilesystemConfig, FilesystemKind, open};
    use harness_fs::{FsError, WriteMode};

    let keys = harness_test_support::services::RedisPrefix::new("layout1");
    let config = FilesystemConfig {
        kind: FilesystemKind::Composite,
        redis_url: harness_test_support::services::redis_url(),
        key_prefix: keys.prefix().to_owned(),
        ..FilesystemConfig::default()
    };
    let p = |path: &str| WsPath::parse(path).unwrap();
    // What layout 1 wrote for user `default`: the keys with their prefixes stripped.
    let raw = KvFs::new(
        Arc::new(
            harness_store::RedisKv::connect(&harness_store::RedisKvConfig {
                url: harness_test_support::services::redis_url(),
                key_prefix: keys.prefix().to_owned(),
                ..harness_store::RedisKvConfig::default()
            })
            .await
            .unwrap(),
        ),
        WsPath::root(),
    );
    let old = [
        ("default/s1.log.jsonl", "{\"role\":\"user\"}\n"),
        ("default/sessions.json", "{\"v\":1,\"sessions\":{}}"),
        ("default/s1.json", "{\"task\":true}"),
        ("default/2026-12-03.md", "- Ada drinks green tea"),
        ("default/.extraction/harness/s1.json", "{}"),
        ("default/MEMORY.md", "# Ada"),
    ];
    for (key, body) in old {
        raw.write(&p(key), body.as_bytes(), WriteMode::Overwrite).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let root = open(&config, dir.path(), "harness").await.unwrap();
    let user: Arc<dyn Filesystem> = Arc::new(harness_fs::Namespaced::new(Arc::clone(&root), p("default")));
    let moved = [
        ("agents/harness/sessions/s1.log.jsonl", "{\"role\":\"user\"}\n"),
        ("agents/harness/sessions/sessions.json", "{\"v\":1,\"sessions\":{}}"),
        ("agents/harness/tasks/s1.json", "{\"task\":true}"),
        ("memory/2026-12-03.md", "- Ada drinks green tea"),
        ("memory/.extraction/harness/s1.json", "{}"),
        ("MEMORY.md", "# Ada"),
    ];
    for (path, body) in moved {
        assert_eq!(user.read(&p(path)).await.unwrap(), body.as_bytes(), "{path}");
    }
    for gone in [
        "memory/s1.log.jsonl",
        "memory/sessions.json",
        "agents/harness/tasks/s1.log.jsonl",
    ] {
        assert!(
            matches!(user.read(&p(gone)).await, Err(FsError::NotFound { .. })),
            "{gone} is not there after the upgrade"
        );
    }
    assert!(
        matches!(
            raw.read(&p("default/s1.log.jsonl")).await,
            Err(FsError::NotFound { .. })
        ),
        "the old key is removed"
    );
    // Opening again finds the mark and changes nothing.
    user.write(&p("memory/2026-12-04.md"), b"new", WriteMode::Overwrite)
        .await
        .unwrap();
    let again = open(&config, dir.path(), "harness").await.unwrap();
    let again: Arc<dyn Filesystem> = Arc::new(harness_fs::Namespaced::new(again, p("default")));
    assert_eq!(again.read(&p("memory/2026-12-04.md")).await.unwrap(), b"new");
    assert_eq!(raw.read(&p(".harness-kv-layout")).await.unwrap(), b"2");
}
