//! [`PostgresKv`]: a [`KvStore`] on PostgreSQL (feature `postgres`).
//!
//! Items live in the table `p kv` of the [`PostgresBackend`] (one row per key, under the
//! store's namespace, so several stores share one table); versions come from the sequence
//! `p kv_seq`, shared by every namespace, so they never repeat. Keys compare in byte order
//! (collation `"C"`).
//!
//! A fenced write is one transaction that first reads the lease row of the fence
//! (`SELECT token FROM p leases WHERE key = $1 FOR SHARE`) and refuses a stale token: while
//! the write's transaction is open no new holder can be issued a token, so a writer whose
//! lease passed to another holder can change nothing. The fence's `counter` is the lease key
//! ([`PostgresLease::kv_fence`](crate::PostgresLease::kv_fence)); the lease must live in the
//! same backend (same table prefix) as the store.

use crate::kv::{KvEntry, KvFence, KvItem, KvPage, KvStore, StoreError, clamp_limit, now_ms, validate_key};
use crate::pg_schema::{PostgresBackend, PostgresConfig, sql};
use async_trait::async_trait;
use harness_core::{FencingToken, Version};
use sqlx::{AssertSqlSafe, Postgres, Transaction};
use std::sync::Arc;

const BACKEND: &str = "postgres";

/// A [`KvStore`] on PostgreSQL. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct PostgresKv {
    backend: PostgresBackend,
    namespace: String,
}

impl std::fmt::Debug for PostgresKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresKv")
            .field("backend", &self.backend)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

fn classify(operation: &'static str, err: sqlx::Error) -> StoreError {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => {
            StoreError::Unavailable {
                backend: BACKEND,
                source: Box::new(err),
            }
        }
        other => StoreError::Backend {
            backend: BACKEND,
            operation,
            source: Box::new(other),
        },
    }
}

fn as_version(value: i64) -> Version {
    u64::try_from(value).unwrap_or(0)
}

fn as_param(version: Version) -> i64 {
    i64::try_from(version).unwrap_or(i64::MAX)
}

impl PostgresKv {
    /// A store on `backend` whose keys live under `namespace` (any string; stores with
    /// different namespaces never see each other's keys).
    pub fn new(backend: PostgresBackend, namespace: impl Into<String>) -> Self {
        Self {
            backend,
            namespace: namespace.into(),
        }
    }

    /// Connects (creating or migrating the schema) and opens the store under `namespace`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when PostgreSQL cannot be reached, [`StoreError::Backend`]
    /// for a bad URL, table prefix or migration failure.
    pub async fn connect(config: &PostgresConfig, namespace: impl Into<String>) -> Result<Self, StoreError> {
        let backend = PostgresBackend::connect(config).await.map_err(|err| match err {
            crate::PostgresSetupError::Database(db) => classify("connect", db),
            other => StoreError::Backend {
                backend: BACKEND,
                operation: "connect",
                source: Box::new(other),
            },
        })?;
        Ok(Self::new(backend, namespace))
    }

    /// The backend (pool and table prefix).
    pub fn backend(&self) -> &PostgresBackend {
        &self.backend
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn sql(&self, template: &str) -> AssertSqlSafe<Arc<str>> {
        sql(&self.backend.prefix, template)
    }

    /// Deletes every item of this store's namespace; returns how many. For teardown and
    /// tests.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn purge(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(self.sql("DELETE FROM {p}kv WHERE ns = $1"))
            .bind(&self.namespace)
            .execute(&self.backend.pool)
            .await
            .map_err(|err| classify("purge", err))?;
        Ok(done.rows_affected())
    }

