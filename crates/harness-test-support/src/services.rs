//! The test machine's Redis and PostgreSQL: their URLs, and prefixes that clean up after
//! themselves.
//!
//! A test that writes to a shared service takes a guard ([`RedisPrefix`], [`PgPrefix`]), puts
//! everything it writes under the guard's prefix, and keeps the guard alive until it is done:
//! dropping it (at the end of the test, or while a failing test unwinds) deletes every Redis
//! key under the prefix, or drops every table and sequence whose name starts with it.

/// The root of every Redis key prefix a test uses: `scripts/test.sh` counts the keys under it
/// before and after a run.
pub const REDIS_ROOT: &str = "harness-test:";

/// The root of every PostgreSQL table prefix a test uses (a valid start of an identifier):
/// `scripts/test.sh` counts the tables and sequences under it before and after a run.
pub const PG_ROOT: &str = "harness_test_";

/// The test Redis: `HARNESS_TEST_REDIS_URL`, else `redis://127.0.0.1:6379`.
pub fn redis_url() -> String {
    std::env::var("HARNESS_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The test PostgreSQL database: `HARNESS_TEST_POSTGRES_URL`, else
/// `postgres://postgres@127.0.0.1:5432/test`.
pub fn postgres_url() -> String {
    std::env::var("HARNESS_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// `{label}_{16 hex digits}_`: a prefix no other test (in this run or a concurrent one) uses.
/// `label` should be lowercase ASCII letters, digits and `_` so the result is also a valid
/// start of a PostgreSQL identifier.
pub fn unique_prefix(label: &str) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{label}_{}_", &random[..16])
}

/// `harness-test:{label}_{hex}_`: a unique Redis key prefix under [`REDIS_ROOT`], for a test
/// that deletes its keys through the store it opened (else take a [`RedisPrefix`]).
pub fn redis_prefix(label: &str) -> String {
    format!("{REDIS_ROOT}{}", unique_prefix(label))
}

/// `harness_test_{label}_{hex}_`: a unique PostgreSQL table prefix under [`PG_ROOT`], for a
/// test that drops its tables through the backend it opened (else take a [`PgPrefix`]).
pub fn pg_prefix(label: &str) -> String {
    format!("{PG_ROOT}{}", unique_prefix(label))
}

/// A unique Redis key prefix under [`REDIS_ROOT`]; every key under it is deleted on drop.
#[cfg(feature = "redis")]
#[derive(Debug)]
pub struct RedisPrefix {
    url: String,
    prefix: String,
}

#[cfg(feature = "redis")]
impl RedisPrefix {
    /// A fresh prefix `harness-test:{label}_{hex}_` on [`redis_url`].
    pub fn new(label: &str) -> Self {
        Self {
            url: redis_url(),
            prefix: redis_prefix(label),
        }
    }

    /// The prefix; give it to every store the test opens (sub-prefixes such as
    /// `{prefix}state:` are covered too).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis URL the prefix lives on.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The keys under the prefix now, sorted.
    ///
    /// # Panics
    /// When Redis does not answer: the tests need it (`scripts/services.sh` starts it).
    pub fn keys(&self) -> Vec<String> {
        let mut connection = self.connect();
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut connection)
            .unwrap_or_else(|err| panic!("KEYS on the test Redis at {}: {err}", self.url));
        keys.sort();
        keys
    }

    /// Deletes every key under the prefix; returns how many there were.
    ///
    /// # Panics
    /// When Redis does not answer.
    pub fn purge(&self) -> usize {
        let keys = self.keys();
        if !keys.is_empty() {
            let mut connection = self.connect();
            let () = redis::cmd("DEL")
                .arg(&keys)
                .query(&mut connection)
                .unwrap_or_else(|err| panic!("DEL on the test Redis at {}: {err}", self.url));
        }
        keys.len()
    }

    /// Restores a dump written by a fixture's `make.sh` (`{"prefix": OLD, "keys": [{"key",
    /// "type", "value", "ttl_ms"}]}`) under this prefix: each key's `OLD` start becomes this
    /// prefix, its value and time to live are written as they were. Returns how many keys.
    ///
    /// # Panics
    /// When the dump is not of that shape or Redis does not answer.
    pub fn restore(&self, dump: &serde_json::Value) -> usize {
        let old = dump["prefix"]
            .as_str()
            .unwrap_or_else(|| panic!("the dump names no `prefix`"));
        let keys = dump["keys"]
            .as_array()
            .unwrap_or_else(|| panic!("the dump has no `keys` list"));
        let mut connection = self.connect();
        for entry in keys {
            let key = entry["key"]
                .as_str()
                .unwrap_or_else(|| panic!("a dump entry without `key`: {entry}"));
            let rest = key
                .strip_prefix(old)
                .unwrap_or_else(|| panic!("{key} is not under {old}"));
            let key = format!("{}{rest}", self.prefix);
            let strings = |value: &serde_json::Value| -> Vec<String> {
                match value {
                    // A sorted set's `[[member, score], …]` (or a flat list) is one flat list.
                    serde_json::Value::Array(items) => items
                        .iter()
                        .flat_map(|item| match item {
                            serde_json::Value::Array(pair) => pair.iter().map(plain).collect::<Vec<_>>(),
                            other => vec![plain(other)],
                        })
                        .collect(),
                    serde_json::Value::Object(fields) => {
                        fields.iter().flat_map(|(k, v)| [k.clone(), plain(v)]).collect()
                    }
                    other => vec![plain(other)],
                }
            };
            let value = &entry["value"];
            let mut command = match entry["type"].as_str() {
                Some("string") => redis::cmd("SET"),
                Some("list") => redis::cmd("RPUSH"),
                Some("hash") => redis::cmd("HSET"),
                Some("set") => redis::cmd("SADD"),
                Some("zset") => redis::cmd("ZADD"),
                other => panic!("{key}: a Redis type the loader does not know: {other:?}"),
            };
            command.arg(&key);
            let mut items = strings(value);
            if entry["type"] == "zset" {
                // ZRANGE WITHSCORES lists member, score; ZADD takes score, member.
                for pair in items.chunks_mut(2) {
                    pair.reverse();
                }
            }
            command.arg(items);
            let () = command
                .query::<redis::Value>(&mut connection)
                .map(|_| ())
                .unwrap_or_else(|err| panic!("restoring {key}: {err}"));
            if let Some(ttl) = entry["ttl_ms"].as_i64().filter(|ttl| *ttl > 0) {
                let () = redis::cmd("PEXPIRE")
                    .arg(&key)
                    .arg(ttl)
                    .query::<redis::Value>(&mut connection)
                    .map(|_| ())
                    .unwrap_or_else(|err| panic!("restoring the time to live of {key}: {err}"));
            }
        }
        keys.len()
    }

    fn connect(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|err| {
                panic!(
                    "the test Redis at {} does not answer (set HARNESS_TEST_REDIS_URL; scripts/services.sh starts one): {err}",
                    self.url
                )
            })
    }
}

#[cfg(feature = "redis")]
impl Drop for RedisPrefix {
    fn drop(&mut self) {
        // A panic here while the test is already unwinding would abort the process.
        if std::thread::panicking() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.purge()));
        } else {
            self.purge();
        }
    }
}

