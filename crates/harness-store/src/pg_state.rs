//! [`PostgresStateStore`]: agent state on PostgreSQL (feature `postgres`).
//!
//! A save is one transaction: it locks the session's lease row (`FOR SHARE`, so no new
//! holder can be issued a token until it commits) and refuses a stale fencing token, then
//! locks the state row and checks the version (`UPDATE … WHERE version = $n`). A save whose
//! state extends what this store last saw inserts only the new message rows; anything else
//! starts a new generation (deletes the old rows, inserts all). Loads of an unchanged
//! session read one row; an appended session reads only the new rows.

use crate::fence::{LeaseKeyOf, default_lease_key, state_id};
use crate::pg_schema::{PostgresBackend, PostgresConfig, PostgresSetupError, sql};
use crate::state_cache::{CacheEntry, StateCache};
use async_trait::async_trait;
use harness_core::{AgentState, FencingToken, Msg, StateError, StateKey, StateStore, Version};
use sqlx::Row;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    generation: i64,
    count: i64,
}

/// Agent state on PostgreSQL. Cheap to clone: clones share the pool and the cache.
#[derive(Clone)]
pub struct PostgresStateStore {
    backend: PostgresBackend,
    lease_key_of: LeaseKeyOf,
    cache: Arc<StateCache<StateKey, Cursor>>,
}

impl std::fmt::Debug for PostgresStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStateStore")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

fn backend_error(err: sqlx::Error) -> StateError {
    StateError::Backend(Box::new(err))
}

fn corrupt(key: &StateKey, message: impl std::fmt::Display) -> StateError {
    StateError::Corrupt {
        key: key.display(),
        message: message.to_string(),
    }
}

fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn as_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The meta row of a session.
struct Meta {
    version: i64,
    generation: i64,
    count: i64,
    transcript_offset: i64,
    format: i32,
    extensions: String,
}

impl PostgresStateStore {
    /// Connects, creating or migrating the schema.
    ///
    /// # Errors
    /// [`PostgresSetupError`].
    pub async fn connect(config: &PostgresConfig) -> Result<Self, PostgresSetupError> {
        Ok(Self::new(PostgresBackend::connect(config).await?))
    }

    /// A store on a connected backend (shared with a [`PostgresLease`](crate::PostgresLease)).
    pub fn new(backend: PostgresBackend) -> Self {
        let cache = StateCache::new(backend.config.cache_entries, backend.config.cache_bytes);
        Self {
            backend,
            lease_key_of: Arc::new(default_lease_key),
            cache: Arc::new(cache),
        }
    }

    /// Uses `lease_key_of` to find the lease that fences a session.
    #[must_use]
    pub fn lease_keys(mut self, lease_key_of: LeaseKeyOf) -> Self {
        self.lease_key_of = lease_key_of;
        self
    }

    /// The lease that fences this store's writes: same pool and tables, lease period `ttl`
    /// (usually [`DEFAULT_LEASE_TTL`](crate::DEFAULT_LEASE_TTL)).
    pub fn lease(&self, ttl: std::time::Duration) -> crate::PostgresLease {
        crate::PostgresLease::new(self.backend.clone(), ttl)
    }

    /// The backend (pool and schema).
    pub fn backend(&self) -> &PostgresBackend {
        &self.backend
    }

    fn sql(&self, template: &str) -> sqlx::AssertSqlSafe<Arc<str>> {
        sql(&self.backend.prefix, template)
    }

    async fn meta<'e, E>(&self, executor: E, id: &str) -> Result<Option<Meta>, sqlx::Error>
    where
        E: sqlx::Executor<'e, Database = sqlx::Postgres>,
    {
        let row = sqlx::query(self.sql(
            "SELECT version, generation, count, transcript_offset, format, extensions FROM {p}states WHERE key = $1",
        ))
        .bind(id)
        .fetch_optional(executor)
        .await?;
        row.map(|row| {
            Ok(Meta {
                version: row.try_get(0)?,
                generation: row.try_get(1)?,
                count: row.try_get(2)?,
                transcript_offset: row.try_get(3)?,
                format: row.try_get(4)?,
                extensions: row.try_get(5)?,
            })
        })
        .transpose()
    }
}

