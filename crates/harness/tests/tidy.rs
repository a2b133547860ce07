//! The architecture, checked: capabilities meet only through the seam (no capability imports
//! another capability or the agent), no circle of more than six modules in any crate, and no
//! crate above 13k lines of library code.
//!
//! Edges are read from the source: every `crate::module` path (also inside `use crate::{..}`
//! groups), and a name used through a crate-root re-export (`crate::Name`) counts as an edge
//! to the module that defines it, so a re-export cannot hide a circle. Comments are skipped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The built-in capabilities of the `harness` crate: each registers through the seam.
const CAPABILITIES: &[&str] = &[
    "compaction",
    "eviction",
    "extensions",
    "memory",
    "permissions",
    "plan_mode",
    "prompt",
    "sandbox",
    "structured",
    "subagents",
    "task_list",
    "tools",
];

/// The composition root and the agent: capabilities may not import them.
const ROOT: &[&str] = &[
    "agent",
    "builtins",
    "control",
    "from_workspace",
    "structured_call",
    "subagent_control",
];

/// The most modules one circle may hold.
const MAX_CIRCLE: usize = 6;

/// The most lines of library code (every `.rs` line under `src/`) one crate may hold.
const MAX_CRATE_LINES: usize = 13_000;

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments (line comments, doc comments and block comments), so doc
/// links are no edges. String literals are kept: a path in a string is rare and harmless.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            out.push(c as char);
            if c == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1] as char);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            out.push('"');
            i += 1;
        } else if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

fn ident_at(text: &str, start: usize) -> &str {
    let end = text[start..]
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(text.len(), |n| start + n);
    &text[start..end]
}

/// The first path segments after every `crate::` in `code`: `crate::a::b` gives `a`,
/// `crate::{a::b, C}` gives `a` and `C`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = 0;
    while let Some(at) = code[rest..].find("crate::") {
        let start = rest + at;
        rest = start + "crate::".len();
        // `crate::` must not be the tail of another identifier (`harness_crate::`).
        if start > 0 {
            let before = code.as_bytes()[start - 1];
            if before.is_ascii_alphanumeric() || before == b'_' {
                continue;
            }
        }
        if code[rest..].starts_with('{') {
            // A group: split its top level on commas.
            let mut depth = 0usize;
            let mut item_start = rest + 1;
            let mut end = rest;
            for (offset, c) in code[rest..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = rest + offset;
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        found.push(ident_at(code, skip_space(code, item_start)).to_owned());
                        item_start = rest + offset + 1;
                    }
                    _ => {}
                }
            }
            let last = skip_space(code, item_start);
            if last < end {
                found.push(ident_at(code, last).to_owned());
            }
        } else {
            found.push(ident_at(code, rest).to_owned());
        }
    }
    found.retain(|name| !name.is_empty() && name != "self");
    found
}

fn skip_space(text: &str, from: usize) -> usize {
    text[from..]
        .find(|c: char| !c.is_whitespace())
        .map_or(text.len(), |n| from + n)
}

/// `pub use module::{A, B}` / `pub use module::A` at the crate root: name → module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in lib.split(';') {
        let statement = statement.trim();
        let Some(path) = statement.strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, tail)) = path.split_once("::") else {
            continue;
        };
        let tail = tail.trim();
        let items: Vec<&str> = match tail.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            Some(group) => group.split(',').collect(),
            None => vec![tail],
        };
        for item in items {
            let item = item.trim();
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => item.rsplit("::").next().unwrap_or(item),
            };
            if !name.is_empty() {
                names.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    names
}

struct Crate {
    name: String,
    lines: usize,
    /// module → modules it imports.
    edges: BTreeMap<String, BTreeSet<String>>,
}

fn read_crate(dir: &Path) -> Option<Crate> {
    let src = dir.join("src");
    let root_file = ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).find(|f| f.exists())?;
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut lines = 0;
    let reexports = root_reexports(&strip_comments(&std::fs::read_to_string(&root_file).ok()?));
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).ok()?;
        lines += text.lines().count();
        let relative = file.strip_prefix(&src).ok()?;
        let first = relative.components().next()?.as_os_str().to_string_lossy().into_owned();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let entry = edges.entry(module.clone()).or_default();
        for name in crate_paths(&strip_comments(&text)) {
            let target = reexports.get(&name).cloned().unwrap_or(name);
            if target != module && target.chars().next().is_some_and(char::is_lowercase) {
                entry.insert(target);
            }
        }
    }
    // Keep only edges to modules of this crate.
    let modules: BTreeSet<String> = edges.keys().cloned().collect();
    for targets in edges.values_mut() {
        targets.retain(|target| modules.contains(target));
    }
    Some(Crate {
        name: dir.file_name()?.to_string_lossy().into_owned(),
        lines,
        edges,
    })
}