/// A unique PostgreSQL table prefix under [`PG_ROOT`]; every table and sequence whose name
/// starts with it is dropped on drop.
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub struct PgPrefix {
    url: String,
    prefix: String,
}

#[cfg(feature = "postgres")]
impl PgPrefix {
    /// A fresh prefix `harness_test_{label}_{hex}_` on [`postgres_url`].
    pub fn new(label: &str) -> Self {
        Self {
            url: postgres_url(),
            prefix: pg_prefix(label),
        }
    }

    /// The table prefix; give it to every backend the test opens.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The database URL the tables live in.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The tables and sequences under the prefix now, sorted.
    ///
    /// # Panics
    /// When PostgreSQL does not answer.
    pub fn relations(&self) -> Vec<String> {
        pg_relations(&self.prefix)
    }

    /// Drops every table and sequence under the prefix; returns how many there were.
    ///
    /// # Panics
    /// When PostgreSQL does not answer.
    pub fn purge(&self) -> usize {
        self.blocking(|pool, prefix| async move {
            let found = names(&pool, &prefix).await;
            // Tables first: a sequence a table still uses goes with it (CASCADE) or after it.
            let rows: Vec<(String, String)> = sqlx::query_as(
                "SELECT relname::text, CASE relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END FROM pg_class \
                 WHERE relkind IN ('r', 'S', 'p') AND starts_with(relname::text, $1) ORDER BY relkind = 'S', relname",
            )
            .bind(&prefix)
            .fetch_all(&pool)
            .await
            .unwrap_or_else(|err| panic!("listing the test tables: {err}"));
            for (name, kind) in rows {
                // Names come from the catalogue and start with our prefix; quoted anyway.
                let statement = format!("DROP {kind} IF EXISTS \"{name}\" CASCADE");
                sqlx::query(sqlx::AssertSqlSafe(statement))
                    .execute(&pool)
                    .await
                    .unwrap_or_else(|err| panic!("dropping {name}: {err}"));
            }
            found.len()
        })
    }

