//! `[filesystem]` in `harness.toml`: which filesystem serves the workspace.
//!
//! ```toml
//! [filesystem]
//! kind = "local"                 # local (default) | local_shell | composite
//! fsync = false                  # flush every write to disk (survives power loss; slower)
//!
//! # kind = "composite": shared prefixes live in a KV store, the rest on the local disk.
//! url = "redis://127.0.0.1:6379"  # or postgres://user@host/db (`redis_url` is an alias)
//! key_prefix = "harness:kv:"       # Redis key prefix, or the namespace in PostgreSQL
//! table_prefix = "harness_"        # PostgreSQL only: the tables (as `[state] key_prefix`)
//! shared_prefixes = ["MEMORY.md", "memory/", "agents/{agent}/sessions/", "agents/{agent}/tasks/"]
//! ```
//!
//! The URL's scheme chooses the KV backend: `redis://`/`rediss://` for Redis, `postgres://`/
//! `postgresql://` for PostgreSQL (build feature `postgres`). With `[state] kind = "postgres"`
//! and the same table prefix, the shared files are fenced by the same PostgreSQL lease as the
//! state, so a deployment needs PostgreSQL alone.
//!
//! A prefix ending in `/` routes a directory, one without routes a single file; `{agent}` is
//! replaced by the agent name. Routes apply inside every caller's namespace, and a file's key
//! is its whole workspace path (`alice/memory/x.md`), so user data stays partitioned in Redis
//! as on disk and no two prefixes share a key. A store written by an older Harness (which
//! stripped the prefixes) is upgraded when it is opened (`harness_fs::kv_layout`). The host
//! shell is never exposed unless `kind = "local_shell"`.

use harness_fs::kv_layout::{self, OldLayout};
use harness_fs::{CompositeFs, DEFAULT_EVICTED_DIR, Filesystem, FsError, KvFs, LocalFs, LocalShellConfig, WsPath};
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;

/// Which backend serves the workspace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilesystemKind {
    /// The local directory, no shell.
    #[default]
    Local,
    /// The local directory and a host shell (`execute` is registered).
    LocalShell,
    /// The local directory, with the shared prefixes routed to a KV store on Redis or
    /// PostgreSQL (by the URL's scheme).
    Composite,
}

/// `[filesystem]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesystemConfig {
    /// The backend.
    pub kind: FilesystemKind,
    /// The KV store's URL for `composite` (`redis://…` or `postgres://…`); when absent,
    /// `redis_url`.
    pub url: Option<String>,
    /// Redis URL for `composite` (the older name of `url`).
    pub redis_url: String,
    /// Prefix of every Redis key; on PostgreSQL, the namespace of the shared files.
    pub key_prefix: String,
    /// PostgreSQL only: the prefix of the tables (the lease table fencing the shared files is
    /// `<table_prefix>leases`, so use `[state] key_prefix` here).
    pub table_prefix: String,
    /// Paths served by the KV store for `composite` (directories end with `/`; `{agent}` is the agent
    /// name).
    pub shared_prefixes: Vec<String>,
    /// Flush local writes to the disk (`fsync`) before they count as done. Off by default:
    /// writes are still atomic (temp file + rename) and survive a process crash; turn it on
    /// to also survive a power loss, at about a millisecond per write.
    pub fsync: bool,
}

impl Default for FilesystemConfig {
    fn default() -> Self {
        Self {
            kind: FilesystemKind::Local,
            url: None,
            redis_url: "redis://127.0.0.1:6379".to_owned(),
            key_prefix: "harness:kv:".to_owned(),
            table_prefix: harness_store_default_table_prefix().to_owned(),
            shared_prefixes: [
                "MEMORY.md",
                "memory/",
                "agents/{agent}/sessions/",
                "agents/{agent}/tasks/",
            ]
            .map(str::to_owned)
            .to_vec(),
            fsync: false,
        }
    }
}

