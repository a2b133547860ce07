//! The PostgreSQL schema shared by [`PostgresStateStore`](crate::PostgresStateStore) and
//! [`PostgresLease`](crate::PostgresLease): created by the store, with versioned migrations.
//!
//! Tables, all named with the configured prefix `p` (default `harness_`):
//! - `p schema_version (version)` — the migrations applied;
//! - `p states (key, version, generation, count, transcript_offset, format, extensions)` —
//!   one row per session;
//! - `p messages (key, generation, seq, body)` — one row per message of the current
//!   generation (a rewrite starts a new generation), so an append inserts only new rows;
//! - `p leases (key, token, expires_at)` — session leases; `token` grows with every
//!   acquisition and is the fencing token;
//! - `p kv (ns, key, value, version, modified_ms)` — the items of every
//!   [`PostgresKv`](crate::PostgresKv), `ns` being the store's namespace;
//! - the sequences `p generation_seq` and `p kv_seq` (the KV versions).

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Executor};
use std::sync::Arc;
use std::time::Duration;

/// How to reach PostgreSQL and how to name the tables. Plain data, usually read from
/// `harness.toml` (`[state] kind = "postgres"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// Connection URL, e.g. `postgres://postgres@127.0.0.1/test` (never logged).
    pub url: String,
    /// Prepended to every table name: lowercase ASCII letters, digits and `_`, starting with
    /// a letter, at most 40 bytes.
    pub table_prefix: String,
    /// Connections in the pool.
    pub max_connections: u32,
    /// Limit for getting a connection from the pool (and for connecting).
    pub acquire_timeout: Duration,
    /// Sessions kept in the process's cache (0 disables it).
    pub cache_entries: usize,
    /// Estimated bytes the cache may hold.
    pub cache_bytes: u64,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            url: "postgres://postgres@127.0.0.1:5432/postgres".to_owned(),
            table_prefix: "harness_".to_owned(),
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
            cache_entries: crate::DEFAULT_CACHE_ENTRIES,
            cache_bytes: crate::DEFAULT_CACHE_BYTES,
        }
    }
}

/// Why the PostgreSQL backend could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresSetupError {
    /// The table prefix is not a safe SQL identifier prefix.
    #[error("invalid table prefix {0:?}: use lowercase ASCII letters, digits and '_', starting with a letter")]
    InvalidPrefix(String),
    /// Connecting or migrating failed.
    #[error("postgres setup failed")]
    Database(#[from] sqlx::Error),
}

/// The migrations, in order; entry `i` brings the schema to version `i + 1`. `{p}` is the
/// table prefix. Never edit an applied migration: add a new one.
const MIGRATIONS: &[&[&str]] = &[
    &[
        "CREATE TABLE {p}states (key text PRIMARY KEY, version bigint NOT NULL, generation bigint NOT NULL, \
     count bigint NOT NULL, transcript_offset bigint NOT NULL, format integer NOT NULL, extensions text NOT NULL)",
        "CREATE TABLE {p}messages (key text NOT NULL, generation bigint NOT NULL, seq bigint NOT NULL, \
     body text NOT NULL, PRIMARY KEY (key, generation, seq))",
        "CREATE TABLE {p}leases (key text PRIMARY KEY, token bigint NOT NULL, expires_at timestamptz NOT NULL)",
        "CREATE SEQUENCE {p}generation_seq",
    ],
    // 2: the KvStore (`PostgresKv`). Keys sort by byte order (collation "C").
    &[
        "CREATE TABLE {p}kv (ns text COLLATE \"C\" NOT NULL, key text COLLATE \"C\" NOT NULL, value bytea NOT NULL, \
         version bigint NOT NULL, modified_ms bigint NOT NULL, PRIMARY KEY (ns, key))",
        "CREATE SEQUENCE {p}kv_seq",
    ],
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = 2;

/// Checks a table prefix.
fn validate_prefix(prefix: &str) -> Result<(), PostgresSetupError> {
    let ok = prefix.len() <= 40
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(PostgresSetupError::InvalidPrefix(prefix.to_owned()))
    }
}

