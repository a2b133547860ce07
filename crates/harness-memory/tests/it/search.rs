//! The index: CJK, incremental refresh, isolation, staleness, fallbacks.

use crate::support::{MemFs, dyn_fs, memory};
use harness_core::{AgentId, Msg};
use harness_memory::{IndexStats, MemoryConfig, NamespaceKey, SearchScope};
use harness_models::ScriptedModel;
use std::sync::Arc;
use std::time::Duration;

fn hits(results: &harness_memory::SearchResults) -> Vec<(String, usize)> {
    results.hits.iter().map(|hit| (hit.path.clone(), hit.line)).collect()
}

fn changed(before: IndexStats, after: IndexStats) -> (u64, u64, u64) {
    (
        after.files_reindexed - before.files_reindexed,
        after.files_appended - before.files_appended,
        after.files_removed - before.files_removed,
    )
}

#[tokio::test]
async fn cjk_queries_of_two_and_more_characters_match() {
    let fs = MemFs::new();
    fs.put(
        "memory/2026-11-29.md",
        "- 用户说今天天气很好。\n- 用户喜欢用Rust语言写代码。\n- The user drinks 绿茶 every morning.\n- 東京に住んでいます。\n",
    );
    let (memory, _dir) = memory(&ScriptedModel::new(), MemoryConfig::default());
    let key = NamespaceKey::new("li");
    let search = |query: &'static str| {
        let memory = memory.clone();
        let fs = dyn_fs(&fs);
        let key = key.clone();
        async move { memory.search(fs, &key, query, 10).await }
    };
    let file = "memory/2026-11-29.md".to_owned();
    assert_eq!(hits(&search("天气").await), [(file.clone(), 1)], "two characters");
    assert_eq!(
        hits(&search("Rust语言").await),
        [(file.clone(), 2)],
        "mixed script, three or more"
    );
    assert_eq!(hits(&search("绿茶").await), [(file.clone(), 3)]);
    assert_eq!(
        hits(&search("東京").await),
        [(file.clone(), 4)],
        "Japanese two characters"
    );
    assert_eq!(
        hits(&search("用户喜欢写代码").await)[0],
        (file.clone(), 2),
        "a sentence without spaces"
    );
    assert_eq!(hits(&search("MORNING").await), [(file.clone(), 3)], "case-insensitive");
    assert_eq!(
        hits(&search("天气很好").await),
        [(file.clone(), 1)],
        "four characters, adjacent"
    );
    assert!(
        hits(&search("天好").await).is_empty(),
        "characters that are not adjacent do not match"
    );
    assert_eq!(hits(&search("茶").await), [(file.clone(), 3)], "one character");
    assert_eq!(
        hits(&search("言").await),
        [(file.clone(), 2)],
        "one character at the end of a run"
    );
    let fresh = search("天气").await;
    assert!(!fresh.stale && fresh.note.is_none(), "{fresh:?}");
    assert!(fresh.hits[0].snippet.contains("天气") && fresh.hits[0].score > 0.0);
}

#[tokio::test]
async fn the_refresh_touches_only_changed_files() {
    let fs = MemFs::new();
    fs.put("MEMORY.md", "- The user likes sailing.\n");
    fs.put("memory/2026-11-28.md", "- The user owns a boat called Aurora.\n");
    fs.put("memory/2026-11-29.md", "- The user sails on Lake Geneva.\n");
    let (memory, _dir) = memory(&ScriptedModel::new(), MemoryConfig::default());
    let key = NamespaceKey::new("sam");

    let start = memory.stats().index;
    memory.search(dyn_fs(&fs), &key, "boat", 10).await;
    let first = memory.stats().index;
    assert_eq!(changed(start, first), (3, 0, 0));

    // Nothing changed: nothing re-indexed (files touched within 2 s are re-hashed, not re-indexed).
    memory.search(dyn_fs(&fs), &key, "boat", 10).await;
    let second = memory.stats().index;
    assert_eq!(changed(first, second), (0, 0, 0));

    // One file rewritten, one appended to, one deleted.
    fs.put("MEMORY.md", "- The user likes rowing.\n");
    let log = fs.text("memory/2026-11-29.md").unwrap_or_default();
    fs.put("memory/2026-11-29.md", &format!("{log}- The user bought a new sail.\n"));
    fs.remove("memory/2026-11-28.md");
    let results = memory.search(dyn_fs(&fs), &key, "sail", 10).await;
    let third = memory.stats().index;
    assert_eq!(changed(second, third), (1, 1, 1));
    let mut found = hits(&results);
    found.sort();
    assert_eq!(
        found,
        [
            ("memory/2026-11-29.md".to_owned(), 1),
            ("memory/2026-11-29.md".to_owned(), 2)
        ]
    );
    assert!(hits(&memory.search(dyn_fs(&fs), &key, "Aurora", 10).await).is_empty());
    assert_eq!(
        hits(&memory.search(dyn_fs(&fs), &key, "rowing", 10).await),
        [("MEMORY.md".to_owned(), 1)]
    );
}

