//! `[state]` in `harness.toml`: where agent state and the session lease live.
//!
//! ```toml
//! [state]
//! kind = "redis"                     # file (default) | redis | postgres
//! url = "redis://127.0.0.1:6379"     # or postgres://postgres@127.0.0.1:5432/db
//! key_prefix = "harness:state:"      # Redis key prefix; for postgres the table prefix (default harness_)
//! lease_ttl = "30s"                  # a held lease is renewed every third of it
//! ```
//!
//! `file` keeps the state as JSON files in the workspace and serialises turns with lock files
//! in `.harness/locks/` (one host). `redis` and `postgres` keep the state AND the session
//! lease in that backend, so several replicas serve one session one turn at a time; every
//! lease hands out a fencing token and a save carrying a stale token is refused. With
//! `redis` and `[filesystem] kind = "composite"` on the same Redis, the turn's writes to the
//! shared prefixes (the transcript, ...) carry the token too
//! ([`Filesystem::fenced`](harness_fs::Filesystem::fenced)).
//!
//! `[filesystem] kind = "composite"` with `kind = "file"` is refused when the file is parsed:
//! the transcript would be shared while the state and the lease stay on one replica's disk.

use harness_core::{FencingToken, LeaseKey, SessionLease, StateStore};
use harness_store::KvFence;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The Redis key prefix used when `key_prefix` is not set.
pub const DEFAULT_REDIS_PREFIX: &str = "harness:state:";

/// Which backend keeps agent state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateKind {
    /// JSON files in the workspace, lock files for the lease (one host).
    #[default]
    File,
    /// Redis: state, lease and fencing counters under `key_prefix`.
    Redis,
    /// PostgreSQL: tables named with the `key_prefix` table prefix.
    Postgres,
}

/// `[state]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// The backend.
    pub kind: StateKind,
    /// Where the backend is (`redis://…` or `postgres://…`); unused for `file`.
    pub url: Option<String>,
    /// The Redis key prefix (default [`DEFAULT_REDIS_PREFIX`]) or the PostgreSQL table prefix
    /// (default `harness_`).
    pub key_prefix: Option<String>,
    /// How long a lease lasts without renewal (default 30 s); a crashed or paused holder
    /// loses the session after this long.
    #[serde(deserialize_with = "duration")]
    pub lease_ttl: Duration,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            kind: StateKind::File,
            url: None,
            key_prefix: None,
            lease_ttl: harness_store::DEFAULT_LEASE_TTL,
        }
    }
}

fn duration<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(u64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Seconds(seconds) => Ok(Duration::from_secs(seconds)),
        Raw::Text(text) => harness_memory::parse_duration(&text).map_err(serde::de::Error::custom),
    }
}

impl StateConfig {
    /// Values that parse but cannot be used.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.lease_ttl < Duration::from_millis(100) {
            return Err("lease_ttl must be at least 100ms".into());
        }
        if self.kind != StateKind::File && self.url.as_deref().is_none_or(|url| url.trim().is_empty()) {
            return Err("url is required for kind = \"redis\" and kind = \"postgres\"".into());
        }
        Ok(())
    }
}

/// Maps a session lease's key and token to the fence a fenced write carries (the counter
/// the lease increments, in the backend the shared files live in).
pub type WriteFence = Arc<dyn Fn(&LeaseKey, FencingToken) -> KvFence + Send + Sync>;

/// The state store, its lease and (for Redis) the write fence `[state]` describes.
pub struct StateBackend {
    /// The state store.
    pub store: Arc<dyn StateStore>,
    /// The session lease kept beside it.
    pub lease: Arc<dyn SessionLease>,
    /// How a turn's shared file writes are fenced, when the backend can fence them.
    pub fence: Option<WriteFence>,
}

impl std::fmt::Debug for StateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateBackend")
            .field("fenced_writes", &self.fence.is_some())
            .finish_non_exhaustive()
    }
}