/// SQL text with the prefix substituted, checked safe by [`validate_prefix`].
pub(crate) fn sql(prefix: &str, template: &str) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::from(template.replace("{p}", prefix)))
}

/// A connected pool with the schema migrated to [`SCHEMA_VERSION`].
#[derive(Clone)]
pub struct PostgresBackend {
    pub(crate) pool: PgPool,
    pub(crate) prefix: String,
    pub(crate) config: PostgresConfig,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// Connects and applies the migrations this build knows (concurrent callers are
    /// serialized by an advisory lock).
    ///
    /// # Errors
    /// [`PostgresSetupError`].
    pub async fn connect(config: &PostgresConfig) -> Result<Self, PostgresSetupError> {
        validate_prefix(&config.table_prefix)?;
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.max(1))
            .acquire_timeout(config.acquire_timeout)
            .connect(&config.url)
            .await?;
        let backend = Self {
            pool,
            prefix: config.table_prefix.clone(),
            config: config.clone(),
        };
        backend.migrate().await?;
        Ok(backend)
    }

    async fn migrate(&self) -> Result<(), sqlx::Error> {
        let p = &self.prefix;
        let mut tx = self.pool.begin().await?;
        // One migrator per prefix at a time; the lock ends with the transaction.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(format!("harness-migrate:{p}"))
            .execute(&mut *tx)
            .await?;
        tx.execute(sql(
            p,
            "CREATE TABLE IF NOT EXISTS {p}schema_version (version integer NOT NULL)",
        ))
        .await?;
        let current: Option<i32> = sqlx::query_scalar(sql(p, "SELECT max(version) FROM {p}schema_version"))
            .fetch_one(&mut *tx)
            .await?;
        let current = usize::try_from(current.unwrap_or(0)).unwrap_or(0);
        for (index, steps) in MIGRATIONS.iter().enumerate().skip(current) {
            for step in *steps {
                tx.execute(sql(p, step)).await?;
            }
            sqlx::query(sql(p, "INSERT INTO {p}schema_version (version) VALUES ($1)"))
                .bind(i32::try_from(index + 1).unwrap_or(i32::MAX))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    /// The schema version applied under `config`'s prefix, read without migrating or
    /// creating anything (one short-lived connection); `None` when no store created its
    /// tables there yet.
    ///
    /// # Errors
    /// [`PostgresSetupError`] when the prefix is invalid or the query fails.
    pub async fn probe_schema_version(config: &PostgresConfig) -> Result<Option<i32>, PostgresSetupError> {
        validate_prefix(&config.table_prefix)?;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(config.acquire_timeout)
            .connect(&config.url)
            .await?;
        let table = format!("{}schema_version", config.table_prefix);
        let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
            .bind(&table)
            .fetch_one(&pool)
            .await?;
        let version = match exists {
            None => None,
            Some(_) => {
                let version: Option<i32> =
                    sqlx::query_scalar(sql(&config.table_prefix, "SELECT max(version) FROM {p}schema_version"))
                        .fetch_one(&pool)
                        .await?;
                Some(version.unwrap_or(0))
            }
        };
        pool.close().await;
        Ok(version)
    }

    /// The table prefix.
    pub fn table_prefix(&self) -> &str {
        &self.prefix
    }

    /// The applied schema version.
    ///
    /// # Errors
    /// The query failed.
    pub async fn schema_version(&self) -> Result<i32, sqlx::Error> {
        let version: Option<i32> = sqlx::query_scalar(sql(&self.prefix, "SELECT max(version) FROM {p}schema_version"))
            .fetch_one(&self.pool)
            .await?;
        Ok(version.unwrap_or(0))
    }

    /// Drops every table and sequence of this prefix. For teardown and tests.
    ///
    /// # Errors
    /// The statements failed.
    pub async fn drop_all(&self) -> Result<(), sqlx::Error> {
        let p = &self.prefix;
        for statement in [
            "DROP TABLE IF EXISTS {p}states, {p}messages, {p}leases, {p}kv, {p}schema_version",
            "DROP SEQUENCE IF EXISTS {p}generation_seq, {p}kv_seq",
        ] {
            self.pool.execute(sql(p, statement)).await?;
        }
        Ok(())
    }
}
