//! The layout of the shared store behind a composite filesystem's configured prefixes, and
//! the upgrade from the first one.
//!
//! **Layout 2** (current): a file's key is its whole workspace path, as on the local disk
//! (`alice/memory/2026-12-01.md`, `alice/agents/harness/sessions/s1.log.jsonl`), so any number
//! of prefixes share one store without meeting ([`CompositeFs::mount_shared`](crate::CompositeFs::mount_shared)).
//!
//! **Layout 1** (Harness before this module) stripped each prefix
//! ([`CompositeFs::mount`](crate::CompositeFs::mount)), with one store mounted at every
//! prefix: `memory/s1.log.jsonl` and `agents/harness/sessions/s1.log.jsonl` were one key, so the
//! file tools reached every session's transcript through `memory/`. [`upgrade`] rewrites such
//! a store once: each old key is moved under the prefix that holds its kind of file (see
//! `targets`; a key no rule places is copied under every prefix, so nothing is lost), and the
//! store is marked with [`LAYOUT_KEY`]. A store without the mark and without files is simply marked. Copies never
//! overwrite a file that is already there, so two replicas upgrading at once (or one that
//! already writes layout 2) lose nothing. Stop the replicas that run an older Harness first:
//! they still write layout 1.

use crate::error::FsError;
use crate::filesystem::{Filesystem, WriteMode};
use crate::path::WsPath;
use std::collections::BTreeSet;

/// The key that records the store's layout (at the store's root, outside every prefix).
pub const LAYOUT_KEY: &str = ".harness-kv-layout";

/// The layout this build writes.
pub const CURRENT_LAYOUT: u32 = 2;

/// Most files an upgrade enumerates.
const MAX_UPGRADE_FILES: usize = 1_000_000;

/// Where the old layout put files: the configured prefixes.
#[derive(Debug, Clone, Default)]
pub struct OldLayout {
    /// Directory prefixes (`memory`, `agents/harness/sessions`, ...).
    pub dirs: Vec<WsPath>,
    /// Single-file prefixes (`MEMORY.md`).
    pub files: Vec<WsPath>,
    /// Paths below a namespace that were already kept whole (the runtime data routed to the
    /// shared store by [`Filesystem::replicated`]: `agents/`, `plans/`, ...): left in place.
    pub whole: Vec<WsPath>,
    /// The name of a file that only a namespace's directory of one prefix holds (the session
    /// index, `sessions.json`): the directory holding it names a namespace.
    pub namespace_marker: String,
}

/// What [`upgrade`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayoutUpgrade {
    /// The store already had the current layout.
    pub current: bool,
    /// Old keys rewritten.
    pub moved: usize,
    /// Copies written (an old key shown under several prefixes is copied to each).
    pub copies: usize,
}

