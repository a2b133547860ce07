//! [`RedisStateStore`]: agent state on Redis (feature `redis`), with compare-and-set and the
//! fencing check in one Lua script, and saves that send only the new messages.
//!
//! Layout under the key prefix `P` (default `harness:state:`), for a session `S` (its
//! agent, user and session ids, escaped and joined with `/`):
//! - `P s:S:meta` — a hash: `version`, `gen` (changes with every rewrite), `count` (messages),
//!   `offset` (transcript offset), `format`, `ext` (the extensions as JSON);
//! - `P s:S:msgs` — a list with one JSON message per element;
//! - `P gen` — the counter `gen` values come from, so a deleted and re-created session never
//!   repeats a (version, gen) pair;
//! - `P schema` — the layout version ([`REDIS_SCHEMA_VERSION`]), set at the first connect;
//! - `P fence:L` — the newest fencing token issued for lease key `L` (written by
//!   [`RedisLease`](crate::RedisLease) with the same prefix).
//!
//! A save whose state keeps every message this store last saw for the session (same `Arc`s
//! or equal messages) `RPUSH`es only the new ones; anything else (compaction, another writer
//! in between) replaces the list. Loads send the cached version and generation: an unchanged
//! session answers with the version alone, an appended one with the new messages only.
//!
//! Like [`RedisKv`](crate::RedisKv), the store targets a standalone Redis (or a primary): a
//! save script touches the session's keys and the lease's counter together.

use crate::fence::{LeaseKeyOf, default_lease_key, state_id};
use crate::state_cache::{CacheEntry, DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES, StateCache};
use async_trait::async_trait;
use harness_core::{AgentState, FencingToken, Msg, StateError, StateKey, StateStore, Version};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

/// How to reach Redis and where to keep the state. Plain data, usually read from
/// `harness.toml` (`[state] kind = "redis"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStateConfig {
    /// Connection URL, e.g. `redis://127.0.0.1:6379` (never logged).
    pub url: String,
    /// Prepended to every Redis key; leases with the same prefix fence this store's writes.
    pub key_prefix: String,
    /// Limit for establishing a connection.
    pub connect_timeout: Duration,
    /// Limit for one command's reply.
    pub response_timeout: Duration,
    /// Sessions kept in the process's cache (0 disables it).
    pub cache_entries: usize,
    /// Estimated bytes the cache may hold.
    pub cache_bytes: u64,
}

impl Default for RedisStateConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            key_prefix: "harness:state:".to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
            cache_entries: DEFAULT_CACHE_ENTRIES,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// Connects a [`ConnectionManager`] with the given timeouts.
///
/// # Errors
/// The connection or the URL failed.
pub(crate) async fn connect(
    url: &str,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<ConnectionManager, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(2);
    ConnectionManager::new_with_config(client, config).await
}

/// What the cache remembers beside the state: the list's generation and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    generation: u64,
    count: u64,
}

/// Agent state on Redis. Cheap to clone: clones share the connection and the cache.
#[derive(Clone)]
pub struct RedisStateStore {
    connection: ConnectionManager,
    prefix: String,
    lease_key_of: LeaseKeyOf,
    cache: Arc<StateCache<StateKey, Cursor>>,
    scripts: Arc<Scripts>,
}

impl std::fmt::Debug for RedisStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStateStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

struct Scripts {
    load: redis::Script,
    save: redis::Script,
}

/// Messages per `RPUSH` inside the save script (Lua's `unpack` has a stack limit).
const PUSH_CHUNK: usize = 500;