/// Why the configured filesystem could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesystemError {
    /// The local root could not be opened.
    #[error("cannot open the workspace directory")]
    Local(#[source] FsError),
    /// A shared prefix is not a valid workspace path.
    #[error("shared prefix {prefix:?}")]
    Prefix {
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: FsError,
    },
    /// The shared store could not be brought to the current key layout.
    #[error("cannot upgrade the shared store's key layout (see harness_fs::kv_layout)")]
    Upgrade(#[source] FsError),
    /// The Redis store could not be reached.
    #[error("cannot connect to Redis at the configured url")]
    Redis(#[source] harness_core::BoxError),
    /// `composite` needs the `redis` feature.
    #[error("kind = \"composite\" needs Harness built with the `redis` feature")]
    RedisNotBuilt,
    /// The PostgreSQL store could not be reached or its schema created.
    #[error("cannot open PostgreSQL at the configured url")]
    Postgres(#[source] harness_core::BoxError),
    /// A `postgres://` url needs the `postgres` feature.
    #[error("[filesystem] url = \"postgres://…\" needs Harness built with the `postgres` feature")]
    PostgresNotBuilt,
    /// The url's scheme names no KV backend.
    #[error("url must start with redis://, rediss://, postgres:// or postgresql:// (got {0:?})")]
    Scheme(String),
}

/// Opens the filesystem `config` describes for the workspace at `root`, for agent `agent`.
///
/// # Errors
/// [`FilesystemError`] when the root cannot be opened, a prefix or the url's scheme is invalid,
/// or the KV store does not answer.
pub async fn open(config: &FilesystemConfig, root: &Path, agent: &str) -> Result<Arc<dyn Filesystem>, FilesystemError> {
    std::fs::create_dir_all(root).map_err(|err| {
        FilesystemError::Local(FsError::Io {
            path: WsPath::root(),
            operation: "create",
            source: Box::new(err),
        })
    })?;
    let local = LocalFs::new(root).map_err(FilesystemError::Local)?.fsync(config.fsync);
    match config.kind {
        FilesystemKind::Local => Ok(Arc::new(local)),
        FilesystemKind::LocalShell => Ok(Arc::new(local.with_shell(LocalShellConfig::default()))),
        FilesystemKind::Composite => {
            let store = connect(config).await?;
            let kv: Arc<dyn Filesystem> = Arc::new(KvFs::new(store, WsPath::root()));
            let mut composite = CompositeFs::new(Arc::new(local)).replicate_to(Arc::clone(&kv));
            let mut old = OldLayout {
                whole: ["agents", "plans", DEFAULT_EVICTED_DIR]
                    .iter()
                    .filter_map(|dir| WsPath::parse(dir).ok())
                    .collect(),
                // The session index (`crate::session::index_path`) marks every namespace that held a session.
                namespace_marker: "sessions.json".to_owned(),
                ..OldLayout::default()
            };
            for prefix in &config.shared_prefixes {
                let resolved = prefix.replace("{agent}", agent);
                let path = WsPath::parse(&resolved).map_err(|source| FilesystemError::Prefix {
                    prefix: prefix.clone(),
                    source,
                })?;
                // Whole paths as keys: one store serves every prefix without two of them meeting.
                composite = if resolved.ends_with('/') {
                    old.dirs.push(path.clone());
                    composite.mount_shared(path, Arc::clone(&kv))
                } else {
                    old.files.push(path.clone());
                    composite.mount_shared_file(path, Arc::clone(&kv))
                };
            }
            let upgrade = kv_layout::upgrade(kv.as_ref(), &old)
                .await
                .map_err(FilesystemError::Upgrade)?;
            if upgrade.moved > 0 {
                tracing::info!(
                    target: "harness::filesystem",
                    moved = upgrade.moved,
                    copies = upgrade.copies,
                    "the shared store was upgraded to key layout {}",
                    kv_layout::CURRENT_LAYOUT
                );
            }
            Ok(Arc::new(composite))
        }
    }
}

/// Which KV backend a `composite` url names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KvBackend {
    Redis,
    Postgres,
}

impl FilesystemConfig {
    /// The KV store's URL: `url`, else `redis_url`.
    pub fn kv_url(&self) -> &str {
        self.url.as_deref().unwrap_or(&self.redis_url)
    }

    /// The backend the URL's scheme names.
    ///
    /// # Errors
    /// [`FilesystemError::Scheme`] for any other scheme.
    pub(crate) fn kv_backend(&self) -> Result<KvBackend, FilesystemError> {
        let url = self.kv_url().trim();
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        match scheme.to_ascii_lowercase().as_str() {
            "redis" | "rediss" | "redis+unix" | "unix" => Ok(KvBackend::Redis),
            "postgres" | "postgresql" => Ok(KvBackend::Postgres),
            // Only the scheme: the rest may carry a password.
            _ if scheme.is_empty() => Err(FilesystemError::Scheme("no scheme".to_owned())),
            _ => Err(FilesystemError::Scheme(format!("{scheme}://…"))),
        }
    }

    /// Whether `composite` keeps its shared files in PostgreSQL.
    pub fn is_postgres_composite(&self) -> bool {
        self.kind == FilesystemKind::Composite && matches!(self.kv_backend(), Ok(KvBackend::Postgres))
    }
}

/// Whether the lease of `[state]` fences the shared files of `[filesystem]`: a composite
/// whose KV store is in the state's backend (Redis and Redis, or PostgreSQL and PostgreSQL;
/// `HarnessConfig` refuses a composite in another backend or other tables than the state's).
pub(crate) fn fences_shared_files(filesystem: Option<&FilesystemConfig>, state: &crate::state::StateConfig) -> bool {
    use crate::state::StateKind;
    filesystem
        .filter(|fs| fs.kind == FilesystemKind::Composite)
        .is_some_and(|fs| {
            matches!(
                (state.kind, fs.kv_backend()),
                (StateKind::Redis, Ok(KvBackend::Redis)) | (StateKind::Postgres, Ok(KvBackend::Postgres))
            )
        })
}

/// The default PostgreSQL table prefix (`harness_`), as `[state]` and `[filesystem]` use it.
pub(crate) fn harness_store_default_table_prefix() -> &'static str {
    "harness_"
}

async fn connect(config: &FilesystemConfig) -> Result<Arc<dyn harness_store::KvStore>, FilesystemError> {
    match config.kv_backend()? {
        KvBackend::Redis => connect_redis(config).await,
        KvBackend::Postgres => connect_postgres(config).await,
    }
}

#[cfg(feature = "postgres")]
async fn connect_postgres(config: &FilesystemConfig) -> Result<Arc<dyn harness_store::KvStore>, FilesystemError> {
    let postgres = harness_store::PostgresConfig {
        url: config.kv_url().to_owned(),
        table_prefix: config.table_prefix.clone(),
        ..harness_store::PostgresConfig::default()
    };
    let store = harness_store::PostgresKv::connect(&postgres, config.key_prefix.clone())
        .await
        .map_err(|err| FilesystemError::Postgres(Box::new(err)))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn connect_postgres(_config: &FilesystemConfig) -> Result<Arc<dyn harness_store::KvStore>, FilesystemError> {
    Err(FilesystemError::PostgresNotBuilt)
}

#[cfg(feature = "redis")]
async fn connect_redis(config: &FilesystemConfig) -> Result<Arc<dyn harness_store::KvStore>, FilesystemError> {
    let redis = harness_store::RedisKvConfig {
        url: config.kv_url().to_owned(),
        key_prefix: config.key_prefix.clone(),
        ..harness_store::RedisKvConfig::default()
    };
    let store = harness_store::RedisKv::connect(&redis)
        .await
        .map_err(|err| FilesystemError::Redis(Box::new(err)))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "redis"))]
async fn connect_redis(_config: &FilesystemConfig) -> Result<Arc<dyn harness_store::KvStore>, FilesystemError> {
    Err(FilesystemError::RedisNotBuilt)
}

/// A filesystem error as a tool's failure (I/O errors are also logged: the message the model
/// sees names the path, not the OS detail).
pub(crate) fn tool_error(err: &harness_fs::FsError) -> harness_core::ToolError {
    if let harness_fs::FsError::Io { .. } = err {
        tracing::warn!(error = %harness_core::error_chain(err), "file tool failed");
    }
    harness_core::ToolError::failed(err.to_string())
}