#[async_trait]
impl StateStore for PostgresStateStore {
    async fn load(&self, key: &StateKey) -> Result<Option<(AgentState, Version)>, StateError> {
        let id = state_id(key);
        let cached = self.cache.get(key);
        let Some(meta) = self.meta(&self.backend.pool, &id).await.map_err(backend_error)? else {
            self.cache.remove(key);
            return Ok(None);
        };
        if let Some(cached) = &cached
            && as_i64(cached.version) == meta.version
            && cached.cursor.generation == meta.generation
        {
            return Ok(Some((cached.state.clone(), cached.version)));
        }
        // Changed: read the meta row and the rows we lack from one snapshot.
        let mut tx = self.backend.pool.begin().await.map_err(backend_error)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *tx)
            .await
            .map_err(backend_error)?;
        let Some(meta) = self.meta(&mut *tx, &id).await.map_err(backend_error)? else {
            self.cache.remove(key);
            return Ok(None);
        };
        let from = cached
            .as_ref()
            .filter(|c| c.cursor.generation == meta.generation && c.cursor.count <= meta.count)
            .map_or(0, |c| c.cursor.count);
        let bodies: Vec<String> = sqlx::query_scalar(
            self.sql("SELECT body FROM {p}messages WHERE key = $1 AND generation = $2 AND seq >= $3 ORDER BY seq"),
        )
        .bind(&id)
        .bind(meta.generation)
        .bind(from)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend_error)?;
        tx.commit().await.map_err(backend_error)?;
        let (mut messages, mut bytes) = match cached.filter(|_| from > 0) {
            Some(cached) => (cached.state.messages, cached.bytes),
            None => (Vec::with_capacity(bodies.len()), 0),
        };
        messages.truncate(usize::try_from(from).unwrap_or(usize::MAX));
        for body in &bodies {
            bytes += body.len() as u64;
            let msg: Msg = serde_json::from_str(body).map_err(|err| corrupt(key, err))?;
            messages.push(Arc::new(msg));
        }
        if messages.len() as i64 != meta.count {
            return Err(corrupt(key, "the message rows do not match the stored count"));
        }
        let state = AgentState {
            format: u32::try_from(meta.format).unwrap_or(0),
            messages,
            transcript_offset: as_u64(meta.transcript_offset),
            extensions: serde_json::from_str(&meta.extensions).map_err(|err| corrupt(key, err))?,
        };
        let version = as_u64(meta.version);
        self.cache.put(
            key.clone(),
            CacheEntry {
                state: state.clone(),
                version,
                cursor: Cursor {
                    generation: meta.generation,
                    count: meta.count,
                },
                bytes,
            },
        );
        Ok(Some((state, version)))
    }

    async fn save(
        &self,
        key: &StateKey,
        state: &AgentState,
        expected: Version,
        fence: Option<FencingToken>,
    ) -> Result<Version, StateError> {
        let id = state_id(key);
        let base = self.cache.append_base(key, state, expected);
        let extensions = serde_json::to_string(&state.extensions).map_err(|err| StateError::Backend(Box::new(err)))?;
        let mut result = self
            .save_attempt(key, &id, state, expected, fence, base, &extensions)
            .await;
        if matches!(result, Ok(None)) {
            // The session was deleted and created again since we saw it: write everything.
            result = self
                .save_attempt(key, &id, state, expected, fence, None, &extensions)
                .await;
        }
        match result {
            Ok(Some(version)) => Ok(version),
            Ok(None) => Err(corrupt(key, "a full save was answered as an append")),
            Err(err) => {
                self.cache.remove(key);
                Err(err)
            }
        }
    }

    async fn delete(&self, key: &StateKey) -> Result<(), StateError> {
        self.cache.remove(key);
        let id = state_id(key);
        let mut tx = self.backend.pool.begin().await.map_err(backend_error)?;
        for statement in [
            "DELETE FROM {p}states WHERE key = $1",
            "DELETE FROM {p}messages WHERE key = $1",
        ] {
            sqlx::query(self.sql(statement))
                .bind(&id)
                .execute(&mut *tx)
                .await
                .map_err(backend_error)?;
        }
        tx.commit().await.map_err(backend_error)
    }
}

impl PostgresStateStore {
    /// Serializes the messages after `base` (all without it), saves them and caches the
    /// result. `Ok(None)`: `base`'s generation is gone, nothing was written.
    #[allow(clippy::too_many_arguments)]
    async fn save_attempt(
        &self,
        key: &StateKey,
        id: &str,
        state: &AgentState,
        expected: Version,
        fence: Option<FencingToken>,
        base: Option<CacheEntry<Cursor>>,
        extensions: &str,
    ) -> Result<Option<Version>, StateError> {
        let from = base.as_ref().map_or(0, |c| c.state.messages.len());
        let mut bodies = Vec::with_capacity(state.messages.len() - from);
        let mut new_bytes = 0u64;
        for msg in &state.messages[from..] {
            let body = serde_json::to_string(&**msg).map_err(|err| StateError::Backend(Box::new(err)))?;
            new_bytes += body.len() as u64;
            bodies.push(body);
        }
        let saved = self
            .save_tx(key, id, state, expected, fence, base.as_ref(), from, bodies, extensions)
            .await?;
        let Some((version, cursor)) = saved else {
            self.cache.remove(key);
            return Ok(None);
        };
        self.cache.put(
            key.clone(),
            CacheEntry {
                state: state.clone(),
                version,
                cursor,
                bytes: base.map_or(0, |c| c.bytes) + new_bytes,
            },
        );
        Ok(Some(version))
    }

