//! `mock-llm`: the project's fake OpenAI-compatible server, for demos, the README's commands
//! and the benchmarks. Deterministic and stateless: the reply is a function of the request
//! (see `policy`). Serves `POST /v1/chat/completions` (streaming and not, with usage),
//! `GET /v1/models`, `GET /health` and `GET /stats` (request counts, memory requests
//! among them).
//!
//! `--port 0` binds a free port; the bound base URL is always printed on stdout as
//! `mock-llm listening on http://127.0.0.1:PORT/v1`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod policy;
mod script;
mod wire;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use serde_json::{Value, json};
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How the mock answers, for `--help`.
const POLICY: &str = "\
Replies (a pure function of the request, first match wins):
  1. --script rules, in order (see below).
  2. Memory extraction and consolidation requests: one fact per user line, merged into
     MEMORY.md (so `harness memory` commands work offline).
  3. A last user message `/tool NAME {json}` naming an offered tool: a call to that tool with
     those arguments, e.g.  harness run \"/tool read_file {\\\"path\\\": \\\"AGENTS.md\\\"}\"
  4. The --tool tool (default `lookup`) offered: a call to it with {\"key\":\"k<N>\"}.
  5. Otherwise the text `done <N>`, after a user message with what the user said before
     (so a session's history is visible). N = the number of user messages.

--script FILE: JSON {\"rules\": [...]}; each rule is {\"when\": {...}, \"reply\": {...}, \"delay_ms\": MS}.
  when (all optional, all must hold): last_role (user|tool|assistant), last_text_contains,
    any_text_contains, system_contains, tool_offered, n_user, nth (the Nth match, from 1).
  reply: {\"text\": \"...\"} | {\"tool_calls\": [{\"name\": \"T\", \"arguments\": {...}}]}
    | {\"error\": {\"status\": 503}}.
  Memory requests keep rule 2 unless a rule names them with system_contains.
  Example: {\"rules\": [{\"when\": {\"last_role\": \"user\", \"tool_offered\": \"execute\"},
            \"reply\": {\"tool_calls\": [{\"name\": \"execute\", \"arguments\": {\"command\": \"ls\"}}]}}]}

Endpoints: POST /v1/chat/completions (streamed or not), GET /v1/models, /health, /stats.";

/// A deterministic fake OpenAI-compatible LLM server (for demos, tests and benchmarks).
#[derive(Parser, Debug)]
#[command(name = "mock-llm", version, after_long_help = POLICY, after_help = "See --help for the reply policy and the --script format.")]
struct Args {
    /// Port (0 = any free port).
    #[arg(long, env = "MOCK_PORT", default_value_t = 8787)]
    port: u16,
    /// Address to bind (loopback by default).
    #[arg(long, env = "MOCK_HOST", default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Delay before every reply, in milliseconds.
    #[arg(long, env = "MOCK_LATENCY_MS", default_value_t = 0)]
    latency_ms: u64,
    /// Extra delay before replies to memory extraction and consolidation requests, in
    /// milliseconds (a slow memory model).
    #[arg(long, env = "MOCK_MEMORY_LATENCY_MS", default_value_t = 0)]
    memory_latency_ms: u64,
    /// The tool called with `{"key":"k<N>"}` when a request offers it.
    #[arg(long, env = "MOCK_TOOL", default_value = "lookup")]
    tool: String,
    /// Rules answered before the default policy (JSON; see --help).
    #[arg(long, env = "MOCK_SCRIPT")]
    script: Option<std::path::PathBuf>,
    /// Tokio worker threads (1 leaves the other core to the agent under test).
    #[arg(long, env = "MOCK_THREADS", default_value_t = 1)]
    threads: usize,
}

struct Mock {
    tool: String,
    script: Option<script::Script>,
    latency: Duration,
    memory_latency: Duration,
    requests: AtomicU64,
    memory_requests: AtomicU64,
    tool_calls: AtomicU64,
    texts: AtomicU64,
    bad_requests: AtomicU64,
}

async fn completions(State(mock): State<Arc<Mock>>, body: axum::body::Bytes) -> Response {
    let seq = mock.requests.fetch_add(1, Ordering::Relaxed) + 1;
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(value @ Value::Object(_)) => value,
        _ => {
            mock.bad_requests.fetch_add(1, Ordering::Relaxed);
            let error = json!({"error": {"message": "the body is not a JSON object", "type": "invalid_request_error"}});
            return (StatusCode::BAD_REQUEST, axum::Json(error)).into_response();
        }
    };
    let request = policy::Request::from_openai(&parsed);
    let scripted = mock.script.as_ref().and_then(|script| script.answer(&request));
    let (reply, delay) = match scripted {
        Some(script::Scripted::Error(status, body, delay)) => {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return (status, axum::Json(body)).into_response();
        }
        Some(script::Scripted::Reply(reply, delay)) => (reply, delay),
        None => (policy::reply(&request, &mock.tool), None),
    };
    if request.is_memory() {
        mock.memory_requests.fetch_add(1, Ordering::Relaxed);
        if !mock.memory_latency.is_zero() {
            tokio::time::sleep(mock.memory_latency).await;
        }
    }
    match reply {
        policy::Reply::ToolCall { .. } => mock.tool_calls.fetch_add(1, Ordering::Relaxed),
        policy::Reply::Text(_) => mock.texts.fetch_add(1, Ordering::Relaxed),
    };
    let latency = delay.unwrap_or(mock.latency);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let model = parsed.get("model").and_then(Value::as_str).unwrap_or("mock");
    let usage = wire::Usage::of(body.len(), &reply);
    if parsed.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let include_usage = parsed
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let sse = wire::stream(seq, model, &reply, usage, include_usage);
        ([(header::CONTENT_TYPE, "text/event-stream")], sse).into_response()
    } else {
        axum::Json(wire::completion(seq, model, &reply, usage)).into_response()
    }
}

async fn stats(State(mock): State<Arc<Mock>>) -> axum::Json<Value> {
    axum::Json(json!({
        "requests": mock.requests.load(Ordering::Relaxed),
        "memory_requests": mock.memory_requests.load(Ordering::Relaxed),
        "replies": {
            "text": mock.texts.load(Ordering::Relaxed),
            "tool_call": mock.tool_calls.load(Ordering::Relaxed),
            "bad_request": mock.bad_requests.load(Ordering::Relaxed),
        },
    }))
}

async fn models() -> axum::Json<Value> {
    axum::Json(json!({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "harness"}]}))
}

async fn serve(args: Args, script: Option<script::Script>) -> std::io::Result<()> {
    let mock = Arc::new(Mock {
        tool: args.tool,
        script,
        latency: Duration::from_millis(args.latency_ms),
        memory_latency: Duration::from_millis(args.memory_latency_ms),
        requests: AtomicU64::new(0),
        memory_requests: AtomicU64::new(0),
        tool_calls: AtomicU64::new(0),
        texts: AtomicU64::new(0),
        bad_requests: AtomicU64::new(0),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/chat/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/health", get(|| async { "ok" }))
        .route("/stats", get(stats))
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
        .with_state(mock);
    let listener = tokio::net::TcpListener::bind((args.host, args.port)).await?;
    let addr = listener.local_addr()?;
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not stop the server: the address is informative.
    let _ = writeln!(stdout, "mock-llm listening on http://{addr}/v1");
    let _ = stdout.flush();
    drop(stdout);
    axum::serve(listener, app).await
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let script = match args.script.as_deref().map(script::Script::load).transpose() {
        Ok(script) => script,
        Err(err) => {
            eprintln!("error: mock-llm: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build();
    let result = runtime.and_then(|runtime| runtime.block_on(serve(args, script)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: mock-llm: {err}");
            std::process::ExitCode::from(1)
        }
    }
}
