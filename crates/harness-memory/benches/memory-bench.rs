//! memory-bench: `memory_search` latency over 100,000 indexed lines, and indexing throughput.
//!
//! Run in release mode: `cargo bench -p harness-memory --bench memory-bench`
//! (`-- --lines N` to change the corpus size). Prints median and p90 per query class.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    dead_code
)]

#[path = "../tests/it/support.rs"]
mod support;

use harness_core::{EventSink, ToolContext};
use harness_memory::{MemoryConfig, NamespaceKey};
use harness_models::ScriptedModel;
use std::time::{Duration, Instant};
use support::{MemFs, ctx, dyn_fs};

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ren", "tas", "vo", "quel", "dar", "ni", "sto", "bra", "el", "fin", "gor", "hu", "jax", "ul",
    "pre", "zen", "wy", "cor", "tri", "mon", "sal",
];
const CJK: &str = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严龙飞";

fn word(rng: &mut Rng) -> String {
    let parts = 2 + rng.below(2);
    (0..parts).map(|_| SYLLABLES[rng.below(SYLLABLES.len())]).collect()
}

fn cjk_text(rng: &mut Rng, cjk: &[char], len: usize) -> String {
    (0..len).map(|_| cjk[rng.below(cjk.len())]).collect()
}

/// A piece of `len` characters of a random indexed CJK line (so the query has hits).
fn cjk_piece(rng: &mut Rng, lines: &[Vec<char>], len: usize) -> String {
    let line = &lines[rng.below(lines.len())];
    let start = rng.below(line.len() - len + 1);
    line[start..start + len].iter().collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

fn main() {
    let mut lines_total = 100_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--lines" {
            lines_total = args.next().and_then(|n| n.parse().ok()).unwrap_or(lines_total);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(lines_total));
}

