//! Fetching and staging with `gix` (the `git` feature), run on the blocking pool by
//! [`GitSkillRepository::sync`](crate::GitSkillRepository::sync).
//!
//! Each sync fetches only the ref it stages into the bare clone: `HEAD` (kept as
//! `refs/remotes/origin/HEAD`), or the pinned `ref` as a branch or a tag, never the other
//! branches and tags. A pinned full commit id that the clone already has is never fetched
//! again (a commit does not move); one the clone lacks is looked for in every branch and tag,
//! once. No tags are followed.

use crate::repository::{BoxError, GitSyncError, SyncJob, SyncOutcome};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this build can sync repositories.
pub(crate) const AVAILABLE: bool = true;

const MANIFEST: &str = ".manifest.json";

/// Where the remote's HEAD is kept in the clone.
const HEAD_REF: &str = "refs/remotes/origin/HEAD";

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Manifest {
    head: String,
    /// Staged path (relative to the stage dir) → SHA-256 hex.
    files: BTreeMap<String, String>,
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

/// What one sync fetches.
enum Wanted<'a> {
    /// The remote HEAD.
    Head,
    /// A pinned branch or tag (whichever the remote has).
    BranchOrTag(&'a str),
    /// A pinned commit the clone does not have yet: every branch and tag, once.
    Everything,
}

impl Wanted<'_> {
    fn refspecs(&self) -> Vec<String> {
        match self {
            Self::Head => vec![format!("+HEAD:{HEAD_REF}")],
            Self::BranchOrTag(name) => vec![
                format!("+refs/heads/{name}:refs/heads/{name}"),
                format!("+refs/tags/{name}:refs/tags/{name}"),
            ],
            Self::Everything => vec!["+refs/heads/*:refs/heads/*".into(), "+refs/tags/*:refs/tags/*".into()],
        }
    }
}

pub(crate) fn sync_blocking(job: &SyncJob) -> Result<SyncOutcome, GitSyncError> {
    let url = job.url.as_str();
    let git = git_err(url);
    let repo = if job.git_dir.join("HEAD").is_file() {
        gix::open(&job.git_dir).map_err(|e| git(e.into()))?
    } else {
        std::fs::create_dir_all(&job.git_dir).map_err(io_err(&job.git_dir))?;
        gix::init_bare(&job.git_dir).map_err(|e| git(e.into()))?
    };
    let head = match job.reference.as_deref() {
        None => {
            fetch(&repo, job, &Wanted::Head)?;
            commit_of(&repo, HEAD_REF).ok_or_else(|| GitSyncError::NoHead { url: url.to_owned() })?
        }
        Some(reference) => match pinned_commit(&repo, reference) {
            // A commit never moves: what the clone has is what to stage.
            Some(commit) => commit,
            None => {
                let wanted = if gix::ObjectId::from_hex(reference.as_bytes()).is_ok() {
                    Wanted::Everything
                } else {
                    Wanted::BranchOrTag(reference)
                };
                fetch(&repo, job, &wanted)?;
                resolve_reference(&repo, url, reference)?
            }
        },
    };
    stage(&repo, url, head, &job.stage_dir)
}

/// Fetches `wanted` into the bare clone (no tags followed). A ref the remote does not have is
/// [`GitSyncError::NoHead`] or [`GitSyncError::UnknownRef`].
fn fetch(repo: &gix::Repository, job: &SyncJob, wanted: &Wanted<'_>) -> Result<(), GitSyncError> {
    let url = job.url.as_str();
    let git = git_err(url);
    job.fetches.fetch_add(1, Ordering::Relaxed);
    let interrupt: &AtomicBool = &job.interrupt;
    let prepared = repo
        .remote_at(url)
        .map_err(|e| git(e.into()))?
        .with_fetch_tags(gix::remote::fetch::Tags::None)
        .with_refspecs(
            wanted.refspecs().iter().map(String::as_str),
            gix::remote::Direction::Fetch,
        )
        .map_err(|e| git(e.into()))?
        .connect(gix::remote::Direction::Fetch)
        .map_err(|e| git(e.into()))?
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| git(e.into()))?;
    if prepared.ref_map().mappings.is_empty() {
        return Err(match (wanted, job.reference.as_deref()) {
            (Wanted::Head, _) | (_, None) => GitSyncError::NoHead { url: url.to_owned() },
            (_, Some(reference)) => GitSyncError::UnknownRef {
                url: url.to_owned(),
                reference: reference.to_owned(),
                source: "the remote has no branch or tag of that name".into(),
            },
        });
    }
    prepared
        .receive(gix::progress::Discard, interrupt)
        .map_err(|e| git(e.into()))?;
    Ok(())
}

/// The commit `name` points to in the clone, when it exists.
fn commit_of(repo: &gix::Repository, name: &str) -> Option<gix::ObjectId> {
    let mut found = repo.try_find_reference(name).ok().flatten()?;
    found.peel_to_commit().ok().map(|commit| commit.id)
}

/// A pinned full commit id the clone already has.
fn pinned_commit(repo: &gix::Repository, reference: &str) -> Option<gix::ObjectId> {
    let id = gix::ObjectId::from_hex(reference.as_bytes()).ok()?;
    let commit = repo.find_object(id).ok()?.peel_to_commit().ok()?;
    Some(commit.id)
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
    pinned_commit(repo, reference)
        .ok_or_else(|| unknown("no branch or tag has that name, and it is not a full commit id (40 hex digits)".into()))
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
            (file == crate::skill::SKILL_FILE && !dir.starts_with('.')).then(|| dir.to_owned())
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
            let executable = *executable || looks_executable(relative, &object.data);
            replace_file(&target, &object.data, executable).map_err(io_err(&target))?;
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
    replace_file(&manifest_path, &bytes, false).map_err(io_err(&manifest_path))?;
    Ok(SyncOutcome::Updated { head, written, removed })
}

/// Scripts get execute bits: a shebang, or a script suffix.
fn looks_executable(path: &str, data: &[u8]) -> bool {
    data.starts_with(b"#!")
        || [".sh", ".bash", ".py", ".rb", ".pl", ".js", ".mjs"]
            .iter()
            .any(|suffix| path.ends_with(suffix))
}

/// Writes `data` beside `target` and renames it over `target`, so a turn reading the staged
/// copy while a sync runs sees the old file or the new one, never half of one.
fn replace_file(target: &Path, data: &[u8], executable: bool) -> std::io::Result<()> {
    let name = target
        .file_name()
        .map(|name| name.to_string_lossy())
        .unwrap_or_default();
    let staging = target.with_file_name(format!(".{name}.staging"));
    std::fs::write(&staging, data)?;
    set_mode(&staging, executable)?;
    std::fs::rename(&staging, target)
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
    fn scripts_are_executable() {
        assert!(looks_executable("s/run", b"#!/bin/sh\n"));
        assert!(looks_executable("s/x.py", b"print()"));
        assert!(!looks_executable("s/notes.md", b"# x"));
    }
}
