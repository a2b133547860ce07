//! [`RedisKv`]: a [`KvStore`] on Redis (feature `redis`).
//!
//! Layout under the configured key prefix `P`:
//! - `P m:<key>` — a hash with the version (`v`) and the write time in ms (`t`);
//! - `P d:<key>` — the value, a plain string (binary-safe; `APPEND` is native and O(1));
//! - `P idx` — a sorted set of every key (all scores 0), listed by prefix with `ZRANGEBYLEX`;
//! - `P seq` — the version counter shared by every key of the store.
//!
//! Every write is one Lua script, so the check, the value, the metadata and the index change
//! together. `KEYS` is never used. The store targets a standalone Redis (or a primary) through
//! redis-rs's auto-reconnecting `ConnectionManager`.

use crate::kv::{KvEntry, KvFence, KvItem, KvPage, KvStore, StoreError, clamp_limit, now_ms, validate_key};
use async_trait::async_trait;
use harness_core::{FencingToken, Version};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

const BACKEND: &str = "redis";

/// How to reach Redis and where to keep the keys. Plain data, usually read from
/// `harness.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKvConfig {
    /// Connection URL, e.g. `redis://127.0.0.1:6379` (may carry a password; it is never
    /// logged).
    pub url: String,
    /// Prepended to every Redis key, so several stores (or deployments) share one server.
    pub key_prefix: String,
    /// Limit for establishing a connection.
    pub connect_timeout: Duration,
    /// Limit for one command's reply.
    pub response_timeout: Duration,
}

impl Default for RedisKvConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            key_prefix: "harness:kv:".to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
        }
    }
}

/// A [`KvStore`] on Redis. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct RedisKv {
    connection: ConnectionManager,
    prefix: String,
    scripts: std::sync::Arc<Scripts>,
}

impl std::fmt::Debug for RedisKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisKv")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

struct Scripts {
    get: redis::Script,
    head: redis::Script,
    put: redis::Script,
    append: redis::Script,
    delete: redis::Script,
    delete_fenced: redis::Script,
    put_fenced: redis::Script,
    append_fenced: redis::Script,
}