async fn run(lines_total: usize) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let cjk: Vec<char> = CJK.chars().collect();
    let vocabulary: Vec<String> = (0..5000).map(|_| word(&mut rng)).collect();

    // 100 daily logs of lines_total/100 lines; one in ten lines is Chinese.
    let fs = MemFs::new();
    let files = 100usize;
    let per_file = lines_total.div_ceil(files);
    let mut bytes = 0usize;
    let mut written = 0usize;
    let mut cjk_lines: Vec<Vec<char>> = Vec::new();
    for day in 0..files {
        let mut text = String::new();
        for line in 0..per_file {
            if written == lines_total {
                break;
            }
            if rng.below(10) == 0 {
                let len = 8 + rng.below(12);
                let sentence = cjk_text(&mut rng, &cjk, len);
                if cjk_lines.len() < 1000 {
                    cjk_lines.push(sentence.chars().collect());
                }
                text.push_str(&format!(
                    "- 用户{sentence} <!-- session=s{day} at=2026-01-01T00:00:00Z -->\n"
                ));
            } else {
                let words: Vec<&str> = (0..6 + rng.below(8))
                    .map(|_| vocabulary[rng.below(vocabulary.len())].as_str())
                    .collect();
                text.push_str(&format!(
                    "- The user mentioned {} (note {line}). <!-- session=s{day} at=2026-01-01T00:00:00Z -->\n",
                    words.join(" ")
                ));
            }
            written += 1;
        }
        bytes += text.len();
        let date = jiff::civil::date(2025, 1, 1) + jiff::Span::new().days(i64::try_from(day).unwrap_or(0));
        fs.put(&format!("memory/{date}.md"), &text);
    }
    fs.put("MEMORY.md", "## About\n- The user is benchmarking memory.\n");

    let dir = tempfile::tempdir().expect("temp dir");
    let memory = harness_memory::Memory::new(
        MemoryConfig::default(),
        std::sync::Arc::new(ScriptedModel::new()),
        dir.path().join("index"),
    );
    let key = NamespaceKey::new("bench");

    let started = Instant::now();
    let problems = memory.refresh_index(dyn_fs(&fs), &key).await;
    let indexing = started.elapsed();
    assert!(problems.is_empty(), "{problems:?}");
    let db_size: u64 = std::fs::read_dir(dir.path().join("index"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    println!(
        "indexed {written} lines ({:.1} MB) in {} files: {:.2} s = {:.0} lines/s, {:.1} MB/s; database {:.1} MB",
        bytes as f64 / 1e6,
        files + 1,
        indexing.as_secs_f64(),
        written as f64 / indexing.as_secs_f64(),
        bytes as f64 / 1e6 / indexing.as_secs_f64(),
        db_size as f64 / 1e6
    );

    // Let every file leave the 2 s "racy mtime" window, then re-check once, so that the
    // measured searches see the steady state (no file re-read).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    memory.refresh_index(dyn_fs(&fs), &key).await;
    // Appending one line to one file: the refresh indexes only that line.
    let file = "memory/2025-01-01.md";
    let text = fs.text(file).unwrap_or_default();
    fs.put(file, &format!("{text}- The user appended a line about zebras.\n"));
    let started = Instant::now();
    memory.refresh_index(dyn_fs(&fs), &key).await;
    println!(
        "refresh after a one-line append: {:.2} ms",
        started.elapsed().as_secs_f64() * 1e3
    );

    // And let the appended file leave the window too.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    memory.refresh_index(dyn_fs(&fs), &key).await;

    let stats = memory.stats().index;
    println!("index work so far: {stats:?}");

    let tool = memory
        .tools()
        .into_iter()
        .find(|tool| tool.spec().name == "memory_search")
        .expect("memory_search");
    let context = ToolContext {
        runtime: ctx("bench", "s1", &fs),
        call_id: "c1".into(),
        events: EventSink::disabled(),
        session: harness_core::SessionState::default(),
    };

    let iterations = 500;
    let classes: Vec<(&str, Vec<String>)> = vec![
        (
            "one word (3+ chars)",
            (0..iterations)
                .map(|_| vocabulary[rng.below(vocabulary.len())].clone())
                .collect(),
        ),
        (
            "two words",
            (0..iterations)
                .map(|_| {
                    format!(
                        "{} {}",
                        vocabulary[rng.below(vocabulary.len())],
                        vocabulary[rng.below(vocabulary.len())]
                    )
                })
                .collect(),
        ),
        (
            "CJK, 2 chars",
            (0..iterations).map(|_| cjk_piece(&mut rng, &cjk_lines, 2)).collect(),
        ),
        (
            "CJK, 3 chars",
            (0..iterations).map(|_| cjk_piece(&mut rng, &cjk_lines, 3)).collect(),
        ),
        (
            "CJK, 1 char",
            (0..iterations).map(|_| cjk_piece(&mut rng, &cjk_lines, 1)).collect(),
        ),
        (
            "common word (many hits)",
            (0..iterations).map(|_| "mentioned".to_owned()).collect(),
        ),
    ];
    println!("memory_search (tool call, top 10, refresh check included), {iterations} queries per class:");
    let mut all = Vec::new();
    for (name, queries) in classes {
        let mut times = Vec::with_capacity(queries.len());
        let mut total_hits = 0usize;
        for query in &queries {
            let started = Instant::now();
            let output = tool
                .call(serde_json::json!({"query": query}), &context)
                .await
                .expect("search");
            times.push(started.elapsed());
            let text = output.text_content();
            assert!(!text.contains("Note:"), "unexpected note for {query}: {text}");
            total_hits += text.lines().filter(|line| line.starts_with("Source:")).count();
        }
        times.sort();
        println!(
            "  {name:<26} p50 {:>6.2} ms  p90 {:>6.2} ms  max {:>6.2} ms  (avg {:.1} hits)",
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.9).as_secs_f64() * 1e3,
            times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
            total_hits as f64 / queries.len() as f64
        );
        all.extend(times);
    }
    all.sort();
    println!(
        "  {:<26} p50 {:>6.2} ms  p90 {:>6.2} ms",
        "all classes",
        percentile(&all, 0.5).as_secs_f64() * 1e3,
        percentile(&all, 0.9).as_secs_f64() * 1e3
    );
    let stats_after = memory.stats().index;
    println!(
        "files re-read during the searches: {}",
        (stats_after.files_reindexed + stats_after.files_appended + stats_after.files_unchanged)
            - (stats.files_reindexed + stats.files_appended + stats.files_unchanged)
    );
    memory.shutdown(Duration::from_secs(5)).await;
}