impl Scripts {
    fn new() -> Self {
        Self {
            // KEYS: meta, msgs. ARGV: cached version, cached gen, cached count.
            // Returns false (absent), {0} (unchanged) or
            // {1, version, gen, count, offset, format, ext, from, {messages from `from`}}.
            load: redis::Script::new(
                r"local m = redis.call('HMGET', KEYS[1], 'version', 'gen', 'count', 'offset', 'format', 'ext')
if not m[1] then return false end
if m[1] == ARGV[1] and m[2] == ARGV[2] then return {0} end
local from = 0
if m[2] == ARGV[2] and tonumber(m[3]) >= tonumber(ARGV[3]) then from = tonumber(ARGV[3]) end
local msgs = redis.call('LRANGE', KEYS[2], from, -1)
return {1, m[1], m[2], m[3], m[4], m[5], m[6] or '{}', from, msgs}",
            ),
            // KEYS: meta, msgs, fence counter, gen counter.
            // ARGV: expected, token ('' = none), mode ('r' rewrite, or the generation the
            // appended messages extend), format, offset, ext, chunk size, messages...
            // Returns {0, found} conflict, {2, current} fenced, {3} the appended-to
            // generation is gone (deleted and created again: resend everything), or
            // {1, version, gen, count}.
            save: redis::Script::new(
                r"if ARGV[2] ~= '' then
  local f = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tonumber(ARGV[2]) < f then return {2, f} end
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if cur ~= tonumber(ARGV[1]) then return {0, cur} end
local gen = redis.call('HGET', KEYS[1], 'gen')
if ARGV[3] ~= 'r' then
  if gen ~= ARGV[3] then return {3} end
else
  redis.call('DEL', KEYS[2])
  gen = redis.call('INCR', KEYS[4])
end
local chunk = tonumber(ARGV[7])
local i = 8
while i <= #ARGV do
  local j = math.min(i + chunk - 1, #ARGV)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
local n = redis.call('LLEN', KEYS[2])
local v = cur + 1
redis.call('HSET', KEYS[1], 'version', v, 'gen', gen, 'count', n, 'offset', ARGV[5], 'format', ARGV[4], 'ext', ARGV[6])
return {1, v, tonumber(gen), n}",
            ),
        }
    }
}

/// The layout version of the Redis state this build writes (recorded as `P schema`).
pub const REDIS_SCHEMA_VERSION: u32 = 1;

fn schema_key(prefix: &str) -> String {
    format!("{prefix}schema")
}

fn backend(err: impl std::error::Error + Send + Sync + 'static) -> StateError {
    StateError::Backend(Box::new(err))
}

/// The full reply of the load script for a changed session.
type Changed = (i64, Version, u64, u64, u64, u32, Vec<u8>, u64, Vec<Vec<u8>>);

impl RedisStateStore {
    /// Connects to Redis.
    ///
    /// # Errors
    /// [`StateError::Backend`] when the URL is malformed or the server cannot be reached.
    pub async fn connect(config: &RedisStateConfig) -> Result<Self, StateError> {
        let mut connection = connect(&config.url, config.connect_timeout, config.response_timeout)
            .await
            .map_err(backend)?;
        // The layout marker (`P schema`), written once: what `harness doctor` compares.
        let _: redis::Value = redis::cmd("SET")
            .arg(schema_key(&config.key_prefix))
            .arg(REDIS_SCHEMA_VERSION)
            .arg("NX")
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(Self::with_connection(connection, config))
    }

    /// The layout version recorded under the prefix of `config` (`P schema`), read without
    /// writing anything; `None` when no store connected there yet.
    ///
    /// # Errors
    /// [`StateError::Backend`] when Redis cannot be reached, or the marker is not a number.
    pub async fn probe_schema_version(config: &RedisStateConfig) -> Result<Option<u32>, StateError> {
        let mut connection = connect(&config.url, config.connect_timeout, config.response_timeout)
            .await
            .map_err(backend)?;
        let key = schema_key(&config.key_prefix);
        let value: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        value
            .map(|text| {
                text.parse::<u32>().map_err(|_| StateError::Corrupt {
                    key: key.clone(),
                    message: format!("the schema marker holds {text:?}, not a version number"),
                })
            })
            .transpose()
    }

    /// A store on an existing connection (shared with a [`RedisLease`](crate::RedisLease),
    /// say); `config.url` and the timeouts are not used.
    pub fn with_connection(connection: ConnectionManager, config: &RedisStateConfig) -> Self {
        Self {
            connection,
            prefix: config.key_prefix.clone(),
            lease_key_of: Arc::new(default_lease_key),
            cache: Arc::new(StateCache::new(config.cache_entries, config.cache_bytes)),
            scripts: Arc::new(Scripts::new()),
        }
    }

