//! Runtime data of a call kept in the store every replica shares
//! (`CompositeFs::replicate_to`, `Filesystem::replicated`, `CallScope::replicated_dirs`).

use super::p;
use harness_core::{AgentId, SessionId, UserId};
use harness_fs::{CallScope, CallWorkspace, CompositeFs, Filesystem, IsolationScope, KvFs, LocalFs, WriteMode};
use harness_store::InMemoryKv;
use std::sync::Arc;

fn scope(isolation: IsolationScope) -> CallScope {
    CallScope::new(
        isolation,
        AgentId::from_static("main"),
        UserId::from_static("alice"),
        SessionId::from_static("s1"),
    )
    .unwrap()
}

/// One replica: its own disk, the configured shared prefix `agents/main/sessions` and the
/// replicated data in `kv`, as `[filesystem] kind = "composite"` opens it.
fn replica(dir: &std::path::Path, kv: &Arc<dyn Filesystem>) -> Arc<dyn Filesystem> {
    let local: Arc<dyn Filesystem> = Arc::new(LocalFs::new(dir).unwrap());
    Arc::new(
        CompositeFs::new(local)
            .mount(p("agents/main/sessions"), Arc::clone(kv))
            .replicate_to(Arc::clone(kv)),
    )
}

fn disk_files(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found
}

/// Everything a later turn or task reads back is written to the shared store under its whole
/// path (so the mounts cannot collide), none of it to the replica's disk, and another replica
/// reads it; the configured shared prefix keeps its own keys.
#[tokio::test]
async fn a_calls_runtime_data_lives_in_the_shared_store_and_another_replica_reads_it() {
    let kv: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), p("")));
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let scope = scope(IsolationScope::User);
    let on_a = CallWorkspace::new(&replica(a.path(), &kv), &scope, None);
    let data = [
        "plans/PLAN.md",
        "large_tool_results/main/call_1.txt",
        "agents/main/compacted/s1/1.jsonl",
        "agents/main/tasks/s1.json",
        "agents/main/subagents/helper/s1/notes.md",
    ];
    for path in data {
        on_a.layered
            .write(&p(path), path.as_bytes(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
    on_a.user
        .write(&p("agents/main/sessions/s1.log.jsonl"), b"{}\n", WriteMode::Overwrite)
        .await
        .unwrap();
    on_a.layered
        .write(&p("notes/mine.md"), b"local", WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(disk_files(a.path()), vec!["alice/notes/mine.md".to_owned()]);
    for path in data {
        assert_eq!(
            kv.read(&p(&format!("alice/{path}"))).await.unwrap(),
            path.as_bytes(),
            "{path}"
        );
    }
    // The configured prefix is keyed relative to its mount, as before.
    assert_eq!(kv.read(&p("alice/s1.log.jsonl")).await.unwrap(), b"{}\n");
    let on_b = CallWorkspace::new(&replica(b.path(), &kv), &scope, None);
    for path in data {
        assert_eq!(on_b.layered.read(&p(path)).await.unwrap(), path.as_bytes(), "{path}");
    }
    assert_eq!(
        on_b.user.read(&p("agents/main/sessions/s1.log.jsonl")).await.unwrap(),
        b"{}\n"
    );
    assert!(!on_b.layered.exists(&p("notes/mine.md")).await.unwrap());
    let listed: Vec<String> = on_b
        .user
        .list(&p("plans"))
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.path.to_string())
        .collect();
    assert_eq!(listed, vec!["plans/PLAN.md".to_owned()]);
}

/// An isolated child's whole layer (its transcript, task records and files) is in the shared
/// store, where the parent's view of `agents/<parent>/subagents/` finds it.
#[tokio::test]
async fn an_isolated_childs_layer_is_wholly_in_the_shared_store() {
    let kv: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), p("")));
    let dir = tempfile::tempdir().unwrap();
    let root = replica(dir.path(), &kv);
    let parent = scope(IsolationScope::User);
    let child = parent
        .isolated_child(AgentId::from_static("helper"), SessionId::from_static("sub.helper.1"))
        .unwrap();
    assert!(child.is_isolated_child() && !parent.is_isolated_child());
    let on_child = CallWorkspace::new(&root, &child, None);
    on_child
        .layered
        .write(&p("report.md"), b"r", WriteMode::Overwrite)
        .await
        .unwrap();
    on_child
        .user
        .write(
            &p("agents/helper/sessions/sub.helper.1.log.jsonl"),
            b"t",
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    assert!(disk_files(dir.path()).is_empty(), "{:?}", disk_files(dir.path()));
    let base = "alice/agents/main/subagents/helper/s1";
    assert_eq!(kv.read(&p(&format!("{base}/report.md"))).await.unwrap(), b"r");
    assert_eq!(
        kv.read(&p(&format!("{base}/agents/helper/sessions/sub.helper.1.log.jsonl")))
            .await
            .unwrap(),
        b"t"
    );
    let on_parent = CallWorkspace::new(&root, &parent, None);
    assert_eq!(
        on_parent
            .user
            .read(&p("agents/main/subagents/helper/s1/report.md"))
            .await
            .unwrap(),
        b"r"
    );
}

/// Under the shared namespace (scopes `agent`, `global`) the data sits at the root of the
/// shared store; a filesystem with no shared store is used as it is.
#[tokio::test]
async fn the_shared_namespace_is_replicated_and_a_local_workspace_is_not() {
    let kv: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), p("")));
    let dir = tempfile::tempdir().unwrap();
    let on_root = CallWorkspace::new(&replica(dir.path(), &kv), &scope(IsolationScope::Agent), None);
    on_root
        .layered
        .write(&p("plans/PLAN.md"), b"plan", WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(kv.read(&p("plans/PLAN.md")).await.unwrap(), b"plan");
    assert!(disk_files(dir.path()).is_empty());
    let local: Arc<dyn Filesystem> = Arc::new(LocalFs::new(dir.path()).unwrap());
    assert!(
        local
            .replicated(&scope(IsolationScope::User).replicated_dirs())
            .is_none()
    );
    let plain: Arc<dyn Filesystem> = Arc::new(CompositeFs::new(Arc::clone(&local)).mount(p("memory"), kv));
    assert!(
        plain.replicated(&[p("plans")]).is_none(),
        "no replicate_to, nothing shared"
    );
}
