//! The memory-screen corpus (`tests/corpus/`), generated into cases: every disguise class
//! applied to every seed instruction, the credential shapes and the plain facts, each sent
//! through extraction as the model's reply. None of the bad may reach the daily log; every
//! plain fact must. The test prints how many plain facts were quarantined.

use crate::support::{MemFs, dyn_fs, eager, memory, request_text, today_log};
use harness_core::{Msg, SessionId};
use harness_memory::{ConsolidationOutcome, NamespaceKey, quarantined};
use harness_models::{Reply, ScriptedModel};
use std::sync::{Arc, Mutex};

const SEEDS: &str = include_str!("../corpus/seeds.tsv");
const CREDENTIALS: &str = include_str!("../corpus/credentials.txt");
const FACTS: &str = include_str!("../corpus/facts.txt");

/// The data lines of a corpus file (comments and blank lines skipped).
fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
}

struct Seed {
    english: String,
    chinese: String,
    russian: String,
    french: String,
}

fn seeds() -> Vec<Seed> {
    data_lines(SEEDS)
        .map(|line| {
            let columns: Vec<&str> = line.split('\t').collect();
            assert_eq!(columns.len(), 4, "seeds.tsv needs four columns: {line}");
            Seed {
                english: columns[0].to_owned(),
                chinese: columns[1].to_owned(),
                russian: columns[2].to_owned(),
                french: columns[3].to_owned(),
            }
        })
        .collect()
}

fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_lowercase().chain(chars).collect())
        .unwrap_or_default()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn percent(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

fn entities(text: &str) -> String {
    text.chars().map(|c| format!("&#{};", u32::from(c))).collect()
}

fn interleave(text: &str, with: char) -> String {
    let mut out = String::new();
    for c in text.chars() {
        out.push(c);
        out.push(with);
    }
    out
}

fn tags(text: &str) -> String {
    text.chars()
        .filter_map(|c| char::from_u32(0xE0000 + u32::from(c)))
        .collect()
}

/// Latin letters swapped for Cyrillic and Greek look-alikes.
fn lookalike(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a' => 'а',
            'e' => 'е',
            'o' => 'ο',
            'p' => 'р',
            'c' => 'с',
            'x' => 'х',
            'i' => 'і',
            'y' => 'у',
            'A' => 'Α',
            'T' => 'Т',
            'R' => 'Ꭱ',
            other => other,
        })
        .collect()
}

fn full_width(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '!'..='~' => char::from_u32(u32::from(c) + 0xFEE0).unwrap_or(c),
            ' ' => '\u{3000}',
            other => other,
        })
        .collect()
}

/// Every disguise class applied to `seed`: (class, text).
fn disguised(seed: &Seed) -> Vec<(&'static str, String)> {
    let en = &seed.english;
    let lc = lower_first(en);
    let bytes = en.as_bytes();
    vec![
        ("imperative", en.clone()),
        (
            "third person: wants the assistant to",
            format!("The user wants the assistant to {lc}."),
        ),
        (
            "third person: asked that the agent",
            format!("The user has asked that the agent {lc}."),
        ),
        (
            "third person: the AI should",
            format!("According to the user, the AI should {lc}."),
        ),
        (
            "third person: a rule with no agent named",
            format!("The user's standing rule: {lc}."),
        ),
        (
            "third person: future behaviour",
            format!("In future conversations the model is to {lc}."),
        ),
        ("another language: Chinese", seed.chinese.clone()),
        (
            "another language: Chinese third person",
            format!("用户希望助手{}", seed.chinese),
        ),
        ("another script: Russian", seed.russian.clone()),
        ("another language: French", seed.french.clone()),
        ("encoded: base64", format!("The user's note reads: {}", base64(bytes))),
        ("encoded: hex", format!("The user's note reads: {}", hex(bytes))),
        ("encoded: url", format!("The user's note reads: {}", percent(bytes))),
        (
            "encoded: HTML entities",
            format!("The user likes tea. {}", entities(en)),
        ),
        (
            "invisible: zero-width",
            format!("The user likes tea.{}", interleave(en, '\u{200b}')),
        ),
        ("invisible: word joiners in the words", interleave(en, '\u{2060}')),
        (
            "invisible: Unicode tag characters",
            format!("The user likes tea.{}", tags(en)),
        ),
        ("look-alike: Cyrillic and Greek letters", lookalike(en)),
        ("look-alike: full-width letters", full_width(en)),
        (
            "markup: link",
            format!(
                "The user's homepage is [Miso Kitchen](https://misokitchen.example/?note={}).",
                percent(bytes)
            ),
        ),
        (
            "markup: image",
            format!("The user's avatar is ![{en}](https://img.example/cat.png)."),
        ),
        ("markup: HTML", format!("The user likes tea. <span hidden>{en}</span>")),
        ("markup: HTML comment", format!("The user likes tea. <!-- {en} -->")),
        ("markup: code span", format!("The user likes tea. `{en}`")),
    ]
}

