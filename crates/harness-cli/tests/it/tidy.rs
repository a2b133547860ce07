//! Housekeeping: the crate layering of DESIGN.md §2 and crate docs.

use std::path::{Path, PathBuf};

/// Our crates, top of the table first; a crate may depend only on crates listed before it.
const LAYERS: &[&str] = &[
    "harness-core",
    "harness-models",
    "harness-store",
    "harness-fs",
    "harness-memory",
    "harness-compaction",
    "harness-policy",
    "harness-mcp",
    "harness-skills",
    "harness-protocol", // below policy: its `inherit` body field is a policy type
    "harness-structured",
    "harness-agents",
    "harness-snapshot",
    "harness-sandbox",
    "harness",
    "harness-ops",
    "harness-serve", // DESIGN.md §2 calls it harness-gateway
    "harness-cli",
    "harness-bench",
    // Dev-only test support: it may use any crate, and no crate may use it outside
    // `[dev-dependencies]` (`test_support_is_dev_only`).
    "harness-test-support",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_owned()
}

#[test]
fn dependencies_point_up_the_layer_table() {
    let crates = workspace_root().join("crates");
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).unwrap().flatten() {
        let manifest = entry.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let doc: toml::Value = toml::from_str(&text).unwrap();
        let name = doc["package"]["name"].as_str().unwrap().to_owned();
        let rank = LAYERS
            .iter()
            .position(|l| *l == name)
            .unwrap_or_else(|| panic!("{name} is not in the layer table"));
        let Some(deps) = doc.get("dependencies").and_then(|d| d.as_table()) else {
            continue;
        };
        for dep in deps.keys().filter(|d| LAYERS.contains(&d.as_str())) {
            let dep_rank = LAYERS.iter().position(|l| l == dep).unwrap();
            assert!(
                dep_rank < rank,
                "{name} depends on {dep}, which is below it in DESIGN.md §2"
            );
        }
        checked += 1;
    }
    assert!(checked >= 7, "found only {checked} crates");
}

/// The shared test support is never published and never a normal or build dependency of a
/// crate: only `[dev-dependencies]` (of any target) may name it.
#[test]
fn test_support_is_dev_only() {
    let support = "harness-test-support";
    let mut users = 0;
    for entry in std::fs::read_dir(workspace_root().join("crates")).unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("Cargo.toml")) else {
            continue;
        };
        let doc: toml::Value = toml::from_str(&text).unwrap();
        let name = doc["package"]["name"].as_str().unwrap().to_owned();
        if name == support {
            assert_eq!(
                doc["package"].get("publish"),
                Some(&toml::Value::Boolean(false)),
                "{support} must say publish = false"
            );
            continue;
        }
        let mut tables = vec![(String::from("[package]"), &doc)];
        if let Some(targets) = doc.get("target").and_then(|t| t.as_table()) {
            tables.extend(targets.iter().map(|(cfg, table)| (format!("[target.{cfg}]"), table)));
        }
        for (place, table) in tables {
            for section in ["dependencies", "build-dependencies"] {
                let named = table
                    .get(section)
                    .and_then(|d| d.as_table())
                    .is_some_and(|d| d.contains_key(support));
                assert!(
                    !named,
                    "{name} names {support} in {place} {section}: use [dev-dependencies]"
                );
            }
            if table
                .get("dev-dependencies")
                .and_then(|d| d.as_table())
                .is_some_and(|d| d.contains_key(support))
            {
                users += 1;
            }
        }
    }
    assert!(users >= 5, "the crates' tests use {support}: found {users}");
}

#[test]
fn every_library_file_has_a_doc_line() {
    let mut missing = Vec::new();
    let mut stack = vec![workspace_root().join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "tests" | "benches" | "examples" | "target") {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") && path.components().any(|c| c.as_os_str() == "src") {
                let text = std::fs::read_to_string(&path).unwrap();
                if !text.trim_start().starts_with("//!") {
                    missing.push(path);
                }
            }
        }
    }
    assert!(missing.is_empty(), "files without a `//!` line: {missing:?}");
}