    /// Starts a transaction and checks `fence` in it, holding the lease row shared until the
    /// transaction ends.
    async fn fenced_tx(
        &self,
        key: &str,
        fence: &KvFence,
        operation: &'static str,
    ) -> Result<Transaction<'static, Postgres>, StoreError> {
        let mut tx = self
            .backend
            .pool
            .begin()
            .await
            .map_err(|err| classify(operation, err))?;
        // FOR SHARE: a new holder cannot be issued a token until this write commits.
        let current: Option<i64> = sqlx::query_scalar(self.sql("SELECT token FROM {p}leases WHERE key = $1 FOR SHARE"))
            .bind(&fence.counter)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|err| classify(operation, err))?;
        let current = as_version(current.unwrap_or(0));
        if fence.token.get() < current {
            // Dropping the transaction rolls it back.
            return Err(StoreError::Fenced {
                key: key.to_owned(),
                token: fence.token,
                current: FencingToken::new(current),
            });
        }
        Ok(tx)
    }

    async fn put_in(
        &self,
        executor: &mut sqlx::PgConnection,
        key: &str,
        value: &[u8],
        expected: Option<Version>,
    ) -> Result<Version, StoreError> {
        let written: Option<i64> = match expected {
            None => sqlx::query_scalar(self.sql(
                "INSERT INTO {p}kv AS k (ns, key, value, version, modified_ms) \
                 VALUES ($1, $2, $3, nextval('{p}kv_seq'), $4) \
                 ON CONFLICT (ns, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, \
                 modified_ms = EXCLUDED.modified_ms RETURNING version",
            ))
            .bind(&self.namespace)
            .bind(key)
            .bind(value)
            .bind(now_ms())
            .fetch_optional(&mut *executor)
            .await
            .map_err(|err| classify("put", err))?,
            Some(0) => sqlx::query_scalar(self.sql(
                "INSERT INTO {p}kv (ns, key, value, version, modified_ms) \
                 VALUES ($1, $2, $3, nextval('{p}kv_seq'), $4) \
                 ON CONFLICT (ns, key) DO NOTHING RETURNING version",
            ))
            .bind(&self.namespace)
            .bind(key)
            .bind(value)
            .bind(now_ms())
            .fetch_optional(&mut *executor)
            .await
            .map_err(|err| classify("put", err))?,
            Some(version) => sqlx::query_scalar(self.sql(
                "UPDATE {p}kv SET value = $3, version = nextval('{p}kv_seq'), modified_ms = $4 \
                 WHERE ns = $1 AND key = $2 AND version = $5 RETURNING version",
            ))
            .bind(&self.namespace)
            .bind(key)
            .bind(value)
            .bind(now_ms())
            .bind(as_param(version))
            .fetch_optional(&mut *executor)
            .await
            .map_err(|err| classify("put", err))?,
        };
        match (written, expected) {
            (Some(version), _) => Ok(as_version(version)),
            (None, Some(expected)) => {
                let found: Option<i64> =
                    sqlx::query_scalar(self.sql("SELECT version FROM {p}kv WHERE ns = $1 AND key = $2"))
                        .bind(&self.namespace)
                        .bind(key)
                        .fetch_optional(&mut *executor)
                        .await
                        .map_err(|err| classify("put", err))?;
                Err(StoreError::Conflict {
                    key: key.to_owned(),
                    expected,
                    found: found.map(as_version),
                })
            }
            (None, None) => Err(StoreError::Backend {
                backend: BACKEND,
                operation: "put",
                source: "an unconditional write returned no version".into(),
            }),
        }
    }

    async fn append_in(
        &self,
        executor: &mut sqlx::PgConnection,
        key: &str,
        bytes: &[u8],
    ) -> Result<Version, StoreError> {
        let version: i64 = sqlx::query_scalar(self.sql(
            "INSERT INTO {p}kv AS k (ns, key, value, version, modified_ms) \
             VALUES ($1, $2, $3, nextval('{p}kv_seq'), $4) \
             ON CONFLICT (ns, key) DO UPDATE SET value = k.value || EXCLUDED.value, version = EXCLUDED.version, \
             modified_ms = EXCLUDED.modified_ms RETURNING version",
        ))
        .bind(&self.namespace)
        .bind(key)
        .bind(bytes)
        .bind(now_ms())
        .fetch_one(&mut *executor)
        .await
        .map_err(|err| classify("append", err))?;
        Ok(as_version(version))
    }

    async fn delete_in(&self, executor: &mut sqlx::PgConnection, key: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(self.sql("DELETE FROM {p}kv WHERE ns = $1 AND key = $2"))
            .bind(&self.namespace)
            .bind(key)
            .execute(&mut *executor)
            .await
            .map_err(|err| classify("delete", err))?;
        Ok(done.rows_affected() > 0)
    }

    async fn connection(&self, operation: &'static str) -> Result<sqlx::pool::PoolConnection<Postgres>, StoreError> {
        self.backend
            .pool
            .acquire()
            .await
            .map_err(|err| classify(operation, err))
    }
}