#[tokio::test]
async fn one_user_never_finds_another_users_memory() {
    let alice = MemFs::new();
    let bob = MemFs::new();
    alice.put("MEMORY.md", "- Alice's secret project is Bluebird.\n");
    alice.put(
        "agents/assistant/sessions/s1.log.jsonl",
        &format!(
            "{}\n",
            serde_json::to_string(&Msg::user("Bluebird launches in May")).unwrap_or_default()
        ),
    );
    bob.put("MEMORY.md", "- Bob likes chess.\n");
    let (memory, _dir) = memory(&ScriptedModel::new(), MemoryConfig::default());
    let (alice_key, bob_key) = (NamespaceKey::new("alice"), NamespaceKey::new("bob"));

    assert_eq!(
        hits(&memory.search(dyn_fs(&alice), &alice_key, "Bluebird", 10).await).len(),
        1
    );
    let sessions = SearchScope::Sessions { agent: None };
    assert_eq!(
        hits(
            &memory
                .search_in(dyn_fs(&alice), &alice_key, &sessions, "Bluebird", 10)
                .await
        )
        .len(),
        1
    );
    assert!(hits(&memory.search(dyn_fs(&bob), &bob_key, "Bluebird", 10).await).is_empty());
    assert!(
        hits(
            &memory
                .search_in(dyn_fs(&bob), &bob_key, &sessions, "Bluebird", 10)
                .await
        )
        .is_empty()
    );
    assert_eq!(hits(&memory.search(dyn_fs(&bob), &bob_key, "chess", 10).await).len(), 1);
    assert_ne!(memory.index_path(&alice_key), memory.index_path(&bob_key));
    assert!(memory.index_path(&alice_key).exists() && memory.index_path(&bob_key).exists());
}

#[tokio::test]
async fn a_stale_index_says_so() {
    let fs = MemFs::new();
    fs.put("MEMORY.md", "- The user plays the cello.\n");
    let mut config = MemoryConfig::default();
    config.index.search_wait = Duration::from_millis(50);
    let (memory, _dir) = memory(&ScriptedModel::new(), config);
    let key = NamespaceKey::new("cel");

    // The refresh is held mid-way (reading the file): the search answers without it.
    fs.hold_reads();
    let first = memory.search(dyn_fs(&fs), &key, "cello", 10).await;
    assert!(first.stale && first.hits.is_empty(), "{first:?}");
    assert!(
        first
            .note
            .as_deref()
            .is_some_and(|note| note.contains("still being updated")),
        "{first:?}"
    );

    fs.release_reads();
    assert!(memory.refresh_index(dyn_fs(&fs), &key).await.is_empty());
    let later = memory.search(dyn_fs(&fs), &key, "cello", 10).await;
    assert_eq!(hits(&later), [("MEMORY.md".to_owned(), 1)]);
    assert!(memory.shutdown(Duration::from_secs(5)).await.completed);
}

