//! Skill repositories from git: fetched with `gix` (on the blocking pool), the remote HEAD's
//! skills staged under `<workspace>/.skills-cache/<source>/<name>/` with per-file SHA-256
//! hashes, so a sync rewrites only changed files and removes what the repository dropped.
//!
//! The clone lives in `.skills-cache/.git/<source>` (bare). The staged files are the only
//! place this crate writes with `std::fs` instead of the workspace `Filesystem`: the cache is
//! a host directory by nature (git needs one).

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// The directory, at the workspace root, where repository skills are staged.
pub const SKILLS_CACHE: &str = ".skills-cache";

const MANIFEST: &str = ".manifest.json";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a repository could not be synced. The previously staged skills stay in place.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitSyncError {
    /// Clone, fetch or reading objects failed.
    #[error("git repository `{url}`")]
    Git {
        /// The repository.
        url: String,
        /// The gix error.
        #[source]
        source: BoxError,
    },
    /// The remote advertises no HEAD.
    #[error("git repository `{url}` has no HEAD (is it empty?)")]
    NoHead {
        /// The repository.
        url: String,
    },
    /// The pinned `ref` names no branch, tag or commit of the repository.
    #[error("git repository `{url}`: `ref = \"{reference}\"` is not a branch, tag or commit of it")]
    UnknownRef {
        /// The repository.
        url: String,
        /// The configured ref.
        reference: String,
        /// Why it did not resolve.
        #[source]
        source: BoxError,
    },
    /// Writing the staged files failed.
    #[error("staging skills into {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The blocking task panicked or was cancelled.
    #[error("git sync task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// What a sync did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The commit to stage (the remote HEAD, or the pinned ref's) is the one already staged.
    Unchanged,
    /// A new commit was staged.
    Updated {
        /// The staged commit (hex).
        head: String,
        /// Files written (new or changed).
        written: usize,
        /// Files removed.
        removed: usize,
    },
}