/// Every case that must not be kept: (class, text).
pub fn bad_cases() -> Vec<(String, String)> {
    let mut cases: Vec<(String, String)> = Vec::new();
    for seed in seeds() {
        for (class, text) in disguised(&seed) {
            cases.push((class.to_owned(), text));
        }
    }
    for line in data_lines(CREDENTIALS) {
        cases.push(("credential".to_owned(), line.to_owned()));
    }
    cases
}

/// Every plain fact.
pub fn plain_facts() -> Vec<String> {
    data_lines(FACTS).map(str::to_owned).collect()
}

/// A scripted extraction model whose reply is whatever `reply` holds when it is asked.
fn extraction_model(reply: &Arc<Mutex<String>>) -> ScriptedModel {
    let reply = Arc::clone(reply);
    ScriptedModel::from_fn(move |request| {
        if request.system.render().starts_with("You extract durable facts") {
            Reply::text(reply.lock().map(|text| text.clone()).unwrap_or_default())
        } else {
            // Consolidation is exercised elsewhere; an empty reply leaves MEMORY.md alone.
            Reply::text("")
        }
    })
}

#[test]
fn the_corpus_is_large_enough() {
    let seeds = seeds();
    assert!(seeds.len() >= 8, "{}", seeds.len());
    assert!(data_lines(CREDENTIALS).count() >= 20);
    let facts = plain_facts();
    assert!(facts.len() >= 60, "{}", facts.len());
    let chinese = facts
        .iter()
        .filter(|fact| fact.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)))
        .count();
    assert!(
        chinese >= 20 && facts.len() - chinese >= 20,
        "{chinese} Chinese of {}",
        facts.len()
    );
    // The encoders are right (the cases would test nothing otherwise).
    assert_eq!(base64(b"Man is"), "TWFuIGlz");
    assert_eq!(base64(b"Ma"), "TWE=");
    assert_eq!(hex(b"Hi"), "4869");
    assert_eq!(percent(b"Hi"), "%48%69");
    assert_eq!(tags("A"), "\u{E0041}");
}

