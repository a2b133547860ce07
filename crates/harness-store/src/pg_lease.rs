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

use crate::pg_schema::{PostgresBackend, sql};
use async_trait::async_trait;
use harness_core::{CancellationToken, FencingToken, LeaseError, LeaseGuard, LeaseKey, LeaseRelease, SessionLease};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const MAX_POLL: Duration = Duration::from_millis(50);

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
}

#[async_trait]
impl SessionLease for PostgresLease {
    async fn acquire(&self, key: &LeaseKey, cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        let mut delay = Duration::from_millis(2);
        let token = loop {
            if cancel.is_cancelled() {
                return Err(LeaseError::Cancelled);
            }
            // Not raced against `cancel`: a reply dropped after the row was taken would leave
            // the lease held by nobody until it expires.
            let token = sqlx::query_scalar::<_, i64>(clone_sql(&self.statements.acquire))
                .bind(key.as_str())
                .bind(millis(self.ttl))
                .fetch_optional(&self.backend.pool)
                .await
                .map_err(backend)?;
            if let Some(token) = token {
                break u64::try_from(token).unwrap_or(0);
            }
            tokio::select! {
                () = cancel.cancelled() => return Err(LeaseError::Cancelled),
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(MAX_POLL);
        };
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let held = Held {
            lease: self.clone(),
            key: key.as_str().to_owned(),
            token,
        };
        tokio::spawn(renew(held.clone(), lost.clone(), stop.clone()));
        Ok(LeaseGuard::new(
            Some(FencingToken::new(token)),
            lost,
            Box::new(Release { held, stop }),
        ))
    }
}

#[derive(Clone)]
struct Held {
    lease: PostgresLease,
    key: String,
    token: u64,
}

impl Held {
    fn token(&self) -> i64 {
        i64::try_from(self.token).unwrap_or(i64::MAX)
    }

    async fn renew_once(&self) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(clone_sql(&self.lease.statements.renew))
            .bind(&self.key)
            .bind(self.token())
            .bind(millis(self.lease.ttl))
            .execute(&self.lease.backend.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(&self) {
        let released = sqlx::query(clone_sql(&self.lease.statements.release))
            .bind(&self.key)
            .bind(self.token())
            .execute(&self.lease.backend.pool)
            .await;
        if let Err(err) = released {
            // The lease expires on its own after its TTL.
            tracing::warn!(error = %err, "could not release a PostgreSQL session lease");
        }
    }
}

async fn renew(held: Held, lost: CancellationToken, stop: CancellationToken) {
    let period = held.lease.ttl / 3;
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        match held.renew_once().await {
            Ok(true) => renewed = Instant::now(),
            Ok(false) => {
                tracing::warn!(lease = %held.key, "session lease was taken by another holder");
                lost.cancel();
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, lease = %held.key, "could not renew a session lease");
                if renewed.elapsed() >= held.lease.ttl {
                    lost.cancel();
                    return;
                }
            }
        }
    }
}

struct Release {
    held: Held,
    stop: CancellationToken,
}

#[async_trait]
impl LeaseRelease for Release {
    async fn release(self: Box<Self>) {
        self.stop.cancel();
        self.held.release().await;
    }

    fn release_now(self: Box<Self>) {
        self.stop.cancel();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { self.held.release().await });
        }
        // Without a runtime the lease expires after its TTL.
    }
}
