//! `[filesystem]` in `harness.toml`: which filesystem serves the workspace.
//!
//! ```toml
//! [filesystem]
//! kind = "local"                 # local (default) | local_shell | composite
//! fsync = false                  # flush every write to disk (survives power loss; slower)
//!
//! # kind = "composite": shared prefixes live in Redis, the rest on the local disk.
//! redis_url = "redis://127.0.0.1:6379"
//! key_prefix = "harness:kv:"
//! shared_prefixes = ["MEMORY.md", "memory/", "agents/{agent}/sessions/", "agents/{agent}/tasks/"]
//! ```
//!
//! A prefix ending in `/` routes a directory, one without routes a single file; `{agent}` is
//! replaced by the agent name. Routes apply inside every caller's namespace, so user data
//! stays partitioned in Redis as on disk. The host shell is never exposed unless
//! `kind = "local_shell"`.

use harness_fs::{CompositeFs, Filesystem, FsError, KvFs, LocalFs, LocalShellConfig, WsPath};
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
    /// The local directory, with the shared prefixes routed to a Redis-backed KV store.
    Composite,
}

/// `[filesystem]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesystemConfig {
    /// The backend.
    pub kind: FilesystemKind,
    /// Redis URL for `composite`.
    pub redis_url: String,
    /// Prefix of every Redis key.
    pub key_prefix: String,
    /// Paths served by Redis for `composite` (directories end with `/`; `{agent}` is the agent
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
            redis_url: "redis://127.0.0.1:6379".to_owned(),
            key_prefix: "harness:kv:".to_owned(),
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
    /// The Redis store could not be reached.
    #[error("cannot connect to Redis at the configured redis_url")]
    Redis(#[source] harness_core::BoxError),
    /// `composite` needs the `redis` feature.
    #[error("kind = \"composite\" needs Harness built with the `redis` feature")]
    RedisNotBuilt,
}

/// Opens the filesystem `config` describes for the workspace at `root`, for agent `agent`.
///
/// # Errors
/// [`FilesystemError`] when the root cannot be opened, a prefix is invalid or Redis does not
/// answer.
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
            let mut composite = CompositeFs::new(Arc::new(local));
            for prefix in &config.shared_prefixes {
                let resolved = prefix.replace("{agent}", agent);
                let path = WsPath::parse(&resolved).map_err(|source| FilesystemError::Prefix {
                    prefix: prefix.clone(),
                    source,
                })?;
                composite = if resolved.ends_with('/') {
                    composite.mount(path, Arc::clone(&kv))
                } else {
                    composite.mount_file(path, Arc::clone(&kv))
                };
            }
            Ok(Arc::new(composite))
        }
    }
}

#[cfg(feature = "redis")]
async fn connect(config: &FilesystemConfig) -> Result<Arc<dyn harness_store::KvStore>, FilesystemError> {
    let redis = harness_store::RedisKvConfig {
        url: config.redis_url.clone(),
        key_prefix: config.key_prefix.clone(),
        ..harness_store::RedisKvConfig::default()
    };
    let store = harness_store::RedisKv::connect(&redis)
        .await
        .map_err(|err| FilesystemError::Redis(Box::new(err)))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "redis"))]
async fn connect(_config: &FilesystemConfig) -> Result<Arc<dyn harness_store::KvStore>, FilesystemError> {
    Err(FilesystemError::RedisNotBuilt)
}
