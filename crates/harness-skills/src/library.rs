//! [`Skills`]: the configured layers, merged per call into a [`SkillSet`], and the schedule
//! that keeps the git repositories' staged copies fresh.

use crate::catalogue;
use crate::repository::{DEFAULT_SYNC_TIMEOUT, GitSkillRepository, SKILLS_CACHE, source_name};
use crate::skill::{ScanSite, Skill, SkillFileCache, SkillLayer, SkillWarning, scan};
use harness_fs::{CallWorkspace, Filesystem, FsError, LocalFs, WsPath};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;

/// The skills directory of the workspace and of each user namespace.
pub const SKILLS_DIR: &str = "skills";

/// Where skills come from besides the workspace's and the user's `skills/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillsConfig {
    /// The global directory (lowest layer); skipped when missing.
    pub global_dir: Option<PathBuf>,
    /// Git repositories by URL or path, in priority order (a later one shadows an earlier).
    pub repositories: Vec<SkillRepositorySource>,
    /// When the repositories are synced, and how long one sync may take.
    pub sync: SyncSchedule,
}

/// How often git skill repositories are synced, and how long one sync may take. Syncs run
/// in the background ([`Skills::start`]); a turn never waits for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncSchedule {
    /// Between the end of one round of syncs and the start of the next.
    pub interval: Duration,
    /// The most one repository's sync may take; past it the sync is an error (logged) and
    /// the previously staged copy stays.
    pub timeout: Duration,
}

impl SyncSchedule {
    /// The default interval: five minutes.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);
}

impl Default for SyncSchedule {
    fn default() -> Self {
        Self {
            interval: Self::DEFAULT_INTERVAL,
            timeout: DEFAULT_SYNC_TIMEOUT,
        }
    }
}

/// One skill repository: where it is, and what to stage from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRepositorySource {
    /// The URL or local path.
    pub url: String,
    /// A branch, tag or commit to stage; `None` stages the remote HEAD. A branch follows
    /// its new commits; a tag or a commit stays where it is.
    pub reference: Option<String>,
}

impl SkillRepositorySource {
    /// The remote HEAD of `url`.
    pub fn head(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            reference: None,
        }
    }

    /// `reference` (a branch, tag or commit) of `url`.
    pub fn pinned(url: impl Into<String>, reference: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            reference: Some(reference.into()),
        }
    }
}

/// Why the skills capability could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillsError {
    /// The global directory could not be opened.
    #[error("skills directory {path}")]
    GlobalDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: FsError,
    },
    /// Git repositories are configured, but this build cannot sync them.
    #[error(
        "skill repository `{url}`: this build has no git support (the `git` feature of harness-skills); \
         remove `repositories` from [skills] or build with the feature"
    )]
    GitFeatureOff {
        /// The first configured repository.
        url: String,
    },
}

/// The skill layers of one agent. Cheap to share; reads happen per call. Dropping it (or
/// [`stop`](Self::stop)) ends the background syncs.
pub struct Skills {
    global: Option<(Arc<dyn Filesystem>, PathBuf)>,
    repositories: Arc<[GitSkillRepository]>,
    schedule: SyncSchedule,
    /// The background syncs started by [`start`](Self::start).
    syncing: Mutex<Option<JoinHandle<()>>>,
    /// Completed rounds of syncs (every repository once).
    rounds: Arc<tokio::sync::watch::Sender<u64>>,
    /// The workspace root on the host, when skills' files can be reached by a shell there.
    host_root: Option<PathBuf>,
    /// Parsed `SKILL.md` files, re-read only when their size or modification time changes.
    files: SkillFileCache,
}

impl std::fmt::Debug for Skills {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skills")
            .field("global", &self.global.as_ref().map(|(_, path)| path))
            .field("repositories", &self.repositories)
            .field("host_root", &self.host_root)
            .field("schedule", &self.schedule)
            .finish()
    }
}

impl Drop for Skills {
    fn drop(&mut self) {
        if let Some(task) = self.syncing.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
    }
}

impl Skills {
    /// The workspace's host directory, when the agent has a shell there.
    pub fn host_root(&self) -> Option<&Path> {
        self.host_root.as_deref()
    }