/// One git repository of skills.
#[derive(Debug)]
pub struct GitSkillRepository {
    url: String,
    /// The pinned branch, tag or commit; `None`: the remote HEAD.
    reference: Option<String>,
    source: String,
    git_dir: PathBuf,
    stage_dir: PathBuf,
    lock: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Manifest {
    head: String,
    /// Staged path (relative to the stage dir) → SHA-256 hex.
    files: BTreeMap<String, String>,
}

impl GitSkillRepository {
    /// A repository by URL or local path, staged as `source` under `cache_root`
    /// (`<workspace>/.skills-cache`).
    pub fn new(url: impl Into<String>, source: impl Into<String>, cache_root: &Path) -> Self {
        let source = source.into();
        Self {
            url: url.into(),
            reference: None,
            git_dir: cache_root.join(".git").join(&source),
            stage_dir: cache_root.join(&source),
            source,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Stages `reference` (a branch, tag or commit) instead of the remote HEAD; `None`
    /// keeps the HEAD. A branch follows new commits at every sync; a tag or a commit stays.
    #[must_use]
    pub fn pinned(mut self, reference: Option<String>) -> Self {
        self.reference = reference;
        self
    }

    /// The pinned ref, when there is one.
    pub fn reference(&self) -> Option<&str> {
        self.reference.as_deref()
    }

    /// Where the repository's files are staged on the host.
    pub fn stage_dir(&self) -> &Path {
        &self.stage_dir
    }

    /// The source name (its directory under `.skills-cache/`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The repository's URL or path.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Fetches; stages the skills of the remote HEAD (or of the pinned ref) when that commit
    /// changed since the last sync.
    ///
    /// # Errors
    /// [`GitSyncError`]; the previously staged skills stay.
    pub async fn sync(&self) -> Result<SyncOutcome, GitSyncError> {
        let _one_at_a_time = self.lock.lock().await;
        let (url, git_dir, stage_dir) = (self.url.clone(), self.git_dir.clone(), self.stage_dir.clone());
        let reference = self.reference.clone();
        tokio::task::spawn_blocking(move || sync_blocking(&url, reference.as_deref(), &git_dir, &stage_dir)).await?
    }
}

/// A source name from a URL or path: its last segment without `.git`, letters, digits, `-`,
/// `_` kept.
pub fn source_name(url: &str) -> String {
    let last = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or_default()
        .trim_end_matches(".git");
    let name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() { "repository".to_owned() } else { name }
}

fn git_err(url: &str) -> impl Fn(BoxError) -> GitSyncError + '_ {
    move |source| GitSyncError::Git {
        url: url.to_owned(),
        source,
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> GitSyncError + '_ {
    move |source| GitSyncError::Io {
        path: path.to_owned(),
        source,
    }
}

fn sync_blocking(
    url: &str,
    reference: Option<&str>,
    git_dir: &Path,
    stage_dir: &Path,
) -> Result<SyncOutcome, GitSyncError> {
    let git = git_err(url);
    let interrupt = AtomicBool::new(false);
    let fresh = !git_dir.join("HEAD").is_file();
    let (repo, outcome) = if fresh {
        if let Some(parent) = git_dir.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let mut prepare = gix::prepare_clone_bare(url, git_dir).map_err(|e| git(e.into()))?;
        prepare
            .fetch_only(gix::progress::Discard, &interrupt)
            .map_err(|e| git(e.into()))?
    } else {
        let repo = gix::open(git_dir).map_err(|e| git(e.into()))?;
        let outcome = fetch_branches_and_tags(&repo, url, &interrupt)?;
        (repo, outcome)
    };
    // A pinned ref may name a tag: a fresh clone fetches branches only, so fetch the tags
    // (and the branches, as every later sync does) before resolving it.
    let outcome = if fresh && reference.is_some() {
        fetch_branches_and_tags(&repo, url, &interrupt)?
    } else {
        outcome
    };
    let head = match reference {
        Some(reference) => resolve_reference(&repo, url, reference)?,
        None => remote_head(&repo, &outcome, url)?,
    };
    stage(&repo, url, head, stage_dir)
}

/// Fetches every branch (HEAD is one of them) and every tag (a pinned ref may name one) into
/// the bare clone, which configures no fetch refspec of its own.
fn fetch_branches_and_tags(
    repo: &gix::Repository,
    url: &str,
    interrupt: &AtomicBool,
) -> Result<gix::remote::fetch::Outcome, GitSyncError> {
    let git = git_err(url);
    repo.find_remote("origin")
        .map_err(|e| git(e.into()))?
        .with_refspecs(
            ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
            gix::remote::Direction::Fetch,
        )
        .map_err(|e| git(e.into()))?
        .connect(gix::remote::Direction::Fetch)
        .map_err(|e| git(e.into()))?
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| git(e.into()))?
        .receive(gix::progress::Discard, interrupt)
        .map_err(|e| git(e.into()))
}

/// The commit a pinned ref names in the clone: a branch (`refs/heads/<ref>`, which every
/// fetch updates), else a tag (`refs/tags/<ref>`), else a full commit id.
fn resolve_reference(repo: &gix::Repository, url: &str, reference: &str) -> Result<gix::ObjectId, GitSyncError> {
    let unknown = |source: BoxError| GitSyncError::UnknownRef {
        url: url.to_owned(),
        reference: reference.to_owned(),
        source,
    };
    for candidate in [format!("refs/heads/{reference}"), format!("refs/tags/{reference}")] {
        let found = repo
            .try_find_reference(candidate.as_str())
            .map_err(|e| unknown(e.into()))?;
        if let Some(mut found) = found {
            let commit = found.peel_to_commit().map_err(|e| unknown(e.into()))?;
            return Ok(commit.id);
        }
    }
    let id = gix::ObjectId::from_hex(reference.as_bytes()).map_err(|_| {
        unknown("no branch or tag has that name, and it is not a full commit id (40 hex digits)".into())
    })?;
    let commit = repo
        .find_object(id)
        .map_err(|e| unknown(e.into()))?
        .peel_to_commit()
        .map_err(|e| unknown(e.into()))?;
    Ok(commit.id)
}

/// The remote's HEAD after a clone or fetch.
fn remote_head(
    repo: &gix::Repository,
    outcome: &gix::remote::fetch::Outcome,
    url: &str,
) -> Result<gix::ObjectId, GitSyncError> {
    outcome
        .ref_map
        .remote_refs
        .iter()
        .find_map(|reference| {
            let (name, target, peeled) = reference.unpack();
            (name == "HEAD")
                .then(|| peeled.or(target).map(ToOwned::to_owned))
                .flatten()
        })
        // A refetch asks only for branches, so HEAD may not be advertised: the clone's own
        // HEAD names the same branch, which the fetch just updated.
        .or_else(|| repo.head_id().ok().map(|id| id.detach()))
        .ok_or_else(|| GitSyncError::NoHead { url: url.to_owned() })
}

/// Stages the skills of commit `head` (only files whose hash changed are written).
fn stage(
    repo: &gix::Repository,
    url: &str,
    head: gix::ObjectId,
    stage_dir: &Path,
) -> Result<SyncOutcome, GitSyncError> {
    let git = git_err(url);
    let manifest_path = stage_dir.join(MANIFEST);
    let manifest: Manifest = std::fs::read(&manifest_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let head_hex = head.to_string();
    if manifest.head == head_hex {
        return Ok(SyncOutcome::Unchanged);
    }

    let tree = repo
        .find_object(head)
        .map_err(|e| git(e.into()))?
        .peel_to_commit()
        .map_err(|e| git(e.into()))?
        .tree()
        .map_err(|e| git(e.into()))?;
    let mut recorder = gix::traverse::tree::Recorder::default();
    tree.traverse().breadthfirst(&mut recorder).map_err(|e| git(e.into()))?;
    let blobs: Vec<(String, gix::ObjectId, bool)> = recorder
        .records
        .into_iter()
        .filter(|entry| entry.mode.is_blob())
        .map(|entry| {
            let executable = entry.mode.is_executable();
            (entry.filepath.to_string(), entry.oid, executable)
        })
        .collect();
    // Skills live in `skills/` when the repository has one, else at its root.
    let root = if blobs.iter().any(|(path, ..)| path.starts_with("skills/")) {
        "skills/"
    } else {
        ""
    };
    let skill_dirs: BTreeSet<String> = blobs
        .iter()
        .filter_map(|(path, ..)| {
            let relative = path.strip_prefix(root)?;
            let (dir, file) = relative.split_once('/')?;
            (file == super::skill::SKILL_FILE && !dir.starts_with('.')).then(|| dir.to_owned())
        })
        .collect();

    let mut files = BTreeMap::new();
    let (mut written, mut removed) = (0, 0);
    for (path, oid, executable) in &blobs {
        let Some(relative) = path.strip_prefix(root) else {
            continue;
        };
        let Some((dir, _)) = relative.split_once('/') else {
            continue;
        };
        if !skill_dirs.contains(dir) || relative.split('/').any(|part| part == ".." || part.is_empty()) {
            continue;
        }
        let object = repo.find_object(*oid).map_err(|e| git(e.into()))?;
        let hash = hex::encode(Sha256::digest(&object.data));
        let target = stage_dir.join(relative);
        if manifest.files.get(relative) != Some(&hash) || !target.is_file() {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io_err(parent))?;
            }
            std::fs::write(&target, &object.data).map_err(io_err(&target))?;
            set_mode(&target, *executable || looks_executable(relative, &object.data)).map_err(io_err(&target))?;
            written += 1;
        }
        files.insert(relative.to_owned(), hash);
    }
    for stale in manifest.files.keys().filter(|path| !files.contains_key(*path)) {
        let target = stage_dir.join(stale);
        if std::fs::remove_file(&target).is_ok() {
            removed += 1;
        }
        // Drop directories the removal emptied, up to the stage dir.
        let mut dir = target.parent();
        while let Some(current) = dir.filter(|d| *d != stage_dir) {
            if std::fs::remove_dir(current).is_err() {
                break;
            }
            dir = current.parent();
        }
    }
    let head = head.to_string();
    let manifest = Manifest {
        head: head.clone(),
        files,
    };
    std::fs::create_dir_all(stage_dir).map_err(io_err(stage_dir))?;
    let bytes = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    std::fs::write(&manifest_path, bytes).map_err(io_err(&manifest_path))?;
    Ok(SyncOutcome::Updated { head, written, removed })
}

/// Scripts get execute bits: a shebang, or a script suffix.
fn looks_executable(path: &str, data: &[u8]) -> bool {
    data.starts_with(b"#!")
        || [".sh", ".bash", ".py", ".rb", ".pl", ".js", ".mjs"]
            .iter()
            .any(|suffix| path.ends_with(suffix))
}

fn set_mode(path: &Path, executable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn source_names_come_from_the_last_segment() {
        assert_eq!(source_name("https://example.test/org/team-skills.git"), "team-skills");
        assert_eq!(source_name("/srv/git/skills.git/"), "skills");
        assert_eq!(source_name("git@host:org/my.skills.git"), "my_skills");
        assert_eq!(source_name(""), "repository");
    }

    #[test]
    fn scripts_are_executable() {
        assert!(looks_executable("s/run", b"#!/bin/sh\n"));
        assert!(looks_executable("s/x.py", b"print()"));
        assert!(!looks_executable("s/notes.md", b"# x"));
    }
}