    /// Restores a `pg_dump --inserts` script of tables made under `old_prefix`, with every
    /// occurrence of `old_prefix` replaced by this prefix (the tables, sequences and their
    /// rows come back as they were, schema version included). Returns the relations made.
    ///
    /// # Panics
    /// When a statement fails or PostgreSQL does not answer.
    pub fn restore(&self, script: &str, old_prefix: &str) -> Vec<String> {
        let script = script.replace(old_prefix, &self.prefix);
        self.blocking(move |pool, prefix| async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(script))
                .execute(&pool)
                .await
                .unwrap_or_else(|err| panic!("restoring the dump: {err}"));
            names(&pool, &prefix).await
        })
    }

    fn blocking<T, F, Fut>(&self, work: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(sqlx::PgPool, String) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T>,
    {
        on_pool(self.url.clone(), self.prefix.clone(), work)
    }
}

/// The tables and sequences of the test database whose names start with `prefix`, sorted.
///
/// # Panics
/// When PostgreSQL does not answer.
#[cfg(feature = "postgres")]
pub fn pg_relations(prefix: &str) -> Vec<String> {
    on_pool(postgres_url(), prefix.to_owned(), |pool, prefix| async move {
        names(&pool, &prefix).await
    })
}

/// Runs `work` on a pool of `url`, on a thread of its own (so it works inside and outside a
/// tokio runtime, and from `Drop`).
#[cfg(feature = "postgres")]
fn on_pool<T, F, Fut>(url: String, prefix: String, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce(sqlx::PgPool, String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|err| panic!("a runtime for the PostgreSQL cleanup: {err}"));
        runtime.block_on(async move {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&url)
                .await
                .unwrap_or_else(|err| {
                    panic!(
                        "the test PostgreSQL at {url} does not answer (set HARNESS_TEST_POSTGRES_URL; scripts/services.sh starts it): {err}"
                    )
                });
            let out = work(pool.clone(), prefix).await;
            pool.close().await;
            out
        })
    });
    match thread.join() {
        Ok(out) => out,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A dump value as Redis text (numbers and scores as written).
#[cfg(feature = "redis")]
fn plain(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(feature = "postgres")]
async fn names(pool: &sqlx::PgPool, prefix: &str) -> Vec<String> {
    // `starts_with`, not LIKE: `_` is a LIKE wildcard.
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT relname::text FROM pg_class WHERE relkind IN ('r', 'S', 'p') \
         AND starts_with(relname::text, $1) ORDER BY relname",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|err| panic!("listing the test tables: {err}"));
    rows.into_iter().map(|(name,)| name).collect()
}

#[cfg(feature = "postgres")]
impl Drop for PgPrefix {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.purge()));
        } else {
            self.purge();
        }
    }
}