#[tokio::test]
async fn without_the_index_a_plain_scan_answers_and_says_so() {
    let fs = MemFs::new();
    fs.put(
        "memory/2026-11-29.md",
        "- The user plays the cello.\n- The user plays chess.\n",
    );
    let mut config = MemoryConfig::default();
    config.index.enabled = false;
    let (memory, dir) = memory(&ScriptedModel::new(), config);
    let results = memory
        .search(dyn_fs(&fs), &NamespaceKey::new("x"), "plays cello", 10)
        .await;
    assert_eq!(
        hits(&results),
        [
            ("memory/2026-11-29.md".to_owned(), 1),
            ("memory/2026-11-29.md".to_owned(), 2)
        ]
    );
    assert!(results.note.as_deref().is_some_and(|note| note.contains("plain scan")));
    assert!(!dir.path().join("index").exists(), "no database is created");
}

#[tokio::test]
async fn a_corrupt_index_file_is_rebuilt() {
    let fs = MemFs::new();
    fs.put("MEMORY.md", "- The user keeps bees.\n");
    let (memory, _dir) = memory(&ScriptedModel::new(), MemoryConfig::default());
    let key = NamespaceKey::new("bee");
    let db = memory.index_path(&key);
    std::fs::create_dir_all(db.parent().expect("parent")).expect("dir");
    std::fs::write(&db, b"this is not a database, just garbage bytes that fill the header").expect("garbage");
    let results = memory.search(dyn_fs(&fs), &key, "bees", 10).await;
    assert_eq!(hits(&results), [("MEMORY.md".to_owned(), 1)], "{results:?}");
}

#[tokio::test]
async fn transcripts_are_searched_per_agent_and_torn_lines_are_tolerated() {
    let fs = MemFs::new();
    let line = |msg: Msg| serde_json::to_string(&msg).unwrap_or_default();
    fs.put(
        "agents/helper/sessions/s1.log.jsonl",
        &format!(
            "{}\n{}\n{{\"v\":1,\"id\":\"torn",
            line(Msg::user("Where did I park the van?")),
            line(Msg::assistant("You parked the van on level 3."))
        ),
    );
    fs.put(
        "agents/other/sessions/s9.log.jsonl",
        &format!("{}\n", line(Msg::user("the van is blue"))),
    );
    let (memory, _dir) = memory(&ScriptedModel::new(), MemoryConfig::default());
    let key = NamespaceKey::new("vee");
    let all = memory
        .search_in(dyn_fs(&fs), &key, &SearchScope::Sessions { agent: None }, "van", 10)
        .await;
    assert_eq!(all.hits.len(), 3, "{all:?}");
    let helper = SearchScope::Sessions {
        agent: Some(AgentId::from_static("helper")),
    };
    let scoped = memory.search_in(dyn_fs(&fs), &key, &helper, "van level", 10).await;
    assert_eq!(scoped.hits[0].path, "agents/helper/sessions/s1.log.jsonl");
    assert_eq!(scoped.hits[0].line, 2, "the best hit has both words");
    assert!(scoped.hits[0].snippet.starts_with("[assistant]: You parked"));
    assert!(scoped.hits.iter().all(|hit| hit.path.starts_with("agents/helper/")));
    assert!(
        hits(&memory.search(dyn_fs(&fs), &key, "van", 10).await).is_empty(),
        "memory scope excludes transcripts"
    );
    let _ = Arc::clone(&fs);
}

#[tokio::test]
async fn shutdown_cancels_a_stuck_refresh_and_releases_its_waiters() {
    let fs = MemFs::new();
    fs.put("MEMORY.md", "- The user collects stamps.\n");
    let (memory, _dir) = memory(&ScriptedModel::new(), MemoryConfig::default());
    fs.hold_reads();
    let waiting = tokio::spawn({
        let memory = memory.clone();
        let fs = dyn_fs(&fs);
        async move { memory.refresh_index(fs, &NamespaceKey::new("st")).await }
    });
    while memory.stats().index.syncs == 0 {
        tokio::task::yield_now().await;
    }
    let report = memory.shutdown(Duration::from_millis(50)).await;
    assert!(!report.completed && report.abandoned >= 1, "{report:?}");
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter was released")
        .expect("join");
}