/// Checks the fence counter (`KEYS[5]`) against the token (`ARGV[n]`) before a write.
const FENCE_CHECK: &str = r"local fence = tonumber(redis.call('GET', KEYS[5]) or '0')
if tonumber(ARGV[#ARGV]) < fence then return {2, fence} end
";

impl Scripts {
    fn new() -> Self {
        Self {
            // KEYS: meta, data. Returns nil or {version, modified, value}.
            get: redis::Script::new(
                r"local v = redis.call('HGET', KEYS[1], 'v')
if not v then return false end
local t = redis.call('HGET', KEYS[1], 't') or '0'
local d = redis.call('GET', KEYS[2]) or ''
return {v, t, d}",
            ),
            // KEYS: meta, data. Returns nil or {version, modified, size}.
            head: redis::Script::new(
                r"local v = redis.call('HGET', KEYS[1], 'v')
if not v then return false end
local t = redis.call('HGET', KEYS[1], 't') or '0'
return {v, t, redis.call('STRLEN', KEYS[2])}",
            ),
            // KEYS: meta, data, index, seq. ARGV: value, expected ('' = any), now, key.
            // Returns {1, new version} or {0, found version (0 = absent)}.
            put: redis::Script::new(
                r"local cur = redis.call('HGET', KEYS[1], 'v')
if ARGV[2] ~= '' then
  local want = tonumber(ARGV[2])
  local have = tonumber(cur) or 0
  if want ~= have then return {0, have} end
end
local v = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'v', v, 't', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
return {1, v}",
            ),
            // KEYS: meta, data, index, seq. ARGV: bytes, now, key. Returns the new version.
            append: redis::Script::new(
                r"local v = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'v', v, 't', ARGV[2])
redis.call('APPEND', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
return v",
            ),
            // As `put`, plus KEYS[5] the fence counter and a last ARGV, the token.
            // Returns {2, newest token} when fenced.
            put_fenced: redis::Script::new(&format!(
                r"{FENCE_CHECK}local cur = redis.call('HGET', KEYS[1], 'v')
if ARGV[2] ~= '' then
  local want = tonumber(ARGV[2])
  local have = tonumber(cur) or 0
  if want ~= have then return {{0, have}} end
end
local v = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'v', v, 't', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
return {{1, v}}"
            )),
            // As `append`, plus KEYS[5] the fence counter and a last ARGV, the token.
            append_fenced: redis::Script::new(&format!(
                r"{FENCE_CHECK}local v = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'v', v, 't', ARGV[2])
redis.call('APPEND', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
return {{1, v}}"
            )),
            // As `delete`, plus KEYS[4] the fence counter (the fence check reads KEYS[5], so
            // KEYS[4] is repeated there) and a last ARGV, the token. Returns {1, removed} or
            // {2, newest token} when fenced.
            delete_fenced: redis::Script::new(&format!(
                r"{FENCE_CHECK}local n = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return {{1, n}}"
            )),
            // KEYS: meta, data, index. ARGV: key. Returns how many Redis keys were removed.
            delete: redis::Script::new(
                r"local n = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return n",
            ),
        }
    }
}

fn classify(operation: &'static str, err: redis::RedisError) -> StoreError {
    if err.is_io_error() || err.is_connection_refusal() || err.is_timeout() || err.is_connection_dropped() {
        StoreError::Unavailable {
            backend: BACKEND,
            source: Box::new(err),
        }
    } else {
        StoreError::Backend {
            backend: BACKEND,
            operation,
            source: Box::new(err),
        }
    }
}

fn unexpected(operation: &'static str, what: &str) -> StoreError {
    StoreError::Backend {
        backend: BACKEND,
        operation,
        source: what.to_owned().into(),
    }
}

fn fenced(key: &str, fence: &KvFence, current: u64) -> StoreError {
    StoreError::Fenced {
        key: key.to_owned(),
        token: fence.token,
        current: FencingToken::new(current),
    }
}

impl RedisKv {
    /// Connects to Redis.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached in time,
    /// [`StoreError::Backend`] for a malformed URL.
    pub async fn connect(config: &RedisKvConfig) -> Result<Self, StoreError> {
        let client = redis::Client::open(config.url.as_str()).map_err(|err| classify("connect", err))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout))
            .set_number_of_retries(2);
        let connection = ConnectionManager::new_with_config(client, manager_config)
            .await
            .map_err(|err| classify("connect", err))?;
        Ok(Self {
            connection,
            prefix: config.key_prefix.clone(),
            scripts: std::sync::Arc::new(Scripts::new()),
        })
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn redis_key(&self, kind: &str, key: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + kind.len() + key.len());
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(key.as_bytes());
        out
    }

    fn meta_key(&self, key: &str) -> Vec<u8> {
        self.redis_key("m:", key)
    }

    fn data_key(&self, key: &str) -> Vec<u8> {
        self.redis_key("d:", key)
    }

    fn index_key(&self) -> Vec<u8> {
        self.redis_key("idx", "")
    }

    fn seq_key(&self) -> Vec<u8> {
        self.redis_key("seq", "")
    }

    /// Deletes every item of this store (everything under its key prefix that it created) and
    /// its index and counter. For teardown and tests.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn purge(&self) -> Result<u64, StoreError> {
        let mut removed = 0;
        loop {
            let page = self.list("", None, 1000).await?;
            for entry in &page.entries {
                if self.delete(&entry.key).await? {
                    removed += 1;
                }
            }
            if page.next_after.is_none() {
                break;
            }
        }
        let mut connection = self.connection.clone();
        redis::cmd("DEL")
            .arg(self.index_key())
            .arg(self.seq_key())
            .query_async::<()>(&mut connection)
            .await
            .map_err(|err| classify("purge", err))?;
        Ok(removed)
    }
}

#[async_trait]
impl KvStore for RedisKv {
    fn describe(&self) -> String {
        format!("redis:{}", self.prefix)
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn get(&self, key: &str) -> Result<Option<KvItem>, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        let reply: Option<(Version, i64, Vec<u8>)> = self
            .scripts
            .get
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("get", err))?;
        Ok(reply.map(|(version, modified_ms, value)| KvItem {
            value,
            version,
            modified_ms,
        }))
    }

    async fn head(&self, key: &str) -> Result<Option<KvEntry>, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        let reply: Option<(Version, i64, u64)> = self
            .scripts
            .head
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("head", err))?;
        Ok(reply.map(|(version, modified_ms, size)| KvEntry {
            key: key.to_owned(),
            version,
            size,
            modified_ms,
        }))
    }

    async fn put(&self, key: &str, value: &[u8], expected: Option<Version>) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        let expected_arg = expected.map(|version| version.to_string()).unwrap_or_default();
        let (ok, version): (i64, Version) = self
            .scripts
            .put
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .key(self.index_key())
            .key(self.seq_key())
            .arg(value)
            .arg(expected_arg)
            .arg(now_ms())
            .arg(key)
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("put", err))?;
        match (ok, expected) {
            (1, _) => Ok(version),
            (0, Some(expected)) => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected,
                found: (version != 0).then_some(version),
            }),
            _ => Err(unexpected("put", "unexpected reply from the put script")),
        }
    }

    async fn append(&self, key: &str, bytes: &[u8]) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        self.scripts
            .append
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .key(self.index_key())
            .key(self.seq_key())
            .arg(bytes)
            .arg(now_ms())
            .arg(key)
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("append", err))
    }

    async fn put_fenced(
        &self,
        key: &str,
        value: &[u8],
        expected: Option<Version>,
        fence: &KvFence,
    ) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        let expected_arg = expected.map(|version| version.to_string()).unwrap_or_default();
        let (status, version): (i64, Version) = self
            .scripts
            .put_fenced
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .key(self.index_key())
            .key(self.seq_key())
            .key(&fence.counter)
            .arg(value)
            .arg(expected_arg)
            .arg(now_ms())
            .arg(key)
            .arg(fence.token.get())
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("put", err))?;
        match (status, expected) {
            (1, _) => Ok(version),
            (2, _) => Err(fenced(key, fence, version)),
            (0, Some(expected)) => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected,
                found: (version != 0).then_some(version),
            }),
            _ => Err(unexpected("put", "unexpected reply from the fenced put script")),
        }
    }

    async fn append_fenced(&self, key: &str, bytes: &[u8], fence: &KvFence) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        let (status, version): (i64, Version) = self
            .scripts
            .append_fenced
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .key(self.index_key())
            .key(self.seq_key())
            .key(&fence.counter)
            .arg(bytes)
            .arg(now_ms())
            .arg(key)
            .arg(fence.token.get())
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("append", err))?;
        match status {
            1 => Ok(version),
            2 => Err(fenced(key, fence, version)),
            _ => Err(unexpected("append", "unexpected reply from the fenced append script")),
        }
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        let removed: i64 = self
            .scripts
            .delete
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .key(self.index_key())
            .arg(key)
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("delete", err))?;
        Ok(removed > 0)
    }

    async fn delete_fenced(&self, key: &str, fence: &KvFence) -> Result<bool, StoreError> {
        validate_key(key)?;
        let mut connection = self.connection.clone();
        let (status, value): (i64, u64) = self
            .scripts
            .delete_fenced
            .key(self.meta_key(key))
            .key(self.data_key(key))
            .key(self.index_key())
            .key(&fence.counter)
            .key(&fence.counter)
            .arg(key)
            .arg(fence.token.get())
            .invoke_async(&mut connection)
            .await
            .map_err(|err| classify("delete", err))?;
        match status {
            1 => Ok(value > 0),
            2 => Err(fenced(key, fence, value)),
            _ => Err(unexpected("delete", "unexpected reply from the fenced delete script")),
        }
    }

    async fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<KvPage, StoreError> {
        let limit = clamp_limit(limit);
        let mut connection = self.connection.clone();
        // Lexicographic range over the index. Keys are UTF-8 and never contain 0xFF, so
        // `prefix` followed by 0xFF bounds every key that starts with `prefix`.
        let min: Vec<u8> = match after {
            Some(after) if after >= prefix => [b"(".as_slice(), after.as_bytes()].concat(),
            _ if prefix.is_empty() => b"-".to_vec(),
            _ => [b"[".as_slice(), prefix.as_bytes()].concat(),
        };
        let max: Vec<u8> = if prefix.is_empty() {
            b"+".to_vec()
        } else {
            [b"(".as_slice(), prefix.as_bytes(), &[0xFF]].concat()
        };
        let keys: Vec<String> = redis::cmd("ZRANGEBYLEX")
            .arg(self.index_key())
            .arg(min)
            .arg(max)
            .arg("LIMIT")
            .arg(0)
            .arg(limit + 1)
            .query_async(&mut connection)
            .await
            .map_err(|err| classify("list", err))?;
        let more = keys.len() > limit;
        let keys = &keys[..keys.len().min(limit)];
        if keys.is_empty() {
            return Ok(KvPage::default());
        }
        let mut pipeline = redis::pipe();
        for key in keys {
            pipeline
                .cmd("HMGET")
                .arg(self.meta_key(key))
                .arg("v")
                .arg("t")
                .cmd("STRLEN")
                .arg(self.data_key(key));
        }
        let replies: Vec<redis::Value> = pipeline
            .query_async(&mut connection)
            .await
            .map_err(|err| classify("list", err))?;
        let mut entries = Vec::with_capacity(keys.len());
        for (key, pair) in keys.iter().zip(replies.chunks(2)) {
            let [meta, size] = pair else {
                return Err(unexpected("list", "short pipeline reply"));
            };
            let (version, modified_ms): (Option<Version>, Option<i64>) =
                redis::from_redis_value_ref(meta).map_err(|err| classify("list", err.into()))?;
            let size: u64 = redis::from_redis_value_ref(size).map_err(|err| classify("list", err.into()))?;
            // A key deleted between the range and the pipeline has no metadata any more.
            if let Some(version) = version {
                entries.push(KvEntry {
                    key: key.clone(),
                    version,
                    size,
                    modified_ms: modified_ms.unwrap_or(0),
                });
            }
        }
        let next_after = if more { keys.last().cloned() } else { None };
        Ok(KvPage { entries, next_after })
    }
}