#[async_trait]
impl KvStore for PostgresKv {
    fn describe(&self) -> String {
        format!("postgres:{}kv:{}", self.backend.prefix, self.namespace)
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn get(&self, key: &str) -> Result<Option<KvItem>, StoreError> {
        validate_key(key)?;
        let row: Option<(Vec<u8>, i64, i64)> =
            sqlx::query_as(self.sql("SELECT value, version, modified_ms FROM {p}kv WHERE ns = $1 AND key = $2"))
                .bind(&self.namespace)
                .bind(key)
                .fetch_optional(&self.backend.pool)
                .await
                .map_err(|err| classify("get", err))?;
        Ok(row.map(|(value, version, modified_ms)| KvItem {
            value,
            version: as_version(version),
            modified_ms,
        }))
    }

    async fn head(&self, key: &str) -> Result<Option<KvEntry>, StoreError> {
        validate_key(key)?;
        let row: Option<(i64, i64, i64)> = sqlx::query_as(
            self.sql("SELECT version, octet_length(value)::bigint, modified_ms FROM {p}kv WHERE ns = $1 AND key = $2"),
        )
        .bind(&self.namespace)
        .bind(key)
        .fetch_optional(&self.backend.pool)
        .await
        .map_err(|err| classify("head", err))?;
        Ok(row.map(|(version, size, modified_ms)| KvEntry {
            key: key.to_owned(),
            version: as_version(version),
            size: as_version(size),
            modified_ms,
        }))
    }

    async fn put(&self, key: &str, value: &[u8], expected: Option<Version>) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection("put").await?;
        self.put_in(&mut connection, key, value, expected).await
    }

    async fn append(&self, key: &str, bytes: &[u8]) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection("append").await?;
        self.append_in(&mut connection, key, bytes).await
    }

    async fn put_fenced(
        &self,
        key: &str,
        value: &[u8],
        expected: Option<Version>,
        fence: &KvFence,
    ) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut tx = self.fenced_tx(key, fence, "put").await?;
        let version = self.put_in(&mut tx, key, value, expected).await?;
        tx.commit().await.map_err(|err| classify("put", err))?;
        Ok(version)
    }

    async fn append_fenced(&self, key: &str, bytes: &[u8], fence: &KvFence) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut tx = self.fenced_tx(key, fence, "append").await?;
        let version = self.append_in(&mut tx, key, bytes).await?;
        tx.commit().await.map_err(|err| classify("append", err))?;
        Ok(version)
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection("delete").await?;
        self.delete_in(&mut connection, key).await
    }

    async fn delete_fenced(&self, key: &str, fence: &KvFence) -> Result<bool, StoreError> {
        validate_key(key)?;
        let mut tx = self.fenced_tx(key, fence, "delete").await?;
        let removed = self.delete_in(&mut tx, key).await?;
        tx.commit().await.map_err(|err| classify("delete", err))?;
        Ok(removed)
    }

    async fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<KvPage, StoreError> {
        let limit = clamp_limit(limit);
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(self.sql(
            "SELECT key, version, octet_length(value)::bigint, modified_ms FROM {p}kv \
             WHERE ns = $1 AND starts_with(key, $2) AND ($3::text IS NULL OR key > $3) \
             ORDER BY key LIMIT $4",
        ))
        .bind(&self.namespace)
        .bind(prefix)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1))
        .fetch_all(&self.backend.pool)
        .await
        .map_err(|err| classify("list", err))?;
        let more = rows.len() > limit;
        let entries: Vec<KvEntry> = rows
            .into_iter()
            .take(limit)
            .map(|(key, version, size, modified_ms)| KvEntry {
                key,
                version: as_version(version),
                size: as_version(size),
                modified_ms,
            })
            .collect();
        let next_after = if more {
            entries.last().map(|entry| entry.key.clone())
        } else {
            None
        };
        Ok(KvPage { entries, next_after })
    }
}
