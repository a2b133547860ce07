//! [`RedisLease`]: a [`SessionLease`] on Redis with fencing tokens (feature `redis`).
//!
//! Keys under the prefix `P`, for a lease key `L`:
//! - `P fence:L` — a counter; `INCR` on every acquisition gives the fencing token;
//! - `P lease:L` — the holder's token, `SET … PX ttl` while held.
//!
//! Acquiring is one Lua script: when `P lease:L` is absent it increments the counter and
//! sets the holder with the TTL, else it answers how long the holder has left. A waiter polls
//! with a growing delay (at most 50 ms and never past the holder's expiry), stopping when its
//! call is cancelled. While held, a task owned by the guard renews the TTL every `ttl / 3`
//! if the lease is still ours; when it is not, or when renewal fails until the TTL has run
//! out, the guard's `lost()` token fires. Release deletes the holder only if it is still ours.
//! Waiting is not FIFO across processes: whoever polls first after a release wins.

use crate::expiring_lease::{HeldLease, guard, poll_acquire};
use async_trait::async_trait;
use harness_core::{CancellationToken, FencingToken, LeaseError, LeaseGuard, LeaseKey, SessionLease};
use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::time::Duration;

/// The counter key of lease `lease` under `prefix`.
pub(crate) fn fence_key(prefix: &str, lease: &LeaseKey) -> String {
    format!("{prefix}fence:{}", lease.as_str())
}

fn holder_key(prefix: &str, lease: &LeaseKey) -> String {
    format!("{prefix}lease:{}", lease.as_str())
}

/// Deletes every key under `prefix` (SCAN + DEL). For teardown and tests.
pub(crate) async fn purge_prefix(connection: &ConnectionManager, prefix: &str) -> Result<u64, redis::RedisError> {
    let mut connection = connection.clone();
    let pattern = format!("{}*", escape_glob(prefix));
    let mut cursor: u64 = 0;
    let mut removed = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(500)
            .query_async(&mut connection)
            .await?;
        if !keys.is_empty() {
            let n: u64 = redis::cmd("DEL").arg(keys).query_async(&mut connection).await?;
            removed += n;
        }
        if next == 0 {
            return Ok(removed);
        }
        cursor = next;
    }
}

fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

struct Scripts {
    acquire: redis::Script,
    renew: redis::Script,
    release: redis::Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            // KEYS: holder, fence. ARGV: ttl ms. Returns {1, token} or {0, ms left}.
            acquire: redis::Script::new(
                r"if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], t, 'PX', ARGV[1])
return {1, t}",
            ),
            // KEYS: holder, fence. ARGV: token, ttl ms. Returns 1 while the lease is ours.
            // An expired lease nobody took since (the counter is still ours) is taken back.
            renew: redis::Script::new(
                r"local h = redis.call('GET', KEYS[1])
if h == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not h and redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0",
            ),
            // KEYS: holder. ARGV: token. Deletes the holder only if it is ours.
            release: redis::Script::new(
                r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0",
            ),
        }
    }
}

/// A [`SessionLease`] on Redis with fencing tokens. Cheap to clone.
#[derive(Clone)]
pub struct RedisLease {
    connection: ConnectionManager,
    prefix: String,
    ttl: Duration,
    scripts: Arc<Scripts>,
}

impl std::fmt::Debug for RedisLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLease")
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn backend(err: redis::RedisError) -> LeaseError {
    LeaseError::Backend(Box::new(err))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisLease {
    /// A lease on `connection` with keys under `key_prefix` (use the prefix of the
    /// [`RedisStateStore`](crate::RedisStateStore) it fences) and the lease period `ttl`
    /// ([`DEFAULT_LEASE_TTL`](crate::DEFAULT_LEASE_TTL) is the usual choice; renewal runs every `ttl / 3`).
    pub fn new(connection: ConnectionManager, key_prefix: impl Into<String>, ttl: Duration) -> Self {
        Self {
            connection,
            prefix: key_prefix.into(),
            ttl: ttl.max(Duration::from_millis(3)),
            scripts: Arc::new(Scripts::new()),
        }
    }

    /// Connects to `url` and builds a lease as [`new`](Self::new) does.
    ///
    /// # Errors
    /// [`LeaseError::Backend`] when the URL is malformed or the server cannot be reached.
    pub async fn connect(url: &str, key_prefix: impl Into<String>, ttl: Duration) -> Result<Self, LeaseError> {
        let connection = crate::redis_state::connect(url, Duration::from_secs(5), Duration::from_secs(10))
            .await
            .map_err(backend)?;
        Ok(Self::new(connection, key_prefix, ttl))
    }

    /// The lease period.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The fence for KV writes made under a lease of `key` holding `token`
    /// (see [`KvStore::put_fenced`](crate::KvStore::put_fenced)).
    pub fn kv_fence(&self, key: &LeaseKey, token: FencingToken) -> crate::KvFence {
        crate::KvFence {
            counter: fence_key(&self.prefix, key),
            token,
        }
    }

    /// Deletes everything under this lease's key prefix (leases, counters, and the state of
    /// a store sharing the prefix). For teardown and tests.
    ///
    /// # Errors
    /// [`LeaseError::Backend`].
    pub async fn purge(&self) -> Result<u64, LeaseError> {
        purge_prefix(&self.connection, &self.prefix).await.map_err(backend)
    }

    async fn try_acquire(&self, holder: &str, fence: &str) -> Result<Result<u64, u64>, LeaseError> {
        let mut connection = self.connection.clone();
        let (ok, value): (i64, i64) = self
            .scripts
            .acquire
            .key(holder)
            .key(fence)
            .arg(millis(self.ttl))
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        let value = u64::try_from(value).unwrap_or(0);
        Ok(if ok == 1 { Ok(value) } else { Err(value) })
    }
}

#[async_trait]
impl SessionLease for RedisLease {
    async fn acquire(&self, key: &LeaseKey, cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        let holder = holder_key(&self.prefix, key);
        let fence = fence_key(&self.prefix, key);
        let token = poll_acquire(cancel, || async {
            Ok(self
                .try_acquire(&holder, &fence)
                .await?
                .map_err(|left_ms| Some(Duration::from_millis(left_ms))))
        })
        .await?;
        Ok(guard(Held {
            lease: self.clone(),
            holder,
            fence,
            token,
        }))
    }
}

#[derive(Clone)]
struct Held {
    lease: RedisLease,
    holder: String,
    fence: String,
    token: u64,
}

#[async_trait]
impl HeldLease for Held {
    async fn renew_once(&self) -> Result<bool, harness_core::BoxError> {
        let mut connection = self.lease.connection.clone();
        let ours: i64 = self
            .lease
            .scripts
            .renew
            .key(&self.holder)
            .key(&self.fence)
            .arg(self.token)
            .arg(millis(self.lease.ttl))
            .invoke_async(&mut connection)
            .await?;
        Ok(ours == 1)
    }

    async fn release(&self) {
        let mut connection = self.lease.connection.clone();
        let released: Result<i64, _> = self
            .lease
            .scripts
            .release
            .key(&self.holder)
            .arg(self.token)
            .invoke_async(&mut connection)
            .await;
        if let Err(err) = released {
            // The lease expires on its own after its TTL.
            tracing::warn!(error = %err, "could not release a Redis session lease");
        }
    }

    fn ttl(&self) -> Duration {
        self.lease.ttl
    }

    fn token(&self) -> u64 {
        self.token
    }

    fn name(&self) -> &str {
        &self.holder
    }
}
