//! [`PostgresLease`]: a [`SessionLease`] on PostgreSQL with fencing tokens (feature
//! `postgres`).
//!
//! One row per lease key in `{p}leases (key, token, expires_at)`. Acquiring is one statement:
//! insert the row, or take it over when it has expired, incrementing `token` (the fencing
//! token) either way; a held lease returns no row and the waiter polls again after a growing
//! delay (at most 50 ms), stopping when its call is cancelled. A task owned by the guard
//! extends `expires_at` every `ttl / 3` while `token` is still ours; when it is not, or
//! renewal fails until the lease has run out, `lost()` fires. Release expires the row if it
//! is still ours. Expiry uses the database's clock. Waiting is not FIFO across processes.

use crate::expiring_lease::{HeldLease, guard, poll_acquire};
use crate::pg_schema::{PostgresBackend, sql};
use async_trait::async_trait;
use harness_core::{CancellationToken, FencingToken, LeaseError, LeaseGuard, LeaseKey, SessionLease};
use std::sync::Arc;
use std::time::Duration;

/// A [`SessionLease`] on PostgreSQL with fencing tokens. Cheap to clone.
#[derive(Clone)]
pub struct PostgresLease {
    backend: PostgresBackend,
    ttl: Duration,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for PostgresLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLease")
            .field("backend", &self.backend)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

struct Statements {
    acquire: sqlx::AssertSqlSafe<Arc<str>>,
    renew: sqlx::AssertSqlSafe<Arc<str>>,
    release: sqlx::AssertSqlSafe<Arc<str>>,
}

fn clone_sql(text: &sqlx::AssertSqlSafe<Arc<str>>) -> sqlx::AssertSqlSafe<Arc<str>> {
    sqlx::AssertSqlSafe(Arc::clone(&text.0))
}

fn backend(err: sqlx::Error) -> LeaseError {
    LeaseError::Backend(Box::new(err))
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl PostgresLease {
    /// A lease on `backend` (the one its [`PostgresStateStore`](crate::PostgresStateStore)
    /// uses) with the lease period `ttl` ([`DEFAULT_LEASE_TTL`](crate::DEFAULT_LEASE_TTL) is the
    /// usual choice; renewal runs every `ttl / 3`).
    pub fn new(backend: PostgresBackend, ttl: Duration) -> Self {
        let p = backend.prefix.clone();
        Self {
            backend,
            ttl: ttl.max(Duration::from_millis(3)),
            statements: Arc::new(Statements {
                acquire: sql(
                    &p,
                    "INSERT INTO {p}leases AS l (key, token, expires_at) \
                     VALUES ($1, 1, clock_timestamp() + $2 * interval '1 millisecond') \
                     ON CONFLICT (key) DO UPDATE SET token = l.token + 1, expires_at = EXCLUDED.expires_at \
                     WHERE l.expires_at <= clock_timestamp() RETURNING token",
                ),
                renew: sql(
                    &p,
                    "UPDATE {p}leases SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' \
                     WHERE key = $1 AND token = $2",
                ),
                release: sql(
                    &p,
                    "UPDATE {p}leases SET expires_at = '-infinity' WHERE key = $1 AND token = $2",
                ),
            }),
        }
    }

    /// The lease period.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The fence for KV writes made under a lease of `key` holding `token`, checked by a
    /// [`PostgresKv`](crate::PostgresKv) on the same backend
    /// (see [`KvStore::put_fenced`](crate::KvStore::put_fenced)).
    pub fn kv_fence(&self, key: &LeaseKey, token: FencingToken) -> crate::KvFence {
        crate::KvFence {
            counter: key.as_str().to_owned(),
            token,
        }
    }
}

#[async_trait]
impl SessionLease for PostgresLease {
    async fn acquire(&self, key: &LeaseKey, cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        let token = poll_acquire(cancel, || async {
            let token = sqlx::query_scalar::<_, i64>(clone_sql(&self.statements.acquire))
                .bind(key.as_str())
                .bind(millis(self.ttl))
                .fetch_optional(&self.backend.pool)
                .await
                .map_err(backend)?;
            // A held lease returns no row; its expiry is not known here.
            Ok(token.map(|token| u64::try_from(token).unwrap_or(0)).ok_or(None))
        })
        .await?;
        Ok(guard(Held {
            lease: self.clone(),
            key: key.as_str().to_owned(),
            token,
        }))
    }
}

#[derive(Clone)]
struct Held {
    lease: PostgresLease,
    key: String,
    token: u64,
}

impl Held {
    fn token_param(&self) -> i64 {
        i64::try_from(self.token).unwrap_or(i64::MAX)
    }
}

#[async_trait]
impl HeldLease for Held {
    async fn renew_once(&self) -> Result<bool, harness_core::BoxError> {
        let done = sqlx::query(clone_sql(&self.lease.statements.renew))
            .bind(&self.key)
            .bind(self.token_param())
            .bind(millis(self.lease.ttl))
            .execute(&self.lease.backend.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(&self) {
        let released = sqlx::query(clone_sql(&self.lease.statements.release))
            .bind(&self.key)
            .bind(self.token_param())
            .execute(&self.lease.backend.pool)
            .await;
        if let Err(err) = released {
            // The lease expires on its own after its TTL.
            tracing::warn!(error = %err, "could not release a PostgreSQL session lease");
        }
    }

    fn ttl(&self) -> Duration {
        self.lease.ttl
    }

    fn token(&self) -> u64 {
        self.token
    }

    fn name(&self) -> &str {
        &self.key
    }
}
