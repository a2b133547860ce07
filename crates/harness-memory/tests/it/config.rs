//! The `[memory]` section of `harness.toml`.

use harness_memory::{MemoryConfig, MemoryMode};
use std::time::Duration;

#[derive(Debug, serde::Deserialize)]
struct File {
    memory: MemoryConfig,
}

#[test]
fn the_memory_section_parses_with_durations_and_defaults() {
    let file: File = toml::from_str(
        r#"
        [memory]
        mode = "before_compaction"
        extraction_throttle = "90s"
        consolidation_min_interval = 600
        model = "dashscope:qwen-turbo"

        [memory.index]
        search_wait = "500ms"
        "#,
    )
    .expect("parse");
    let config = file.memory;
    assert_eq!(config.mode, MemoryMode::BeforeCompaction);
    assert_eq!(config.extraction_throttle, Duration::from_secs(90));
    assert_eq!(config.consolidation_min_interval, Duration::from_secs(600));
    assert_eq!(config.maintenance_interval, Duration::from_secs(6 * 3600));
    assert_eq!(config.max_memory_tokens.get(), 4000);
    assert_eq!(config.model.as_deref(), Some("dashscope:qwen-turbo"));
    assert_eq!(config.index.search_wait, Duration::from_millis(500));
    assert_eq!(config.index.max_results, 30);
    assert!(config.enabled && config.index.enabled);

    let defaults: File = toml::from_str("[memory]\n").expect("empty section");
    assert_eq!(defaults.memory, MemoryConfig::default());
    assert_eq!(defaults.memory.consolidation_min_interval, Duration::from_secs(1800));
}

#[test]
fn unknown_keys_and_bad_values_are_rejected() {
    let unknown = toml::from_str::<File>("[memory]\nflush_every = 3\n").expect_err("unknown key");
    assert!(unknown.to_string().contains("flush_every"), "{unknown}");
    let bad = toml::from_str::<File>("[memory]\nextraction_throttle = \"10 parsecs\"\n").expect_err("bad duration");
    assert!(bad.to_string().contains("unknown unit"), "{bad}");
    let mode = toml::from_str::<File>("[memory]\nmode = \"sometimes\"\n").expect_err("bad mode");
    assert!(mode.to_string().contains("sometimes"), "{mode}");
    let zero = toml::from_str::<File>("[memory]\nmax_memory_tokens = 0\n").expect_err("zero budget");
    assert!(
        zero.to_string().contains("max_memory_tokens") || zero.to_string().contains("zero"),
        "{zero}"
    );
}

#[test]
fn the_config_round_trips_through_toml() {
    let config = MemoryConfig::default();
    let text = toml::to_string(&config).expect("serialize");
    assert!(text.contains("extraction_throttle = \"1m\""), "{text}");
    let back: MemoryConfig = toml::from_str(&text).expect("parse back");
    assert_eq!(back, config);
}
