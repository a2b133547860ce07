//! The guards remove what a test made, also when the test panics, and restore dumps as they
//! were written. Needs the test Redis and PostgreSQL (`--features redis,postgres`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[cfg(feature = "redis")]
mod redis_guard {
    use harness_test_support::services::{REDIS_ROOT, RedisPrefix, redis_url};

    fn raw() -> redis::Connection {
        redis::Client::open(redis_url()).unwrap().get_connection().unwrap()
    }

    fn exists(key: &str) -> bool {
        redis::cmd("EXISTS").arg(key).query::<i64>(&mut raw()).unwrap() == 1
    }

    #[test]
    fn the_keys_under_the_prefix_go_on_drop_and_nothing_else() {
        let (mine, neighbour) = (RedisPrefix::new("guard"), RedisPrefix::new("guard"));
        assert!(mine.prefix().starts_with(REDIS_ROOT) && mine.prefix() != neighbour.prefix());
        let (a, b, other) = (
            format!("{}a", mine.prefix()),
            format!("{}state:b", mine.prefix()),
            format!("{}a", neighbour.prefix()),
        );
        for key in [&a, &b, &other] {
            let () = redis::cmd("SET").arg(key).arg("x").query(&mut raw()).unwrap();
        }
        assert_eq!(mine.keys(), [a.clone(), b.clone()]);
        drop(mine);
        assert!(!exists(&a) && !exists(&b), "the guard's keys are gone");
        assert!(exists(&other), "another prefix is left alone");
        drop(neighbour);
        assert!(!exists(&other));
    }

    #[test]
    fn a_panicking_test_still_cleans_up() {
        let key = std::sync::Mutex::new(String::new());
        let outcome = std::panic::catch_unwind(|| {
            let keys = RedisPrefix::new("panics");
            let name = format!("{}k", keys.prefix());
            let () = redis::cmd("SET").arg(&name).arg("x").query(&mut raw()).unwrap();
            *key.lock().unwrap() = name;
            panic!("the test failed");
        });
        assert!(outcome.is_err());
        let key = key.into_inner().unwrap();
        assert!(!key.is_empty() && !exists(&key), "{key} left behind");
    }

    #[test]
    fn a_dump_is_restored_under_the_new_prefix_with_types_and_ttls() {
        let keys = RedisPrefix::new("restore");
        let dump = serde_json::json!({"prefix": "old:", "keys": [
            {"key": "old:s", "type": "string", "value": "{\"a\": 1}\n", "ttl_ms": -1},
            {"key": "old:l", "type": "list", "value": ["one", "two"], "ttl_ms": -1},
            {"key": "old:h", "type": "hash", "value": {"f": "v", "n": "2"}, "ttl_ms": 600000},
            {"key": "old:z", "type": "zset", "value": [["m1", 1], ["m2", 2.5]], "ttl_ms": -1},
            {"key": "old:y", "type": "zset", "value": ["m3", "3"], "ttl_ms": -1},
            {"key": "old:t", "type": "set", "value": ["x"], "ttl_ms": -1},
        ]});
        assert_eq!(keys.restore(&dump), 6);
        let p = keys.prefix();
        let mut c = raw();
        let s: String = redis::cmd("GET").arg(format!("{p}s")).query(&mut c).unwrap();
        assert_eq!(s, "{\"a\": 1}\n");
        let l: Vec<String> = redis::cmd("LRANGE")
            .arg(format!("{p}l"))
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        assert_eq!(l, ["one", "two"]);
        let h: std::collections::BTreeMap<String, String> =
            redis::cmd("HGETALL").arg(format!("{p}h")).query(&mut c).unwrap();
        assert_eq!(
            h.into_iter().collect::<Vec<_>>(),
            [("f".into(), "v".into()), ("n".into(), "2".into())]
        );
        let ttl: i64 = redis::cmd("PTTL").arg(format!("{p}h")).query(&mut c).unwrap();
        assert!(ttl > 0 && ttl <= 600_000, "{ttl}");
        let z: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(format!("{p}z"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut c)
            .unwrap();
        assert_eq!(z, [("m1".to_owned(), 1.0), ("m2".to_owned(), 2.5)]);
        let t: Vec<String> = redis::cmd("SMEMBERS").arg(format!("{p}t")).query(&mut c).unwrap();
        assert_eq!(t, ["x"]);
        let y: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(format!("{p}y"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut c)
            .unwrap();
        assert_eq!(y, [("m3".to_owned(), 3.0)]);
        assert_eq!(keys.purge(), 6);
    }

    #[test]
    fn a_dump_entry_outside_its_prefix_is_refused() {
        let keys = RedisPrefix::new("restore");
        let dump = serde_json::json!({"prefix": "old:", "keys": [{"key": "new:s", "type": "string", "value": "x"}]});
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| keys.restore(&dump)));
        let message = refused.err().and_then(|p| p.downcast::<String>().ok()).unwrap();
        assert!(message.contains("new:s is not under old:"), "{message}");
        assert!(keys.keys().is_empty());
    }
}

#[cfg(feature = "postgres")]
mod pg_guard {
    use harness_test_support::services::{PG_ROOT, PgPrefix, pg_relations};

    #[test]
    fn tables_and_sequences_under_the_prefix_go_on_drop() {
        let (tables, neighbour) = (PgPrefix::new("guard"), PgPrefix::new("guard"));
        assert!(tables.prefix().starts_with(PG_ROOT) && tables.prefix() != neighbour.prefix());
        let (p, q) = (tables.prefix().to_owned(), neighbour.prefix().to_owned());
        let made = tables.restore(
            "CREATE SEQUENCE public.old_seq;\n\
             CREATE TABLE public.old_rows (id bigint DEFAULT nextval('public.old_seq'), v text);\n\
             INSERT INTO public.old_rows (v) VALUES ('a row');",
            "old_",
        );
        assert_eq!(made, [format!("{p}rows"), format!("{p}seq")]);
        assert_eq!(
            neighbour.restore("CREATE TABLE public.old_kept (v text);", "old_"),
            [format!("{q}kept")]
        );
        drop(tables);
        assert!(pg_relations(&p).is_empty(), "the guard's table and sequence are gone");
        assert_eq!(
            neighbour.relations(),
            [format!("{q}kept")],
            "another prefix is left alone"
        );
        assert_eq!(neighbour.purge(), 1);
        assert!(neighbour.relations().is_empty());
    }

    #[test]
    fn a_failing_statement_is_named() {
        let tables = PgPrefix::new("guard");
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tables.restore("CREATE TABLE x (", "old_")
        }));
        let message = failed.err().and_then(|p| p.downcast::<String>().ok()).unwrap();
        assert!(message.contains("restoring the dump"), "{message}");
    }
}