    #[allow(clippy::too_many_arguments)]
    async fn save_tx(
        &self,
        key: &StateKey,
        id: &str,
        state: &AgentState,
        expected: Version,
        fence: Option<FencingToken>,
        base: Option<&CacheEntry<Cursor>>,
        from: usize,
        bodies: Vec<String>,
        extensions: &str,
    ) -> Result<Option<(Version, Cursor)>, StateError> {
        let mut tx = self.backend.pool.begin().await.map_err(backend_error)?;
        if let Some(token) = fence {
            let lease = (self.lease_key_of)(key);
            // FOR SHARE: a new holder cannot be issued a token until this save commits.
            let current: Option<i64> =
                sqlx::query_scalar(self.sql("SELECT token FROM {p}leases WHERE key = $1 FOR SHARE"))
                    .bind(lease.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(backend_error)?;
            let current = as_u64(current.unwrap_or(0));
            if token.get() < current {
                return Err(StateError::Fenced {
                    key: key.display(),
                    token,
                    current: FencingToken::new(current),
                });
            }
        }
        let found: Option<(i64, i64)> =
            sqlx::query_as(self.sql("SELECT version, generation FROM {p}states WHERE key = $1 FOR UPDATE"))
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend_error)?;
        let conflict = |found: i64| StateError::Conflict {
            key: key.display(),
            expected,
            found: as_u64(found),
        };
        let found_version = found.map_or(0, |(version, _)| version);
        if found_version != as_i64(expected) {
            return Err(conflict(found_version));
        }
        let appending = base.is_some()
            && found.is_some_and(|(_, generation)| Some(generation) == base.map(|b| b.cursor.generation));
        if base.is_some() && !appending {
            // Only the tail was prepared, but the rows it extends are gone.
            return Ok(None);
        }
        let generation = if appending {
            found.map_or(0, |(_, generation)| generation)
        } else {
            sqlx::query_scalar(self.sql("SELECT nextval('{p}generation_seq')"))
                .fetch_one(&mut *tx)
                .await
                .map_err(backend_error)?
        };
        let first = if appending { as_i64(from as u64) } else { 0 };
        let count = first + bodies.len() as i64;
        let version = as_i64(expected) + 1;
        if found.is_none() {
            let inserted = sqlx::query(self.sql(
                "INSERT INTO {p}states (key, version, generation, count, transcript_offset, format, extensions) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (key) DO NOTHING",
            ))
            .bind(id)
            .bind(version)
            .bind(generation)
            .bind(count)
            .bind(as_i64(state.transcript_offset))
            .bind(i32::try_from(state.format).unwrap_or(i32::MAX))
            .bind(extensions)
            .execute(&mut *tx)
            .await
            .map_err(backend_error)?;
            if inserted.rows_affected() == 0 {
                // Another writer created it since our read.
                return Err(conflict(1));
            }
        } else {
            sqlx::query(self.sql(
                "UPDATE {p}states SET version = $2, generation = $3, count = $4, transcript_offset = $5, \
                 format = $6, extensions = $7 WHERE key = $1 AND version = $8",
            ))
            .bind(id)
            .bind(version)
            .bind(generation)
            .bind(count)
            .bind(as_i64(state.transcript_offset))
            .bind(i32::try_from(state.format).unwrap_or(i32::MAX))
            .bind(extensions)
            .bind(as_i64(expected))
            .execute(&mut *tx)
            .await
            .map_err(backend_error)?;
        }
        if !appending {
            sqlx::query(self.sql("DELETE FROM {p}messages WHERE key = $1"))
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(backend_error)?;
        }
        if !bodies.is_empty() {
            let seqs: Vec<i64> = (first..count).collect();
            sqlx::query(self.sql(
                "INSERT INTO {p}messages (key, generation, seq, body) \
                 SELECT $1, $2, s, b FROM UNNEST($3::bigint[], $4::text[]) AS t(s, b)",
            ))
            .bind(id)
            .bind(generation)
            .bind(seqs)
            .bind(bodies)
            .execute(&mut *tx)
            .await
            .map_err(backend_error)?;
        }
        tx.commit().await.map_err(backend_error)?;
        Ok(Some((as_u64(version), Cursor { generation, count })))
    }
}