    /// Skills for a workspace at `workspace_root` (a host directory: repositories are staged
    /// under its `.skills-cache/`). `shell` says whether the agent has a shell on that
    /// directory; only then is `<files-root>` shown.
    ///
    /// Nothing is synced: call [`sync`](Self::sync), or use [`start`](Self::start).
    ///
    /// # Errors
    /// [`SkillsError::GlobalDir`] when the configured global directory exists but cannot be
    /// opened; [`SkillsError::GitFeatureOff`] when repositories are configured in a build
    /// without the `git` feature.
    pub fn new(config: SkillsConfig, workspace_root: &Path, shell: bool) -> Result<Self, SkillsError> {
        if let (false, Some(first)) = (crate::git::AVAILABLE, config.repositories.first()) {
            return Err(SkillsError::GitFeatureOff { url: first.url.clone() });
        }
        // Absolute from here on: a `<files-root>` is used by a shell whose working directory
        // is the workspace (or a layer in it), not the directory `harness` started in, so a
        // relative `--workspace` or global directory must not stay relative.
        let workspace_root = &absolute(workspace_root);
        let global = match config.global_dir.as_deref().map(absolute) {
            Some(dir) if dir.is_dir() => {
                let fs = LocalFs::new(&dir).map_err(|source| SkillsError::GlobalDir {
                    path: dir.clone(),
                    source,
                })?;
                Some((Arc::new(fs) as Arc<dyn Filesystem>, dir))
            }
            Some(dir) => {
                tracing::info!(path = %dir.display(), "global skills directory missing; skipped");
                None
            }
            None => None,
        };
        let cache_root = workspace_root.join(SKILLS_CACHE);
        let mut sources = HashSet::new();
        let mut repositories = Vec::new();
        for SkillRepositorySource { url, reference } in config.repositories {
            let base = source_name(&url);
            let mut source = base.clone();
            let mut n = 2;
            while !sources.insert(source.clone()) {
                source = format!("{base}_{n}");
                n += 1;
            }
            if source != base {
                tracing::warn!(%url, %source, "two skill repositories share a source name; renamed");
            }
            repositories.push(
                GitSkillRepository::new(url, source, &cache_root)
                    .pinned(reference)
                    .with_timeout(config.sync.timeout),
            );
        }
        Ok(Self {
            global,
            repositories: repositories.into(),
            schedule: config.sync,
            syncing: Mutex::new(None),
            rounds: Arc::new(tokio::sync::watch::Sender::new(0)),
            host_root: shell.then(|| workspace_root.to_owned()),
            files: SkillFileCache::default(),
        })
    }

    /// The configured repositories.
    pub fn repositories(&self) -> &[GitSkillRepository] {
        &self.repositories
    }

    /// [`new`](Self::new), then one sync of every repository (each bounded by the schedule's
    /// timeout; a failure is a warning and that repository's previously staged copy, if any,
    /// is used), then a sync every [`SyncSchedule::interval`] in the background until
    /// [`stop`](Self::stop) or drop. Turns never sync: they read the last staged copy.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub async fn start(config: SkillsConfig, workspace_root: &Path, shell: bool) -> Result<Self, SkillsError> {
        let skills = Self::new(config, workspace_root, shell)?;
        if !skills.repositories.is_empty() {
            skills.sync().await;
            let repositories = Arc::clone(&skills.repositories);
            let rounds = Arc::clone(&skills.rounds);
            let interval = skills.schedule.interval;
            let task = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(interval).await;
                    sync_all(&repositories).await;
                    rounds.send_modify(|n| *n += 1);
                }
            });
            *skills.syncing.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        }
        Ok(skills)
    }

    /// Ends the background syncs and waits until the running one, if any, has stopped
    /// waiting (its fetch is told to stop).
    pub async fn stop(&self) {
        let task = self.syncing.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    /// The schedule the repositories are synced on.
    pub fn schedule(&self) -> SyncSchedule {
        self.schedule
    }

    /// Syncs every repository now, concurrently (each only restages when its commit moved,
    /// each bounded by its timeout). Failures are warnings: the previously staged skills stay.
    pub async fn sync(&self) {
        sync_all(&self.repositories).await;
        self.rounds.send_modify(|n| *n += 1);
    }

    /// Follows the completed rounds of syncs (every repository synced once, successfully or
    /// not): [`start`](Self::start)'s first round makes it 1, each scheduled round and each
    /// [`sync`](Self::sync) adds one.
    pub fn sync_rounds(&self) -> tokio::sync::watch::Receiver<u64> {
        self.rounds.subscribe()
    }

    /// How many times a `SKILL.md` was read and parsed since these skills were made (a
    /// diagnostic: unchanged files are not read again).
    pub fn skill_file_reads(&self) -> u64 {
        self.files.reads()
    }

    /// Every skill the caller sees: global, repositories, workspace `skills/`, then the
    /// caller's `skills/`, a higher layer shadowing the same name. `namespace` is the
    /// caller's namespace ([`CallScope::namespace`](harness_fs::CallScope::namespace)); with
    /// `None` the caller's own skills are read afresh every time instead of being cached.
    pub async fn resolve(&self, workspace: &CallWorkspace, namespace: Option<&WsPath>) -> SkillSet {
        let mut set = SkillSet::default();
        let cache = &self.files;
        if let Some((fs, dir)) = &self.global {
            let site = ScanSite {
                fs,
                base: &WsPath::root(),
                layer: &SkillLayer::Global,
                host_base: self.host_root.as_ref().map(|_| dir.as_path()),
                cache_key: Some("global".to_owned()),
            };
            set.add(scan(site, cache).await);
        }
        for repo in self.repositories.iter() {
            // Staged on the host by the sync (not part of the callers' shared layer, which
            // holds only the workspace's shared entries); nothing staged yet → no skills.
            let Ok(staged) = LocalFs::new(repo.stage_dir()) else {
                continue;
            };
            let staged: Arc<dyn Filesystem> = Arc::new(staged);
            let host = self.host_root.as_ref().map(|_| repo.stage_dir());
            let layer = SkillLayer::Repository(repo.source().to_owned());
            let site = ScanSite {
                fs: &staged,
                base: &WsPath::root(),
                layer: &layer,
                host_base: host,
                cache_key: Some(format!("repository\u{0}{}", repo.source())),
            };
            set.add(scan(site, cache).await);
        }
        let skills_dir = WsPath::parse(SKILLS_DIR).unwrap_or_else(|_| WsPath::root());
        let host = self.host_root.as_ref().map(|root| root.join(SKILLS_DIR));
        let site = ScanSite {
            fs: &workspace.shared,
            base: &skills_dir,
            layer: &SkillLayer::Workspace,
            host_base: host.as_deref(),
            cache_key: Some("workspace".to_owned()),
        };
        set.add(scan(site, cache).await);
        // Without a user namespace the caller's view is the root: nothing more to add.
        if !Arc::ptr_eq(&workspace.user, &workspace.shared) {
            let site = ScanSite {
                fs: &workspace.user,
                base: &skills_dir,
                layer: &SkillLayer::User,
                host_base: None,
                cache_key: namespace.map(|namespace| format!("user\u{0}{namespace}")),
            };
            set.add(scan(site, cache).await);
        }
        set
    }
}