    /// Uses `lease_key_of` to find the lease that fences a session (default:
    /// [`default_lease_key`](crate::default_lease_key)).
    #[must_use]
    pub fn lease_keys(mut self, lease_key_of: LeaseKeyOf) -> Self {
        self.lease_key_of = lease_key_of;
        self
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The lease that fences this store's writes: same connection, same key prefix, lease
    /// period `ttl` (usually [`DEFAULT_LEASE_TTL`](crate::DEFAULT_LEASE_TTL)).
    pub fn lease(&self, ttl: Duration) -> crate::RedisLease {
        crate::RedisLease::new(self.connection.clone(), self.prefix.clone(), ttl)
    }

    fn session_key(&self, key: &StateKey, suffix: &str) -> String {
        format!("{}s:{}:{suffix}", self.prefix, state_id(key))
    }

    fn fence_key(&self, key: &StateKey) -> String {
        crate::redis_lease::fence_key(&self.prefix, &(self.lease_key_of)(key))
    }

    /// Deletes everything under this store's key prefix (state, counters, leases). For
    /// teardown and tests.
    ///
    /// # Errors
    /// [`StateError::Backend`].
    pub async fn purge(&self) -> Result<u64, StateError> {
        crate::redis_lease::purge_prefix(&self.connection, &self.prefix)
            .await
            .map_err(backend)
    }
}

fn corrupt(key: &StateKey, message: impl std::fmt::Display) -> StateError {
    StateError::Corrupt {
        key: key.display(),
        message: message.to_string(),
    }
}

#[async_trait]
impl StateStore for RedisStateStore {
    async fn load(&self, key: &StateKey) -> Result<Option<(AgentState, Version)>, StateError> {
        let cached = self.cache.get(key);
        let (version, generation, count) = cached
            .as_ref()
            .map_or((0, 0, 0), |c| (c.version, c.cursor.generation, c.cursor.count));
        let mut connection = self.connection.clone();
        let reply: Option<redis::Value> = self
            .scripts
            .load
            .key(self.session_key(key, "meta"))
            .key(self.session_key(key, "msgs"))
            .arg(version)
            .arg(generation)
            .arg(count)
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        let Some(reply) = reply else {
            self.cache.remove(key);
            return Ok(None);
        };
        let unchanged = matches!(&reply, redis::Value::Array(items) if items.len() == 1);
        if unchanged {
            if let Some(cached) = cached {
                return Ok(Some((cached.state, cached.version)));
            }
            return Err(corrupt(key, "the store answered 'unchanged' without a cached state"));
        }
        let (_, version, generation, count, offset, format, ext, from, raw): Changed =
            redis::from_redis_value(reply).map_err(|err| backend(redis::RedisError::from(err)))?;
        let extensions: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&ext).map_err(|err| corrupt(key, err))?;
        let mut messages = match (&cached, from) {
            (Some(cached), from) if from > 0 => {
                let keep = usize::try_from(from).unwrap_or(usize::MAX);
                cached.state.messages.get(..keep).map(<[_]>::to_vec).unwrap_or_default()
            }
            _ => Vec::with_capacity(raw.len()),
        };
        let mut bytes = cached.as_ref().filter(|_| from > 0).map_or(0, |c| c.bytes);
        for item in &raw {
            bytes += item.len() as u64;
            let msg: Msg = serde_json::from_slice(item).map_err(|err| corrupt(key, err))?;
            messages.push(Arc::new(msg));
        }
        if messages.len() as u64 != count {
            return Err(corrupt(key, "the message list does not match the stored count"));
        }
        let state = AgentState {
            format,
            messages,
            transcript_offset: offset,
            extensions,
        };
        self.cache.put(
            key.clone(),
            CacheEntry {
                state: state.clone(),
                version,
                cursor: Cursor { generation, count },
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
        // Append when the state extends what this store last saw at `expected`.
        let base = self.cache.append_base(key, state, expected);
        match self.save_once(key, state, expected, fence, base).await? {
            Some(version) => Ok(version),
            // The session was deleted and created again since we saw it: send everything.
            None => self
                .save_once(key, state, expected, fence, None)
                .await?
                .ok_or_else(|| corrupt(key, "a full save was answered as an append")),
        }
    }

    async fn delete(&self, key: &StateKey) -> Result<(), StateError> {
        self.cache.remove(key);
        let mut connection = self.connection.clone();
        redis::cmd("DEL")
            .arg(self.session_key(key, "meta"))
            .arg(self.session_key(key, "msgs"))
            .query_async::<()>(&mut connection)
            .await
            .map_err(backend)
    }
}

impl RedisStateStore {
    /// One save script call: appends the messages after `base` when given, else writes all.
    /// `Ok(None)`: `base`'s generation is gone, nothing was written.
    async fn save_once(
        &self,
        key: &StateKey,
        state: &AgentState,
        expected: Version,
        fence: Option<FencingToken>,
        base: Option<CacheEntry<Cursor>>,
    ) -> Result<Option<Version>, StateError> {
        let from = base.as_ref().map_or(0, |c| c.state.messages.len());
        let mode = base
            .as_ref()
            .map_or_else(|| "r".to_owned(), |c| c.cursor.generation.to_string());
        let ext = serde_json::to_vec(&state.extensions).map_err(backend)?;
        let mut invocation = self.scripts.save.prepare_invoke();
        invocation
            .key(self.session_key(key, "meta"))
            .key(self.session_key(key, "msgs"))
            .key(self.fence_key(key))
            .key(format!("{}gen", self.prefix))
            .arg(expected)
            .arg(fence.map(|t| t.get().to_string()).unwrap_or_default())
            .arg(mode)
            .arg(state.format)
            .arg(state.transcript_offset)
            .arg(ext)
            .arg(PUSH_CHUNK);
        let mut new_bytes = 0u64;
        for msg in &state.messages[from..] {
            let json = serde_json::to_vec(&**msg).map_err(backend)?;
            new_bytes += json.len() as u64;
            invocation.arg(json);
        }
        let mut connection = self.connection.clone();
        let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.map_err(|err| {
            self.cache.remove(key);
            backend(err)
        })?;
        match reply.as_slice() {
            [1, version, generation, count] => {
                self.cache.put(
                    key.clone(),
                    CacheEntry {
                        state: state.clone(),
                        version: *version,
                        cursor: Cursor {
                            generation: *generation,
                            count: *count,
                        },
                        bytes: base.map_or(0, |c| c.bytes) + new_bytes,
                    },
                );
                Ok(Some(*version))
            }
            [3] => {
                self.cache.remove(key);
                Ok(None)
            }
            [0, found] => Err(StateError::Conflict {
                key: key.display(),
                expected,
                found: *found,
            }),
            [2, current] => Err(StateError::Fenced {
                key: key.display(),
                token: fence.unwrap_or(FencingToken::new(0)),
                current: FencingToken::new(*current),
            }),
            _ => Err(corrupt(key, "unexpected reply from the save script")),
        }
    }
}
