//! `harness.toml` parsing: unknown keys, bad values and cross-section refusals named.

use harness::HarnessConfig;
use harness::config::CONFIG_TEMPLATE;
use harness_fs::IsolationScope;
use std::path::Path;

#[test]
fn unknown_keys_are_named() {
    let err = HarnessConfig::parse("[agent]\nmax_iter = 3\n", Path::new("harness.toml")).err();
    let message = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("max_iter"), "{message}");
    let err = HarnessConfig::parse("[agnet]\n", Path::new("harness.toml")).err();
    assert!(err.map(|e| e.to_string()).unwrap_or_default().contains("agnet"));
}

#[test]
fn capability_sections_parse_and_refuse_unknown_keys() {
    let config = HarnessConfig::parse(
        "[compaction]\ntrigger_messages = 30\n[tool_result_eviction]\nenabled = false\nmax_chars = 100\n",
        Path::new("t"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let compaction = config
        .section::<harness_compaction::CompactionConfig>()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(compaction.map(|c| c.trigger_messages), Some(30));
    for bad in ["[compaction]\ntriger = 1\n", "[tool_result_eviction]\nmax_char = 1\n"] {
        let message = HarnessConfig::parse(bad, Path::new("t"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.contains("triger") || message.contains("max_char"), "{message}");
    }
}

#[test]
fn unusable_values_are_refused_naming_section_and_key() {
    let message = HarnessConfig::parse("[agent]\nmax_iters = 0\n", Path::new("ws/harness.toml"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(message, "ws/harness.toml: [agent] max_iters must be at least 1");
    let message = HarnessConfig::parse("[model]\nidle_timeout = \"0s\"\n", Path::new("t"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.contains("[model] idle_timeout"), "{message}");
}

#[test]
fn composite_with_file_state_is_refused_in_one_line_naming_state() {
    let message = HarnessConfig::parse("[filesystem]\nkind = \"composite\"\n", Path::new("ws/harness.toml"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        message.starts_with("ws/harness.toml: [state] kind = \"file\""),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
    let other_redis = "[filesystem]\nkind = \"composite\"\nredis_url = \"redis://a:6379\"\n\
                       [state]\nkind = \"redis\"\nurl = \"redis://b:6379\"\n";
    let message = HarnessConfig::parse(other_redis, Path::new("t"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("[state] url must be the Redis of [filesystem] url"),
        "{message}"
    );
    let scheme = "[filesystem]\nkind = \"composite\"\nurl = \"mysql://h/db\"\n";
    let message = HarnessConfig::parse(scheme, Path::new("t"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("[filesystem] url must start with redis://") && message.contains("mysql://…"),
        "{message}"
    );
    // On PostgreSQL the shared files must live in the tables of the lease that fences
    // them: another backend, database or table prefix is refused with one line.
    for unfenced in [
        "[filesystem]\nkind = \"composite\"\n[state]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\n",
        "[filesystem]\nkind = \"composite\"\nurl = \"postgres://h/other\"\n\
         [state]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\n",
        "[filesystem]\nkind = \"composite\"\nurl = \"postgres://h/db\"\n\
         [state]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nkey_prefix = \"t_\"\n",
    ] {
        let message = HarnessConfig::parse(unfenced, Path::new("t"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("[filesystem]") && message.contains("table_prefix"),
            "{unfenced}: {message}"
        );
        assert_eq!(message.lines().count(), 1, "{message}");
    }
    for ok in [
        "[filesystem]\nkind = \"composite\"\n[state]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n",
        "[filesystem]\nkind = \"composite\"\nurl = \"postgres://h/db\"\n[state]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\n",
        "[filesystem]\nkind = \"composite\"\nurl = \"postgres://h/db\"\ntable_prefix = \"t_\"\n\
         [state]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nkey_prefix = \"t_\"\n",
        "[filesystem]\nkind = \"local\"\n",
    ] {
        assert!(HarnessConfig::parse(ok, Path::new("t")).is_ok(), "{ok}");
    }
}

#[test]
fn syntax_errors_keep_the_caret_diagram_on_its_own_lines() {
    let message = HarnessConfig::parse("[agent]\nname = \n", Path::new("t"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.lines().count() > 1 && message.contains('^'), "{message}");
}

#[test]
fn template_parses_and_values_load() {
    assert_eq!(
        HarnessConfig::parse(CONFIG_TEMPLATE, Path::new("t")).ok(),
        Some(HarnessConfig::default())
    );
    let config =
        HarnessConfig::parse("[agent]\nmax_iters = 3\nisolation = \"session\"\n", Path::new("t")).unwrap_or_default();
    assert_eq!(config.agent.max_iters, Some(3));
    assert_eq!(config.agent.isolation, Some(IsolationScope::Session));
}