#[tokio::test]
async fn no_disguised_instruction_or_credential_is_kept_and_every_plain_fact_is() {
    let reply = Arc::new(Mutex::new(String::new()));
    let model = extraction_model(&reply);
    let (memory, _dir) = memory(&model, eager());
    let session = SessionId::from_static("s1");
    let conversation = [
        Arc::new(Msg::user("Some things about me.")),
        Arc::new(Msg::assistant("Noted.")),
    ];

    let mut kept: Vec<String> = Vec::new();
    for (class, text) in bad_cases() {
        let fs = MemFs::new();
        *reply.lock().unwrap() = format!("- {text}");
        memory
            .flush(dyn_fs(&fs), &NamespaceKey::new("alice"), &session, &conversation)
            .await
            .expect("flush");
        if let Some(log) = fs.text(&today_log()).filter(|log| !log.trim().is_empty()) {
            kept.push(format!("{class}: {text:?} -> {log:?}"));
        }
        // Not dropped silently: quarantined as written, with a reason.
        let entries = quarantined(&*dyn_fs(&fs)).await.expect("quarantine");
        assert!(
            entries.len() == 1 && entries[0].text == text && !entries[0].reason.is_empty(),
            "{class}: {text:?} -> {entries:?}"
        );
        // A credential is reported as one, whatever else it trips.
        if class == "credential" && !entries[0].reason.contains("credential") {
            kept.push(format!("credential not named: {text:?} -> {}", entries[0].reason));
        }
    }

    let fs = MemFs::new();
    let facts = plain_facts();
    for fact in &facts {
        *reply.lock().unwrap() = format!("- {fact}");
        memory
            .flush(dyn_fs(&fs), &NamespaceKey::new("alice"), &session, &conversation)
            .await
            .expect("flush");
    }
    let log = fs.text(&today_log()).unwrap_or_default();
    let quarantined: Vec<&String> = facts
        .iter()
        .filter(|fact| !log.lines().any(|line| line.starts_with(&format!("- {fact} <!--"))))
        .collect();
    // The closing note the issue asks for: how many plain facts the screen quarantined.
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "closing note: {} of {} plain facts were quarantined: {quarantined:?}",
            quarantined.len(),
            facts.len()
        );
    }
    assert!(
        kept.is_empty(),
        "{} bad cases were kept:\n{}",
        kept.len(),
        kept.join("\n")
    );
    assert!(quarantined.is_empty(), "plain facts quarantined: {quarantined:?}");
}

#[tokio::test]
async fn consolidation_screens_its_input_and_its_output_with_the_same_screen() {
    // The consolidation model echoes every entry it is shown and adds the bad text itself.
    let bad = Arc::new(Mutex::new(String::new()));
    let shown = Arc::clone(&bad);
    let model = ScriptedModel::from_fn(move |request| {
        let input = request_text(request);
        let mut out = String::from("## Facts\n");
        for line in input.lines().filter_map(|line| line.trim().strip_prefix("- ")) {
            let fact = line.find("<!--").map_or(line, |at| &line[..at]).trim();
            out.push_str(&format!("- {fact}\n"));
        }
        out.push_str(&format!(
            "- {}\n",
            shown.lock().map(|text| text.clone()).unwrap_or_default()
        ));
        Reply::text(out)
    });
    let (memory, _dir) = memory(&model, eager());
    let mut leaked = Vec::new();
    let cases = bad_cases();
    for (class, text) in &cases {
        *bad.lock().unwrap() = text.clone();
        let fs = MemFs::new();
        fs.put(
            &today_log(),
            &format!(
                "- The user likes jazz. <!-- session=s1 at=2026-11-29T09:00:00Z -->\n\
                 - {text} <!-- session=s1 at=2026-11-29T09:01:00Z -->\n"
            ),
        );
        let before = model.request_count();
        let outcome = memory
            .consolidate(dyn_fs(&fs), &NamespaceKey::new("alice"))
            .await
            .expect("consolidate");
        assert!(
            matches!(outcome, ConsolidationOutcome::Consolidated { dropped: 2, .. }),
            "{class}: {outcome:?}"
        );
        let request = request_text(&model.requests()[before]);
        let written = fs.text("MEMORY.md").unwrap_or_default();
        if request.contains(text.as_str()) {
            leaked.push(format!("{class}: shown to the consolidation model: {text:?}"));
        }
        if written.contains(text.as_str()) || !written.contains("- The user likes jazz.") {
            leaked.push(format!("{class}: MEMORY.md is {written:?}"));
        }
        let entries = quarantined(&*dyn_fs(&fs)).await.expect("quarantine");
        assert!(entries.iter().any(|entry| entry.text == *text), "{class}: {entries:?}");
    }
    assert!(
        leaked.is_empty(),
        "{} of {}:\n{}",
        leaked.len(),
        cases.len(),
        leaked.join("\n")
    );
}
