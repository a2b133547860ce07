//! The [`KvStore`] trait: binary values under string keys, with versions for compare-and-set.

use async_trait::async_trait;
use harness_core::{BoxError, FencingToken, Version};

/// The longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 8192;

/// Why a store operation failed. The caller decides from the variant: after a
/// [`Conflict`](StoreError::Conflict) it re-reads and retries, after
/// [`Unavailable`](StoreError::Unavailable) it retries later, the rest it surfaces.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A conditional write found another version: someone else wrote first. Re-read and retry.
    #[error("{key}: version conflict (expected {expected}, found {shown})", shown = found_text(.found))]
    Conflict {
        /// The key.
        key: String,
        /// The version the caller expected (0 = absent).
        expected: Version,
        /// The version found (`None` = absent).
        found: Option<Version>,
    },
    /// The key is empty, too long or contains a NUL byte. A bug in the caller.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key (cut to 200 characters).
        key: String,
        /// Why.
        reason: &'static str,
    },
    /// A fenced write carried a token older than the newest one issued for its lease: the
    /// writer's lease passed to another holder. Nothing was written.
    #[error("{key}: write refused, the session lease passed to another holder (token {token}, newest {current})")]
    Fenced {
        /// The key.
        key: String,
        /// The token the write carried.
        token: FencingToken,
        /// The newest token issued for the lease.
        current: FencingToken,
    },
    /// The backend could not be reached (connection refused, timed out). Retry later.
    #[error("{backend} is unavailable")]
    Unavailable {
        /// The backend, e.g. `redis`.
        backend: &'static str,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The backend answered with an error or an unexpected reply.
    #[error("{backend} {operation} failed")]
    Backend {
        /// The backend.
        backend: &'static str,
        /// The operation, e.g. `put`.
        operation: &'static str,
        /// The cause.
        #[source]
        source: BoxError,
    },
}

fn found_text(found: &Option<Version>) -> String {
    found.map_or_else(|| "none".to_owned(), |version| version.to_string())
}

impl StoreError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Conflict { .. })
    }
}

/// The fence a write carries: the writer's lease token and the backend key of the counter
/// that holds the newest token issued for that lease (as the lease names it, e.g.
/// `RedisLease::kv_fence`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvFence {
    /// The counter's key in the backend (not under the store's key prefix).
    pub counter: String,
    /// The writer's token.
    pub token: FencingToken,
}

/// A value and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvItem {
    /// The bytes, exactly as written.
    pub value: Vec<u8>,
    /// The version: unique per store, increasing with every write of any key, never 0.
    pub version: Version,
    /// When the value was last written (milliseconds since the Unix epoch).
    pub modified_ms: i64,
}

/// Metadata of one key, without its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// The key.
    pub key: String,
    /// Its version.
    pub version: Version,
    /// Size of the value in bytes.
    pub size: u64,
    /// When the value was last written (milliseconds since the Unix epoch).
    pub modified_ms: i64,
}

/// One page of [`KvStore::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvPage {
    /// Entries in key order (byte order of the UTF-8 keys).
    pub entries: Vec<KvEntry>,
    /// When more keys may follow: pass this as `after` to get the next page.
    pub next_after: Option<String>,
}