/// Why `[state]` could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateBackendError {
    /// The Redis state store could not connect.
    #[error("cannot connect to Redis at the configured url")]
    Redis(#[source] harness_core::StateError),
    /// The PostgreSQL store could not connect or create its schema.
    #[error("cannot open PostgreSQL at the configured url")]
    Postgres(#[source] harness_core::BoxError),
    /// The backend was not compiled in.
    #[error("kind = \"{0}\" needs Harness built with the `{0}` feature")]
    NotBuilt(&'static str),
}

/// Opens the shared backend `config` names; `None` for `kind = "file"` (the builder's
/// defaults: JSON files and lock files in the workspace).
///
/// # Errors
/// [`StateBackendError`] when the backend does not answer or was not built in.
pub async fn open(config: &StateConfig) -> Result<Option<StateBackend>, StateBackendError> {
    match config.kind {
        StateKind::File => Ok(None),
        StateKind::Redis => open_redis(config).await.map(Some),
        StateKind::Postgres => open_postgres(config).await.map(Some),
    }
}

/// A KV store on the server `config` names, its keys under `namespace` (the sandbox
/// snapshot heads live there, fenced like everything shared). `None` for `kind = "file"`.
///
/// # Errors
/// As [`open`].
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(unused_variables))]
pub async fn open_kv(
    config: &StateConfig,
    namespace: &str,
) -> Result<Option<Arc<dyn harness_store::KvStore>>, StateBackendError> {
    match config.kind {
        StateKind::File => Ok(None),
        #[cfg(feature = "redis")]
        StateKind::Redis => {
            let prefix = config.key_prefix.as_deref().unwrap_or(DEFAULT_REDIS_PREFIX);
            let redis = harness_store::RedisKvConfig {
                url: config.url.clone().unwrap_or_default(),
                key_prefix: format!("{prefix}{namespace}:"),
                ..harness_store::RedisKvConfig::default()
            };
            let kv = harness_store::RedisKv::connect(&redis)
                .await
                .map_err(|err| StateBackendError::Redis(harness_core::StateError::Backend(Box::new(err))))?;
            Ok(Some(Arc::new(kv)))
        }
        #[cfg(feature = "postgres")]
        StateKind::Postgres => {
            let defaults = harness_store::PostgresConfig::default();
            let postgres = harness_store::PostgresConfig {
                url: config.url.clone().unwrap_or_default(),
                table_prefix: config.key_prefix.clone().unwrap_or(defaults.table_prefix.clone()),
                ..defaults
            };
            let kv = harness_store::PostgresKv::connect(&postgres, namespace)
                .await
                .map_err(|err| StateBackendError::Postgres(Box::new(err)))?;
            Ok(Some(Arc::new(kv)))
        }
        #[cfg(not(feature = "redis"))]
        StateKind::Redis => Err(StateBackendError::NotBuilt("redis")),
        #[cfg(not(feature = "postgres"))]
        StateKind::Postgres => Err(StateBackendError::NotBuilt("postgres")),
    }
}

/// What [`probe_schema`] read: the version recorded in the backend (`None`: nothing created
/// there yet) and the one this build writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaProbe {
    /// The recorded version.
    pub found: Option<i64>,
    /// This build's version.
    pub current: i64,
}

/// The schema version of the shared backend `config` names, read without migrating or
/// writing anything (`harness doctor`); `None` for `kind = "file"`.
///
/// # Errors
/// [`StateBackendError`] when the backend does not answer or was not built in.
pub async fn probe_schema(config: &StateConfig) -> Result<Option<SchemaProbe>, StateBackendError> {
    match config.kind {
        StateKind::File => Ok(None),
        StateKind::Redis => probe_redis(config).await.map(Some),
        StateKind::Postgres => probe_postgres(config).await.map(Some),
    }
}

#[cfg(feature = "redis")]
async fn probe_redis(config: &StateConfig) -> Result<SchemaProbe, StateBackendError> {
    let redis = redis_config(config);
    let found = harness_store::RedisStateStore::probe_schema_version(&redis)
        .await
        .map_err(StateBackendError::Redis)?;
    Ok(SchemaProbe {
        found: found.map(i64::from),
        current: i64::from(harness_store::REDIS_SCHEMA_VERSION),
    })
}

#[cfg(not(feature = "redis"))]
async fn probe_redis(_config: &StateConfig) -> Result<SchemaProbe, StateBackendError> {
    Err(StateBackendError::NotBuilt("redis"))
}

