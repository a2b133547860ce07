//! `bench-driver`: runs the W1–W4 workloads of shared/bench/WORKLOADS.md §5 on a real
//! `HarnessAgent` (workspace, file sessions, transcript, every default capability on) with
//! the `lookup` tool, against an OpenAI-compatible base URL, and writes the result JSON.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use anyhow::{Context as _, bail};
use clap::Parser;
use harness::HarnessAgent;
use harness_core::{
    AgentState, JsonSchema, Msg, RuntimeContext, StateKey, StateStore, ToolAnnotations, ToolContext, ToolError,
    ToolOutput, TypedTool, async_trait, typed,
};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const SYSTEM_PROMPT: &str = include_str!("../workload/system_prompt.txt");
const LOOKUP_RESULT: &str = include_str!("../workload/lookup_result.txt");

#[derive(Parser, Debug)]
#[command(name = "bench-driver", about = "Harness driver for the W1–W4 workloads")]
struct Args {
    /// w1 | w2 | w3 | w4
    #[arg(long)]
    workload: String,
    /// OpenAI-compatible base URL, e.g. http://127.0.0.1:8787/v1
    #[arg(long)]
    base_url: String,
    /// Fresh directory for persisted state (the workspace).
    #[arg(long)]
    state_dir: PathBuf,
    /// Where to write the result JSON.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 50)]
    turns: u32,
    #[arg(long, default_value_t = 200)]
    sessions: u32,
    #[arg(long, default_value_t = 5)]
    session_turns: u32,
    #[arg(long, default_value = "100,1000")]
    histories: String,
    #[arg(long, default_value_t = 3)]
    w4_reps: u32,
    /// Keep agent state and the session lease in Redis at this URL (`[state] kind =
    /// "redis"`, a fresh key prefix per run) instead of files in the state dir.
    #[arg(long)]
    state: Option<String>,
    /// Turn subagents off (`[subagents] enabled = false`), for A/B runs measuring what the
    /// capability costs when it is on but unused (it is on by default).
    #[arg(long)]
    no_subagents: bool,
    /// W2 over HTTP: drive a `bench-driver --workload serve` at this URL (e.g.
    /// http://127.0.0.1:8790) through the native API instead of an in-process agent.
    #[arg(long)]
    http: Option<String>,
    /// `--workload serve`: the address to serve the bench agent on (`harness serve`'s
    /// gateway); it stops on SIGTERM or Ctrl-C and then writes the result JSON (peak RSS).
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: String,
    /// Accepted for compatibility; profiling is done with external tools.
    #[arg(long)]
    profile: Option<PathBuf>,
}

/// Arguments of `lookup`.
#[derive(Debug, Deserialize, JsonSchema)]
struct LookupArgs {
    /// The key to look up, e.g. k1.
    #[allow(dead_code)]
    key: String,
}

struct Lookup;

#[async_trait]
impl TypedTool for Lookup {
    const NAME: &'static str = "lookup";
    const DESCRIPTION: &'static str = "Look up the record stored under a key and return it verbatim.";
    type Args = LookupArgs;
    // It only returns a constant record: read-only, so the default permissions run it.
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new().read_only().closed_world();

    async fn call(&self, _args: LookupArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(LOOKUP_RESULT))
    }
}

fn now_ms() -> f64 {
    jiff::Timestamp::now().as_millisecond() as f64
}

/// User + system CPU seconds of this process (all threads).
fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete `rusage` into the pointer it is given, which points
    // to properly sized, writable memory; RUSAGE_SELF is always a valid `who`.
    #[allow(unsafe_code)]
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return 0.0;
        }
        usage.assume_init()
    };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// `VmHWM` of this process, in kB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