fn all_crates() -> Vec<Crate> {
    let mut crates: Vec<Crate> = std::fs::read_dir(crates_dir())
        .expect("the crates directory")
        .flatten()
        .filter_map(|entry| read_crate(&entry.path()))
        .collect();
    crates.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(crates.len() >= 8, "found only {} crates", crates.len());
    crates
}

/// Strongly connected components (Tarjan), each sorted.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        if let Some(targets) = state.edges.get(node) {
            for target in targets {
                let target = target.as_str();
                if !state.index.contains_key(target) {
                    visit(state, target);
                    let low = state.low[node].min(state.low[target]);
                    state.low.insert(node, low);
                } else if state.on_stack.contains(target) {
                    let low = state.low[node].min(state.index[target]);
                    state.low.insert(node, low);
                }
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.to_owned());
                if top == node {
                    break;
                }
            }
            component.sort();
            state.out.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.out.into_iter().filter(|c| c.len() > 1).collect()
}

#[test]
fn capabilities_import_no_capability_and_not_the_agent() {
    let harness = all_crates()
        .into_iter()
        .find(|c| c.name == "harness")
        .expect("the harness crate");
    let mut offending = Vec::new();
    for capability in CAPABILITIES {
        let Some(targets) = harness.edges.get(*capability) else {
            panic!("capability module `{capability}` not found: update CAPABILITIES");
        };
        for target in targets {
            if CAPABILITIES.contains(&target.as_str()) || ROOT.contains(&target.as_str()) {
                offending.push(format!("{capability} -> {target}"));
            }
        }
    }
    assert!(offending.is_empty(), "imports across the seam: {offending:#?}");
}

#[test]
fn the_seam_and_the_infrastructure_import_no_capability() {
    let harness = all_crates()
        .into_iter()
        .find(|c| c.name == "harness")
        .expect("the harness crate");
    let mut offending = Vec::new();
    for (module, targets) in &harness.edges {
        if CAPABILITIES.contains(&module.as_str()) || ROOT.contains(&module.as_str()) {
            continue;
        }
        for target in targets {
            if CAPABILITIES.contains(&target.as_str()) || ROOT.contains(&target.as_str()) {
                offending.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(offending.is_empty(), "the seam reaches a capability: {offending:#?}");
}

#[test]
fn every_registered_module_is_listed_as_a_capability() {
    let src = crates_dir().join("harness").join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut registering = BTreeSet::new();
    for file in files {
        let text = strip_comments(&std::fs::read_to_string(&file).expect("a source file"));
        if text.contains("const REGISTRATION") {
            let relative = file.strip_prefix(&src).expect("under src");
            let first = relative
                .components()
                .next()
                .expect("a component")
                .as_os_str()
                .to_string_lossy()
                .into_owned();
            registering.insert(first.trim_end_matches(".rs").to_owned());
        }
    }
    let listed: BTreeSet<String> = CAPABILITIES.iter().map(|c| (*c).to_owned()).collect();
    assert_eq!(registering, listed, "modules with a REGISTRATION vs CAPABILITIES");
}

#[test]
fn no_circle_of_more_than_six_modules_in_any_crate() {
    let mut too_big = Vec::new();
    for krate in all_crates() {
        for circle in circles(&krate.edges) {
            if circle.len() > MAX_CIRCLE {
                too_big.push(format!("{}: {}", krate.name, circle.join(" ")));
            }
        }
    }
    assert!(too_big.is_empty(), "circles above {MAX_CIRCLE} modules: {too_big:#?}");
}

#[test]
fn no_crate_above_thirteen_thousand_lines() {
    let big: Vec<String> = all_crates()
        .into_iter()
        .filter(|c| c.lines > MAX_CRATE_LINES)
        .map(|c| format!("{}: {} lines", c.name, c.lines))
        .collect();
    assert!(big.is_empty(), "crates above {MAX_CRATE_LINES} lines: {big:?}");
}

#[test]
fn the_scanner_sees_groups_reexports_and_skips_comments() {
    let code = strip_comments(
        "use crate::{alpha::A, beta, Gamma};\n/// [`crate::delta`]\nlet x = crate::epsilon::f(); // crate::zeta\n/* crate::eta */ harness_crate::theta;",
    );
    assert_eq!(crate_paths(&code), ["alpha", "beta", "Gamma", "epsilon"]);
    let reexports = root_reexports(
        "pub use agent::{HarnessAgent, BuildError};\npub use config::HarnessConfig;\npub use x::Y as Z;",
    );
    assert_eq!(reexports.get("HarnessAgent").map(String::as_str), Some("agent"));
    assert_eq!(reexports.get("HarnessConfig").map(String::as_str), Some("config"));
    assert_eq!(reexports.get("Z").map(String::as_str), Some("x"));
    let mut edges = BTreeMap::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges
            .entry(from.to_owned())
            .or_insert_with(BTreeSet::new)
            .insert(to.to_owned());
    }
    edges.entry("d".to_owned()).or_default();
    assert_eq!(
        circles(&edges),
        vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]
    );
}
