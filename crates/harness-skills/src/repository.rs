//! [`GitSkillRepository`]: one git repository of skills, staged under
//! `<workspace>/.skills-cache/<source>/<name>/` with per-file SHA-256 hashes, so a sync
//! rewrites only changed files and removes what the repository dropped.
//!
//! A sync fetches only the ref it stages (the remote HEAD, or the pinned branch or tag; a
//! pinned commit already in the clone is not fetched again), runs on the blocking pool and
//! is bounded by a timeout: when it passes, the sync is an error, the fetch is told to stop,
//! and the previously staged skills stay. Fetching and staging need the `git` feature
//! (`gix`); without it a sync is [`GitSyncError::GitFeatureOff`].
//!
//! The clone lives in `.skills-cache/.git/<source>` (bare). The staged files are the only
//! place this crate writes with `std::fs` instead of the workspace `Filesystem`: the cache is
//! a host directory by nature (git needs one).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The directory, at the workspace root, where repository skills are staged.
pub const SKILLS_CACHE: &str = ".skills-cache";

/// How long one sync may take unless [`GitSkillRepository::with_timeout`] says otherwise.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    /// The sync (waiting for an earlier one included) took longer than its timeout; the fetch
    /// was told to stop.
    #[error(
        "git repository `{url}`: no sync within {after:?}; the previously staged skills stay (raise \
         `sync_timeout_seconds` in [skills] if the repository is large or slow)"
    )]
    TimedOut {
        /// The repository.
        url: String,
        /// The timeout.
        after: Duration,
    },
    /// This build has no git support.
    #[error(
        "git repository `{url}`: this build has no git support (the `git` feature of harness-skills); \
         remove the repository from [skills] or build with the feature"
    )]
    GitFeatureOff {
        /// The repository.
        url: String,
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

/// What the blocking sync works on (owned, so it can outlive a timed-out caller).
#[derive(Debug, Clone)]
pub(crate) struct SyncJob {
    pub(crate) url: String,
    // Without the `git` feature the sync only refuses, naming `url`: the rest is not built.
    #[cfg(feature = "git")]
    pub(crate) reference: Option<String>,
    #[cfg(feature = "git")]
    pub(crate) git_dir: PathBuf,
    #[cfg(feature = "git")]
    pub(crate) stage_dir: PathBuf,
    /// Set when the caller gave up: the fetch stops at its next check.
    pub(crate) interrupt: Arc<AtomicBool>,
    /// Counts connections to the remote.
    #[cfg(feature = "git")]
    pub(crate) fetches: Arc<AtomicU64>,
}

/// One git repository of skills.
#[derive(Debug)]
pub struct GitSkillRepository {
    url: String,
    /// The pinned branch, tag or commit; `None`: the remote HEAD.
    reference: Option<String>,
    source: String,
    /// The bare clone (only a build with the `git` feature has one).
    #[cfg(feature = "git")]
    git_dir: PathBuf,
    stage_dir: PathBuf,
    timeout: Duration,
    /// Held by the running sync, into its blocking task: a sync that timed out keeps the clone
    /// until its fetch has really stopped.
    lock: Arc<tokio::sync::Mutex<()>>,
    fetches: Arc<AtomicU64>,
}

impl GitSkillRepository {
    /// A repository by URL or local path, staged as `source` under `cache_root`
    /// (`<workspace>/.skills-cache`), with the [`DEFAULT_SYNC_TIMEOUT`].
    pub fn new(url: impl Into<String>, source: impl Into<String>, cache_root: &Path) -> Self {
        let source = source.into();
        Self {
            url: url.into(),
            reference: None,
            #[cfg(feature = "git")]
            git_dir: cache_root.join(".git").join(&source),
            stage_dir: cache_root.join(&source),
            source,
            timeout: DEFAULT_SYNC_TIMEOUT,
            lock: Arc::new(tokio::sync::Mutex::new(())),
            fetches: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Stages `reference` (a branch, tag or commit) instead of the remote HEAD; `None`
    /// keeps the HEAD. A branch follows new commits at every sync; a tag or a commit stays.
    #[must_use]
    pub fn pinned(mut self, reference: Option<String>) -> Self {
        self.reference = reference;
        self
    }

    /// Bounds every [`sync`](Self::sync) by `timeout` (waiting for a running one included).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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

    /// How long one sync may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many times a sync connected to the remote to fetch (a diagnostic: turns never
    /// fetch, only syncs do, and a pinned commit already staged is not fetched again).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Fetches the ref to stage and stages its skills when that commit changed since the
    /// last sync. One sync at a time per repository; the whole call, waiting for a running
    /// sync included, is bounded by the [timeout](Self::timeout).
    ///
    /// # Errors
    /// [`GitSyncError`] ([`GitSyncError::TimedOut`] past the timeout); the previously staged
    /// skills stay.
    ///
    /// # Cancellation
    /// Dropping the future (or the timeout) tells the fetch to stop; the clone stays locked
    /// until the blocking work has really ended, so a later sync never races it.
    pub async fn sync(&self) -> Result<SyncOutcome, GitSyncError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let timed_out = || GitSyncError::TimedOut {
            url: self.url.clone(),
            after: self.timeout,
        };
        let guard = tokio::time::timeout_at(deadline, Arc::clone(&self.lock).lock_owned())
            .await
            .map_err(|_| timed_out())?;
        let job = SyncJob {
            url: self.url.clone(),
            #[cfg(feature = "git")]
            reference: self.reference.clone(),
            #[cfg(feature = "git")]
            git_dir: self.git_dir.clone(),
            #[cfg(feature = "git")]
            stage_dir: self.stage_dir.clone(),
            interrupt: Arc::new(AtomicBool::new(false)),
            #[cfg(feature = "git")]
            fetches: Arc::clone(&self.fetches),
        };
        let interrupt = StopOnDrop(Arc::clone(&job.interrupt));
        let work = tokio::task::spawn_blocking(move || {
            let _clone_locked = guard;
            crate::git::sync_blocking(&job)
        });
        let result = match tokio::time::timeout_at(deadline, work).await {
            Ok(joined) => joined?,
            Err(_) => Err(timed_out()),
        };
        drop(interrupt);
        result
    }
}

/// Sets the interrupt flag when dropped: on a timeout, or when the sync's caller goes away.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
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
}