fn latency(samples: &[f64]) -> Value {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pick = |q: f64| -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
        sorted[at.min(sorted.len() - 1)]
    };
    let mean = if sorted.is_empty() {
        0.0
    } else {
        sorted.iter().sum::<f64>() / sorted.len() as f64
    };
    json!({"n": sorted.len(), "mean_ms": mean, "p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99), "max_ms": sorted.last().copied().unwrap_or(0.0)})
}

/// The N of a `done N` reply.
fn reply_n(text: &str) -> Option<i64> {
    text.trim()
        .strip_prefix("done ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The `done N` numbers grow by exactly one per turn (a constant offset is allowed).
fn history_ok(replies: &[Option<i64>]) -> bool {
    replies.iter().all(Option::is_some)
        && replies
            .windows(2)
            .all(|w| matches!((w[0], w[1]), (Some(a), Some(b)) if b == a + 1))
}

fn user_message(n: u32) -> String {
    format!("Turn {n}: look up key k{n} and report the value.")
}

async fn build_agent(args: &Args) -> anyhow::Result<HarnessAgent> {
    let config = harness_models::OpenAiConfig::new("mock-model", args.base_url.trim_end_matches('/'))
        .api_key(harness_models::Secret::new("sk-mock-not-a-real-key"));
    let model: Arc<dyn harness_core::ChatModel> =
        Arc::new(harness_models::OpenAiClient::new(config).context("building the OpenAI-compatible client")?);
    // Every default capability stays on (workspace context, file sessions and transcript,
    // memory tools and index, tool-result eviction, file tools) except automatic memory
    // extraction: the workload contract is exactly two model requests per turn, and
    // extraction is an extra model call by design.
    let mut memory = harness_memory::MemoryConfig::default();
    memory.mode = harness_memory::MemoryMode::Off;
    let mut builder = HarnessAgent::builder();
    if let Some(url) = &args.state {
        let config = harness::state::StateConfig {
            kind: harness::state::StateKind::Redis,
            url: Some(url.clone()),
            key_prefix: Some(format!("harness-bench:{}:", state_prefix(&args.state_dir))),
            ..harness::state::StateConfig::default()
        };
        let backend = harness::state::open(&config)
            .await
            .context("opening the Redis state store")?
            .context("a redis state backend")?;
        builder = builder.state_store(backend.store).session_lease(backend.lease);
    }
    if args.no_subagents {
        builder = builder.subagents(harness::subagents::SubagentsConfig {
            enabled: false,
            ..harness::subagents::SubagentsConfig::default()
        });
    }
    Ok(builder
        .memory(memory)
        .workspace(&args.state_dir)
        .name("bench")
        .sys_prompt(SYSTEM_PROMPT)
        .shared_model(model)
        .tool(typed(Lookup))
        .build()?)
}

/// One key prefix per state dir, so every agent of a run shares the Redis state (W4 builds
/// several agents over one workspace) and runs never collide.
fn state_prefix(dir: &std::path::Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn ctx(session: &str) -> RuntimeContext {
    // The driver names every session itself (`w1-session`, `w2-s0001`, `w4-warmup-…`): ASCII
    // letters, digits and `-`, always a valid id.
    #[allow(clippy::panic)]
    let session = harness_core::SessionId::parse(session).unwrap_or_else(|err| panic!("bench session: {err}"));
    RuntimeContext::for_user(harness_core::UserId::from_static("bench")).with_session(session)
}

async fn w1(args: &Args, result: &mut serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let agent = build_agent(args).await?;
    result.insert("rss_after_import_kb".into(), json!(peak_rss_kb()));
    let (mut latencies, mut marks, mut replies) = (Vec::new(), Vec::new(), Vec::new());
    let (cpu0, wall0) = (cpu_seconds(), Instant::now());
    for n in 1..=args.turns {
        let start = (Instant::now(), now_ms());
        let reply = agent.call(user_message(n), ctx("w1-session")).await?;
        latencies.push(start.0.elapsed().as_secs_f64() * 1e3);
        marks.push(json!([start.1, now_ms()]));
        replies.push(reply_n(&reply.text()));
    }
    let (wall, cpu) = (wall0.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
    let turns = f64::from(args.turns.max(1));
    let mean = |xs: &[f64]| {
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    };
    let last5 = &latencies[latencies.len().saturating_sub(5)..];
    for (key, value) in [
        ("turns", json!(args.turns)),
        ("wall_s", json!(wall)),
        ("cpu_s", json!(cpu)),
        ("cpu_ms_per_turn", json!(cpu * 1e3 / turns)),
        ("wall_ms_per_turn", json!(wall * 1e3 / turns)),
        ("turn_latency", latency(&latencies)),
        ("first5_mean_ms", json!(mean(&latencies[..latencies.len().min(5)]))),
        ("last5_mean_ms", json!(mean(last5))),
        ("turn_marks_ms", json!(marks)),
        ("history_ok", json!(history_ok(&replies))),
        ("tool_calls", json!(args.turns)),
    ] {
        result.insert(key.into(), value);
    }
    Ok(())
}

/// Who runs W2's turns: the agent in this process, or a served one over HTTP.
#[derive(Clone)]
enum Target {
    Agent(HarnessAgent),
    Http(reqwest::Client, String),
}

impl Target {
    async fn turn(&self, session: &str, n: u32) -> Result<String, String> {
        match self {
            Self::Agent(agent) => agent
                .call(user_message(n), ctx(session))
                .await
                .map(|reply| reply.text())
                .map_err(|err| harness_core::error_chain(&err)),
            Self::Http(client, url) => {
                let response = client
                    .post(format!("{url}/api/agents/bench/sessions/{session}/messages"))
                    .header(harness_protocol::header::USER_HEADER, "bench")
                    .json(&json!({"message": user_message(n)}))
                    .send()
                    .await
                    .map_err(|err| err.to_string())?;
                let status = response.status();
                let body: Value = response.json().await.map_err(|err| err.to_string())?;
                if !status.is_success() {
                    return Err(format!("{status}: {body}"));
                }
                Ok(body["text"].as_str().unwrap_or_default().to_owned())
            }
        }
    }
}

/// `--workload serve`: the bench agent behind the gateway until SIGTERM or Ctrl-C.
async fn serve(args: &Args, result: &mut serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let agent = build_agent(args).await?;
    let gateway = harness_serve::Gateway::new(vec![agent], harness_serve::ServeOptions::default())?;
    let listener = tokio::net::TcpListener::bind(args.bind.as_str()).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    gateway
        .serve(listener, async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        })
        .await?;
    result.insert("served".into(), json!(true));
    Ok(())
}

async fn w2(args: &Args, result: &mut serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let target = match &args.http {
        Some(url) => Target::Http(reqwest::Client::new(), url.trim_end_matches('/').to_owned()),
        None => Target::Agent(build_agent(args).await?),
    };
    let (cpu0, wall0) = (cpu_seconds(), Instant::now());
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..args.sessions {
        let target = target.clone();
        let turns = args.session_turns;
        tasks.spawn(async move {
            let session = format!("w2-s{s:04}");
            let (mut latencies, mut replies, mut errors) = (Vec::new(), Vec::new(), Vec::new());
            for n in 1..=turns {
                let start = Instant::now();
                match target.turn(&session, n).await {
                    Ok(text) => replies.push(reply_n(&text)),
                    Err(err) => errors.push(format!("{session} turn {n}: {err}")),
                }
                latencies.push(start.elapsed().as_secs_f64() * 1e3);
            }
            (latencies, history_ok(&replies), errors, replies.len())
        });
    }
    let (mut latencies, mut ok, mut errors, mut completed) = (Vec::new(), true, Vec::new(), 0usize);
    while let Some(joined) = tasks.join_next().await {
        let (l, session_ok, e, done) = joined?;
        latencies.extend(l);
        ok &= session_ok;
        errors.extend(e);
        completed += done;
    }
    let (wall, cpu) = (wall0.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
    for (key, value) in [
        ("turns_completed", json!(completed)),
        ("wall_s", json!(wall)),
        ("cpu_s", json!(cpu)),
        ("throughput_turns_per_s", json!(completed as f64 / wall.max(1e-9))),
        ("cpu_ms_per_turn", json!(cpu * 1e3 / (completed.max(1) as f64))),
        ("turn_latency", latency(&latencies)),
        ("history_ok", json!(ok && errors.is_empty())),
        ("n_errors", json!(errors.len())),
        ("errors", json!(errors.iter().take(20).collect::<Vec<_>>())),
        ("tool_calls", json!(completed)),
    ] {
        result.insert(key.into(), value);
    }
    Ok(())
}

async fn w3(args: &Args, t_main: Instant, result: &mut serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let agent = build_agent(args).await?;
    let setup = t_main.elapsed().as_secs_f64();
    let session = format!("w3-{}", std::process::id());
    let reply = agent.call(user_message(1), ctx(&session)).await?;
    result.insert("first_turn_ms".into(), json!(t_main.elapsed().as_secs_f64() * 1e3));
    result.insert("setup_s".into(), json!(setup));
    result.insert("history_ok".into(), json!(reply_n(&reply.text()).is_some()));
    result.insert("tool_calls".into(), json!(1));
    Ok(())
}

/// Writes a session of `history` plain messages in the agent's own persisted format: the
/// transcript and the agent state, through the same store and filesystem the agent uses.
async fn prepopulate(agent: &HarnessAgent, session: &str, history: u32) -> anyhow::Result<()> {
    let mut state = AgentState::default();
    let mut transcript = Vec::new();
    for i in 1..=history / 2 {
        for msg in [
            Msg::user(user_message(i)),
            Msg::assistant(format!("done {i}. {LOOKUP_RESULT}")),
        ] {
            serde_json::to_writer(&mut transcript, &msg)?;
            transcript.push(b'\n');
            state.messages.push(Arc::new(msg));
        }
    }
    state.transcript_offset = transcript.len() as u64;
    let bound = agent.bind(ctx(session))?;
    let call = bound.get::<harness_fs::CallWorkspace>().context("no workspace bound")?;
    let path = harness::session::transcript_path(agent.kernel().name().as_str(), session)?;
    call.user
        .write(&path, &transcript, harness_fs::WriteMode::Overwrite)
        .await?;
    let key: StateKey = agent.kernel().key_for(&bound);
    let store: &Arc<dyn StateStore> = agent.kernel().state_store();
    let version = store.load(&key).await?.map_or(0, |(_, version)| version);
    store.save(&key, &state, version, None).await?;
    Ok(())
}

async fn w4(args: &Args, result: &mut serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let mut histories = Vec::new();
    let mut tool_calls = 0;
    for history in args.histories.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let history: u32 = history
            .parse()
            .with_context(|| format!("--histories: {history:?} is not a number"))?;
        let session = format!("w4-h{history}");
        let started = Instant::now();
        prepopulate(&build_agent(args).await?, &session, history).await?;
        let prepopulate_s = started.elapsed().as_secs_f64();
        let mut reps = Vec::new();
        for rep in 0..args.w4_reps {
            let agent = build_agent(args).await?;
            agent
                .call(user_message(1), ctx(&format!("w4-warmup-{history}-{rep}")))
                .await?;
            let (cpu0, wall0, mark) = (cpu_seconds(), Instant::now(), now_ms());
            let n = history / 2 + 1 + rep;
            let reply = agent.call(user_message(n), ctx(&session)).await?;
            let (wall_ms, cpu_ms) = (wall0.elapsed().as_secs_f64() * 1e3, (cpu_seconds() - cpu0) * 1e3);
            let got = reply_n(&reply.text());
            let expected = i64::from(history / 2 + 1);
            tool_calls += 2;
            reps.push(json!({"wall_ms": wall_ms, "cpu_ms": cpu_ms, "mark_ms": mark, "expected_min_n": expected, "reply_n": got, "ok": got.is_some_and(|g| g >= expected)}));
        }
        let median = |key: &str| {
            let mut xs: Vec<f64> = reps.iter().filter_map(|r| r[key].as_f64()).collect();
            xs.sort_by(f64::total_cmp);
            xs.get(xs.len() / 2).copied().unwrap_or(0.0)
        };
        histories.push(json!({
            "history_messages": history,
            "prepopulate_s": prepopulate_s,
            "wall_ms_median": median("wall_ms"),
            "cpu_ms_median": median("cpu_ms"),
            "state_bytes_on_disk": dir_bytes(&args.state_dir),
            "reps": reps,
        }));
    }
    result.insert("histories".into(), json!(histories));
    result.insert("tool_calls".into(), json!(tool_calls));
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let t_main = Instant::now();
    let t_main_ms = now_ms();
    let args = Args::parse();
    // The standard OTEL_* variables turn span export on (A/B runs of what telemetry costs);
    // without them nothing is installed, as in `harness run`.
    let export = harness_ops::telemetry::resolve(None, &|name| std::env::var(name).ok())?;
    let telemetry = harness_ops::telemetry::install(
        tracing_subscriber::EnvFilter::new("off"),
        harness_ops::LogFormat::Text,
        std::io::sink,
        export.as_ref(),
        false,
    )?;
    std::fs::create_dir_all(&args.state_dir).with_context(|| format!("creating {}", args.state_dir.display()))?;
    // A small blocking pool: file IO is short, and hundreds of blocking threads (each with
    // its own allocator caches) cost memory and context switches for nothing.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(8)
        .enable_all()
        .build()?;
    let mut result = serde_json::Map::new();
    result.insert("peer".into(), json!("harness"));
    result.insert("workload".into(), json!(args.workload));
    result.insert(
        "versions".into(),
        json!({"harness": env!("CARGO_PKG_VERSION"), "rustc": "1.95"}),
    );
    result.insert("t_main_ms".into(), json!(t_main_ms));
    result.insert("import_s".into(), json!(t_main.elapsed().as_secs_f64()));
    runtime.block_on(async {
        match args.workload.as_str() {
            "w1" => w1(&args, &mut result).await,
            "w2" => w2(&args, &mut result).await,
            "w3" => w3(&args, t_main, &mut result).await,
            "w4" => w4(&args, &mut result).await,
            "serve" => serve(&args, &mut result).await,
            other => bail!("unknown workload {other:?}; use w1, w2, w3, w4 or serve"),
        }
    })?;
    result.insert("telemetry".into(), json!(telemetry.exporting()));
    telemetry
        .shutdown(std::time::Duration::from_secs(5))
        .map_err(anyhow::Error::msg)?;
    result.insert("peak_rss_kb".into(), json!(peak_rss_kb()));
    result.insert("state_bytes_on_disk".into(), json!(dir_bytes(&args.state_dir)));
    std::fs::write(&args.out, serde_json::to_vec_pretty(&Value::Object(result))?)
        .with_context(|| format!("writing {}", args.out.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_check_allows_offsets_but_not_gaps() {
        assert!(history_ok(&[Some(2), Some(3), Some(4)]));
        assert!(!history_ok(&[Some(1), Some(3)]));
        assert!(!history_ok(&[Some(1), None]));
        assert_eq!(reply_n("done 17"), Some(17));
        assert_eq!(reply_n("nope"), None);
    }
}