/// A key–value store with binary values and per-key versions for optimistic concurrency.
///
/// Versions come from one counter per store, so a key that is deleted and created again never
/// gets a version it had before: a stale compare-and-set can never succeed by accident (no ABA).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use harness_store::{InMemoryKv, KvStore, StoreError};
/// let kv = InMemoryKv::default();
/// let v1 = kv.put("notes/a", b"one", Some(0)).await?; // create-only
/// assert!(matches!(kv.put("notes/a", b"two", Some(0)).await, Err(StoreError::Conflict { .. })));
/// kv.put("notes/a", b"two", Some(v1)).await?; // compare-and-set
/// assert_eq!(kv.get("notes/a").await?.map(|item| item.value), Some(b"two".to_vec()));
/// # Ok::<_, StoreError>(()) }).unwrap();
/// ```
#[async_trait]
pub trait KvStore: Send + Sync + 'static {
    /// A short description for logs (e.g. `redis:harness:`); never contains credentials.
    fn describe(&self) -> String;

    /// Whether other hosts can reach the same entries (a Redis or PostgreSQL server), as
    /// opposed to a store in this process. Default `false`.
    fn is_shared(&self) -> bool {
        false
    }

    /// The value and version of `key`, or `None` when absent.
    ///
    /// # Errors
    /// [`StoreError::InvalidKey`], backend failures.
    async fn get(&self, key: &str) -> Result<Option<KvItem>, StoreError>;

    /// The metadata of `key` without its value, or `None` when absent.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    async fn head(&self, key: &str) -> Result<Option<KvEntry>, StoreError>;

    /// Writes `value` and returns the new version. `expected`: `None` writes unconditionally,
    /// `Some(0)` only creates (the key must be absent), `Some(v)` only replaces version `v`.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when `expected` does not hold, [`StoreError::InvalidKey`],
    /// backend failures.
    async fn put(&self, key: &str, value: &[u8], expected: Option<Version>) -> Result<Version, StoreError>;

    /// Appends `bytes` to the value (creating it when absent) atomically and returns the new
    /// version. The default is a compare-and-set loop; backends override it with a native
    /// append.
    ///
    /// # Errors
    /// As [`put`](Self::put); [`StoreError::Conflict`] only after many lost races.
    async fn append(&self, key: &str, bytes: &[u8]) -> Result<Version, StoreError> {
        let mut last = None;
        for _ in 0..32 {
            let (mut value, expected) = match self.get(key).await? {
                Some(item) => (item.value, item.version),
                None => (Vec::new(), 0),
            };
            value.extend_from_slice(bytes);
            match self.put(key, &value, Some(expected)).await {
                Ok(version) => return Ok(version),
                Err(conflict @ StoreError::Conflict { .. }) => last = Some(conflict),
                Err(other) => return Err(other),
            }
        }
        Err(last.unwrap_or(StoreError::Conflict {
            key: key.to_owned(),
            expected: 0,
            found: None,
        }))
    }

    /// [`put`](Self::put), refused with [`StoreError::Fenced`] when the newest token of
    /// `fence`'s lease is newer than `fence.token`; the check and the write are one atomic
    /// step. Backends whose writers cannot go stale (process memory) ignore the fence: the
    /// default is a plain `put`.
    ///
    /// # Errors
    /// As [`put`](Self::put), and [`StoreError::Fenced`].
    async fn put_fenced(
        &self,
        key: &str,
        value: &[u8],
        expected: Option<Version>,
        fence: &KvFence,
    ) -> Result<Version, StoreError> {
        let _ = fence;
        self.put(key, value, expected).await
    }

    /// [`append`](Self::append) with the fence check of [`put_fenced`](Self::put_fenced).
    ///
    /// # Errors
    /// As [`append`](Self::append), and [`StoreError::Fenced`].
    async fn append_fenced(&self, key: &str, bytes: &[u8], fence: &KvFence) -> Result<Version, StoreError> {
        let _ = fence;
        self.append(key, bytes).await
    }

    /// Removes `key`; returns whether it existed.
    ///
    /// # Errors
    /// [`StoreError::InvalidKey`], backend failures.
    async fn delete(&self, key: &str) -> Result<bool, StoreError>;

    /// [`delete`](Self::delete) with the fence check of [`put_fenced`](Self::put_fenced):
    /// a writer whose lease was taken over cannot remove shared data either.
    ///
    /// # Errors
    /// As [`delete`](Self::delete), and [`StoreError::Fenced`].
    async fn delete_fenced(&self, key: &str, fence: &KvFence) -> Result<bool, StoreError> {
        let _ = fence;
        self.delete(key).await
    }

    /// Keys starting with `prefix` and greater than `after` (when given), in key order, at most
    /// `limit` of them (`limit` is clamped to 1..=10 000).
    ///
    /// # Errors
    /// Backend failures.
    async fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<KvPage, StoreError>;
}

/// Checks a key: non-empty, at most [`MAX_KEY_LEN`] bytes, no NUL.
///
/// # Errors
/// [`StoreError::InvalidKey`].
pub fn validate_key(key: &str) -> Result<(), StoreError> {
    let invalid = |reason| StoreError::InvalidKey {
        key: key.chars().take(200).collect(),
        reason,
    };
    if key.is_empty() {
        return Err(invalid("the key is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(invalid("the key is longer than 8192 bytes"));
    }
    if key.contains('\0') {
        return Err(invalid("the key contains a NUL byte"));
    }
    Ok(())
}

/// The page size actually used for a requested `limit`.
pub(crate) fn clamp_limit(limit: usize) -> usize {
    limit.clamp(1, 10_000)
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}