#[cfg(feature = "postgres")]
async fn probe_postgres(config: &StateConfig) -> Result<SchemaProbe, StateBackendError> {
    let postgres = harness_store::PostgresConfig {
        acquire_timeout: Duration::from_secs(3),
        ..postgres_config(config)
    };
    let found = harness_store::PostgresBackend::probe_schema_version(&postgres)
        .await
        .map_err(|err| StateBackendError::Postgres(Box::new(err)))?;
    Ok(SchemaProbe {
        found: found.map(i64::from),
        current: i64::from(harness_store::SCHEMA_VERSION),
    })
}

#[cfg(not(feature = "postgres"))]
async fn probe_postgres(_config: &StateConfig) -> Result<SchemaProbe, StateBackendError> {
    Err(StateBackendError::NotBuilt("postgres"))
}

#[cfg(feature = "redis")]
async fn open_redis(config: &StateConfig) -> Result<StateBackend, StateBackendError> {
    let redis = redis_config(config);
    let store = harness_store::RedisStateStore::connect(&redis)
        .await
        .map_err(StateBackendError::Redis)?;
    let lease = store.lease(config.lease_ttl);
    let fencer = lease.clone();
    Ok(StateBackend {
        store: Arc::new(store),
        lease: Arc::new(lease),
        fence: Some(Arc::new(move |key: &LeaseKey, token| fencer.kv_fence(key, token))),
    })
}

#[cfg(not(feature = "redis"))]
async fn open_redis(_config: &StateConfig) -> Result<StateBackend, StateBackendError> {
    Err(StateBackendError::NotBuilt("redis"))
}

#[cfg(feature = "postgres")]
async fn open_postgres(config: &StateConfig) -> Result<StateBackend, StateBackendError> {
    let postgres = postgres_config(config);
    let store = harness_store::PostgresStateStore::connect(&postgres)
        .await
        .map_err(|err| StateBackendError::Postgres(Box::new(err)))?;
    let lease = store.lease(config.lease_ttl);
    let fencer = lease.clone();
    // The fence names the lease row; a `PostgresKv` on the same tables checks it in the
    // transaction of each shared write (`[filesystem] url = "postgres://…"`).
    Ok(StateBackend {
        store: Arc::new(store),
        lease: Arc::new(lease),
        fence: Some(Arc::new(move |key: &LeaseKey, token| fencer.kv_fence(key, token))),
    })
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_config: &StateConfig) -> Result<StateBackend, StateBackendError> {
    Err(StateBackendError::NotBuilt("postgres"))
}

#[cfg(feature = "redis")]
fn redis_config(config: &StateConfig) -> harness_store::RedisStateConfig {
    harness_store::RedisStateConfig {
        url: config.url.clone().unwrap_or_default(),
        key_prefix: config
            .key_prefix
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIS_PREFIX.to_owned()),
        ..harness_store::RedisStateConfig::default()
    }
}

#[cfg(feature = "postgres")]
fn postgres_config(config: &StateConfig) -> harness_store::PostgresConfig {
    let defaults = harness_store::PostgresConfig::default();
    harness_store::PostgresConfig {
        url: config.url.clone().unwrap_or_default(),
        table_prefix: config.key_prefix.clone().unwrap_or(defaults.table_prefix.clone()),
        ..defaults
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_defaults_parse() {
        let config: StateConfig =
            toml::from_str("kind = \"redis\"\nurl = \"redis://h\"\nlease_ttl = \"1s\"\n").unwrap_or_default();
        assert_eq!(config.kind, StateKind::Redis);
        assert_eq!(config.lease_ttl, Duration::from_secs(1));
        let config: StateConfig = toml::from_str("lease_ttl = 5\n").unwrap_or_default();
        assert_eq!(config.lease_ttl, Duration::from_secs(5));
        assert_eq!(StateConfig::default().lease_ttl, Duration::from_secs(30));
        assert!(toml::from_str::<StateConfig>("kind = \"mysql\"\n").is_err());
    }

    #[test]
    fn shared_kinds_need_a_url_and_a_usable_ttl() {
        let no_url = StateConfig {
            kind: StateKind::Redis,
            ..StateConfig::default()
        };
        assert!(no_url.check().is_err_and(|m| m.contains("url")));
        let short = StateConfig {
            lease_ttl: Duration::from_millis(1),
            ..StateConfig::default()
        };
        assert!(short.check().is_err_and(|m| m.contains("lease_ttl")));
        assert!(StateConfig::default().check().is_ok());
    }
}