/// Brings the store `store` (the root of the shared KV filesystem) to [`CURRENT_LAYOUT`].
///
/// # Errors
/// [`FsError::InvalidArgument`] when the store was written by a newer layout; backend errors
/// (the keys rewritten before stay rewritten; running it again continues).
pub async fn upgrade(store: &dyn Filesystem, old: &OldLayout) -> Result<LayoutUpgrade, FsError> {
    let mark = layout_key();
    match store.read(&mark).await {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            return match text.trim().parse::<u32>() {
                Ok(CURRENT_LAYOUT) => Ok(LayoutUpgrade {
                    current: true,
                    ..LayoutUpgrade::default()
                }),
                _ => Err(FsError::InvalidArgument {
                    reason: format!(
                        "the shared store's layout is {:?}, newer than this Harness knows ({CURRENT_LAYOUT}): \
                         run the Harness that wrote it, or point [filesystem] at another key_prefix",
                        text.trim()
                    ),
                }),
            };
        }
        Err(FsError::NotFound { .. }) => {}
        Err(err) => return Err(err),
    }
    let keys: Vec<WsPath> = match store.glob(&WsPath::root(), "**", MAX_UPGRADE_FILES).await {
        Ok(files) => files
            .into_iter()
            .filter(|info| !info.is_dir && info.path != mark)
            .map(|info| info.path)
            .collect(),
        Err(FsError::NotFound { .. }) => Vec::new(),
        Err(err) => return Err(err),
    };
    let namespaces = namespaces(&keys, &old.namespace_marker);
    let mut report = LayoutUpgrade::default();
    for key in &keys {
        let namespace = namespaces
            .iter()
            .filter(|ns| !ns.is_root() && key.starts_with(ns) && *key != **ns)
            .max_by_key(|ns| ns.segments().count())
            .cloned()
            .unwrap_or_default();
        let rest = key.strip_prefix(&namespace).unwrap_or_else(|| key.clone());
        if is_whole(&rest, old) {
            continue;
        }
        let targets = targets(&namespace, &rest, old);
        if targets.is_empty() || targets == [key.clone()] {
            continue;
        }
        let bytes = store.read(key).await?;
        for target in &targets {
            if target == key {
                continue;
            }
            match store.write(target, &bytes, WriteMode::CreateNew).await {
                Ok(()) => report.copies += 1,
                Err(FsError::AlreadyExists { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        if !targets.contains(key) {
            match store.delete(key).await {
                Ok(()) | Err(FsError::NotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        report.moved += 1;
    }
    store
        .write(&mark, CURRENT_LAYOUT.to_string().as_bytes(), WriteMode::Overwrite)
        .await?;
    Ok(report)
}

fn layout_key() -> WsPath {
    // A constant single segment of allowed characters.
    WsPath::parse(LAYOUT_KEY).unwrap_or_default()
}

/// The namespaces the old keys show: every directory holding the marker, and every isolated
/// subagent's layer (`…/agents/<parent>/subagents/<child>/<session>`).
fn namespaces(keys: &[WsPath], marker: &str) -> BTreeSet<WsPath> {
    let mut found = BTreeSet::new();
    for key in keys {
        if key.file_name() == marker
            && let Some(parent) = key.parent()
        {
            found.insert(parent);
        }
        let segments: Vec<&str> = key.segments().collect();
        for (at, window) in segments.windows(5).enumerate() {
            if window[0] == "agents"
                && window[2] == "subagents"
                && let Ok(layer) = WsPath::parse(&segments[..at + 5].join("/"))
            {
                found.insert(layer);
            }
        }
    }
    found
}

/// Whether `rest` (a key relative to its namespace) is already kept whole.
fn is_whole(rest: &WsPath, old: &OldLayout) -> bool {
    old.dirs
        .iter()
        .chain(&old.whole)
        .any(|dir| rest.starts_with(dir) && rest != dir)
        || old
            .files
            .iter()
            .any(|file| file == rest && file.parent().is_some_and(|parent| !parent.is_root()))
}

/// Where the old layout showed the key `rest` of `namespace`: the file prefix it names, else
/// the directory prefixes that hold its kind of file — a transcript or the session index
/// (`<id>.log.jsonl`, the marker) in `…/sessions`, a task record (`<id>.json`) in `…/tasks`,
/// anything else in the other prefixes (`memory/`, custom ones) — or, when no prefix holds
/// that kind, all of them. (Copying a transcript into `memory/` too would keep the very leak
/// layout 2 closes.)
fn targets(namespace: &WsPath, rest: &WsPath, old: &OldLayout) -> Vec<WsPath> {
    if let Some(file) = old.files.iter().find(|file| file.file_name() == rest.as_str()) {
        return vec![namespace.join_path(file)];
    }
    let single = rest.segments().count() == 1;
    let name = rest.file_name();
    let holder = if single && (name.ends_with(".log.jsonl") || name == old.namespace_marker) {
        Some("sessions")
    } else if single && name.ends_with(".json") {
        Some("tasks")
    } else {
        None
    };
    let fits = |dir: &&WsPath| match holder {
        Some(kind) => dir.file_name() == kind,
        None => !matches!(dir.file_name(), "sessions" | "tasks"),
    };
    let mut chosen: Vec<&WsPath> = old.dirs.iter().filter(fits).collect();
    if chosen.is_empty() {
        chosen = old.dirs.iter().collect();
    }
    chosen
        .into_iter()
        .map(|dir| namespace.join_path(&dir.join_path(rest)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::KvFs;
    use harness_store::InMemoryKv;
    use std::sync::Arc;

    fn p(path: &str) -> WsPath {
        WsPath::parse(path).unwrap()
    }

    fn layout() -> OldLayout {
        OldLayout {
            dirs: vec![p("memory"), p("agents/harness/sessions"), p("agents/harness/tasks")],
            files: vec![p("MEMORY.md")],
            whole: vec![p("agents"), p("plans")],
            namespace_marker: "sessions.json".to_owned(),
        }
    }

    async fn store(keys: &[(&str, &str)]) -> KvFs {
        let fs = KvFs::new(Arc::new(InMemoryKv::default()), WsPath::root());
        for (key, body) in keys {
            fs.write(&p(key), body.as_bytes(), WriteMode::Overwrite).await.unwrap();
        }
        fs
    }

    async fn paths(fs: &KvFs) -> Vec<String> {
        let mut all: Vec<String> = fs
            .glob(&WsPath::root(), "**", 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|info| info.path.as_str().to_owned())
            .collect();
        all.sort();
        all
    }

    #[tokio::test]
    async fn shared_namespace_keys_go_under_their_prefix_and_whole_keys_stay() {
        let fs = store(&[
            ("sessions.json", "{}"),
            ("s1.log.jsonl", "t"),
            ("s1.json", "task"),
            ("2026-12-01.md", "log"),
            ("topic/notes.md", "deep"),
            ("MEMORY.md", "curated"),
            // Written whole already (runtime data a replica routed to the store).
            ("plans/s1/PLAN.md", "plan"),
            // An isolated child's layer: its own namespace.
            ("agents/harness/subagents/researcher/s1/x.log.jsonl", "child"),
        ])
        .await;
        let report = upgrade(&fs, &layout()).await.unwrap();
        assert_eq!(
            paths(&fs).await,
            [
                ".harness-kv-layout",
                "MEMORY.md",
                "agents/harness/sessions/s1.log.jsonl",
                "agents/harness/sessions/sessions.json",
                "agents/harness/subagents/researcher/s1/agents/harness/sessions/x.log.jsonl",
                "agents/harness/tasks/s1.json",
                "memory/2026-12-01.md",
                "memory/topic/notes.md",
                "plans/s1/PLAN.md",
            ]
        );
        assert_eq!(report.moved, 6);
        assert!(upgrade(&fs, &layout()).await.unwrap().current);
    }

    #[tokio::test]
    async fn a_file_already_at_its_new_place_is_never_overwritten() {
        // A replica on the new layout wrote the newer transcript before this one upgraded.
        let fs = store(&[
            ("alice/sessions.json", "{}"),
            ("alice/s1.log.jsonl", "old"),
            ("alice/agents/harness/sessions/s1.log.jsonl", "newer"),
        ])
        .await;
        upgrade(&fs, &layout()).await.unwrap();
        assert_eq!(
            fs.read(&p("alice/agents/harness/sessions/s1.log.jsonl")).await.unwrap(),
            b"newer"
        );
        assert!(matches!(
            fs.read(&p("alice/s1.log.jsonl")).await,
            Err(FsError::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn an_empty_store_is_marked_and_a_newer_layout_is_refused() {
        let fs = store(&[]).await;
        let report = upgrade(&fs, &layout()).await.unwrap();
        assert_eq!(report, LayoutUpgrade::default());
        assert_eq!(fs.read(&p(LAYOUT_KEY)).await.unwrap(), b"2");
        fs.write(&p(LAYOUT_KEY), b"3", WriteMode::Overwrite).await.unwrap();
        let err = upgrade(&fs, &layout()).await.unwrap_err().to_string();
        assert!(err.contains("newer") && err.contains("key_prefix"), "{err}");
    }
}