/// `path` made absolute against the current directory (as it is when that fails).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

async fn sync_all(repositories: &[GitSkillRepository]) {
    let syncs = repositories.iter().map(|repo| async move {
        match repo.sync().await {
            Ok(outcome) => tracing::debug!(source = repo.source(), ?outcome, "skill repository synced"),
            Err(err) => tracing::warn!(
                source = repo.source(),
                error = %harness_core::error_chain(&err),
                "skill repository sync failed; the last staged copy stays"
            ),
        }
    });
    futures::future::join_all(syncs).await;
}

/// The merged skills of one call, by name.
#[derive(Debug, Default, Clone)]
pub struct SkillSet {
    skills: BTreeMap<String, Skill>,
    warnings: Vec<SkillWarning>,
}

impl SkillSet {
    fn add(&mut self, (skills, warnings): (Vec<Skill>, Vec<SkillWarning>)) {
        for skill in skills {
            self.skills.insert(skill.name.clone(), skill);
        }
        self.warnings.extend(warnings);
    }

    /// Every `SKILL.md` skipped (file and reason) or loaded with a note (a name taken from
    /// its folder, front matter read line by line), layer by layer.
    pub fn warnings(&self) -> &[SkillWarning] {
        &self.warnings
    }

    /// The skills the model is offered and may load: all but the `disable-model-invocation`
    /// ones, in name order.
    pub fn for_model(&self) -> impl Iterator<Item = &Skill> {
        self.iter().filter(|skill| !skill.disable_model_invocation)
    }

    /// A skill by name.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// Skills in name order, the ones for people only (`disable-model-invocation`) included.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.skills.keys().map(String::as_str).collect()
    }

    /// The `<available_skills>` block (empty when there are no skills for the model), with
    /// host paths as they are.
    pub fn catalogue(&self) -> String {
        catalogue::render(self.for_model(), &|root| root.display().to_string())
    }

    /// The `<available_skills>` block for a caller in `namespace` of the workspace at
    /// `host_root`: a `<files-root>` inside the workspace is relative to the caller's layer
    /// (where its shell runs), so the prompt names no host path of the workspace.
    pub fn catalogue_for(&self, host_root: Option<&Path>, namespace: Option<&WsPath>) -> String {
        catalogue::render(self.for_model(), &|root| {
            catalogue::relative_root(root, host_root, namespace)
        })
    }
}
