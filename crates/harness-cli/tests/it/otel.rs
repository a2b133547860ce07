//! OpenTelemetry export end to end: `harness run` with the standard `OTEL_*` variables (or
//! `[telemetry]`) sends its GenAI spans over OTLP/HTTP protobuf before it exits; a receiver
//! here decodes them with the official `opentelemetry-proto` types.

use super::cli::{harness, script, text};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An OTLP/HTTP receiver on a free loopback port, keeping every decoded request.
struct Receiver {
    endpoint: String,
    got: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got: Arc<Mutex<Vec<ExportTraceServiceRequest>>> = Arc::default();
        let sink = Arc::clone(&got);
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let sink = Arc::clone(&sink);
                async move {
                    assert_eq!(
                        headers.get("content-type").and_then(|v| v.to_str().ok()),
                        Some("application/x-protobuf")
                    );
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    sink.lock().unwrap().push(request);
                    axum::http::StatusCode::OK
                }
            }),
        );
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self {
            endpoint,
            got,
            _runtime: runtime,
        }
    }

    /// Every received span with its resource's attributes.
    fn spans(&self) -> Vec<(HashMap<String, String>, Span)> {
        let mut out = Vec::new();
        for request in self.got.lock().unwrap().iter() {
            for resource_spans in &request.resource_spans {
                let resource = resource_spans
                    .resource
                    .as_ref()
                    .map(|r| attributes(&r.attributes))
                    .unwrap_or_default();
                for scope in &resource_spans.scope_spans {
                    for span in &scope.spans {
                        out.push((resource.clone(), span.clone()));
                    }
                }
            }
        }
        out
    }
}

fn value(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(list: &[KeyValue]) -> HashMap<String, String> {
    list.iter().map(|kv| (kv.key.clone(), value(&kv.value))).collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    attributes(&span.attributes).remove(key)
}

const SECRET: &str = "sk-otel-test-9f8e7d6c5b4a39281706";

fn workspace(dir: &std::path::Path, toml: &str) -> (std::path::PathBuf, String) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("default")).unwrap();
    std::fs::write(ws.join("harness.toml"), format!("[memory]\nenabled = false\n{toml}")).unwrap();
    std::fs::write(ws.join("default/notes.txt"), "the meeting moved to Tuesday\n").unwrap();
    // Every run plays the whole script: one read that works, one that fails, then the answer.
    let model = script(
        dir,
        &format!(
            r#"{{"replies": [
            {{"tool_calls": [
                {{"name": "read_file", "arguments": {{"path": "notes.txt"}}, "id": "call_ok"}},
                {{"name": "read_file", "arguments": {{"path": "missing-{SECRET}.txt"}}, "id": "call_bad"}}],
             "usage": {{"input_tokens": 120, "output_tokens": 7, "cache_read_tokens": 100}}}},
            {{"text": "The meeting is on Tuesday.", "usage": {{"input_tokens": 150, "output_tokens": 9}}}}]}}"#
        ),
    );
    (ws, model)
}

fn run(ws: &std::path::Path, model: &str, receiver: &Receiver, extra: &[(&str, &str)]) {
    let mut command = harness();
    command
        .args(["run", "--model", model, "--session", "s-otel", "--workspace"])
        .arg(ws)
        .arg("when is the meeting?")
        .env("OPENAI_API_KEY", SECRET)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint);
    for (key, value) in extra {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("Tuesday"), "{stdout}");
    assert!(!stderr.contains("telemetry"), "{stderr}");
}

#[test]
fn run_exports_genai_spans_one_trace_per_turn_before_it_exits() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (ws, model) = workspace(dir.path(), "");
    run(&ws, &model, &receiver, &[]);
    run(&ws, &model, &receiver, &[]);
    // The process flushed before it exited: everything is here already.
    let spans = receiver.spans();
    let agents: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name.starts_with("invoke_agent"))
        .collect();
    assert_eq!(
        agents.len(),
        2,
        "{:?}",
        spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>()
    );
    // One trace per turn, each rooted at its agent span.
    assert_ne!(agents[0].trace_id, agents[1].trace_id);
    for agent in &agents {
        assert!(agent.parent_span_id.is_empty(), "the agent span is the root");
        assert_eq!(agent.name, "invoke_agent harness");
        assert_eq!(attr(agent, "gen_ai.operation.name").as_deref(), Some("invoke_agent"));
        assert_eq!(attr(agent, "gen_ai.agent.name").as_deref(), Some("harness"));
        assert_eq!(attr(agent, "gen_ai.provider.name").as_deref(), Some("scripted"));
        assert_eq!(attr(agent, "gen_ai.conversation.id").as_deref(), Some("s-otel"));
        assert_eq!(attr(agent, "gen_ai.usage.input_tokens").as_deref(), Some("270"));
        assert_eq!(attr(agent, "gen_ai.usage.output_tokens").as_deref(), Some("16"));
        // Content is off by default.
        assert_eq!(attr(agent, "gen_ai.output.messages"), None);
        let in_trace: Vec<&Span> = spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s.trace_id == agent.trace_id)
            .collect();
        let chats: Vec<&&Span> = in_trace.iter().filter(|s| s.name.starts_with("chat ")).collect();
        assert_eq!(chats.len(), 2);
        for chat in &chats {
            assert_eq!(chat.parent_span_id, agent.span_id, "chat is a child of invoke_agent");
            let model_name = attr(chat, "gen_ai.request.model").unwrap();
            assert_eq!(chat.name, format!("chat {model_name}"));
            assert_eq!(
                attr(chat, "gen_ai.response.model").as_deref(),
                Some(model_name.as_str())
            );
            assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
            assert_eq!(attr(chat, "gen_ai.provider.name").as_deref(), Some("scripted"));
            assert_eq!(attr(chat, "gen_ai.conversation.id").as_deref(), Some("s-otel"));
            // SpanKind CLIENT = 3.
            assert_eq!(chat.kind, 3);
        }
        let first = chats
            .iter()
            .find(|c| attr(c, "gen_ai.usage.input_tokens").as_deref() == Some("120"));
        let first = first.unwrap_or_else(|| panic!("the first call's usage"));
        assert_eq!(attr(first, "gen_ai.usage.output_tokens").as_deref(), Some("7"));
        assert_eq!(
            attr(first, "gen_ai.usage.cache_read.input_tokens").as_deref(),
            Some("100")
        );
        let tools: Vec<&&Span> = in_trace.iter().filter(|s| s.name.starts_with("execute_tool")).collect();
        assert_eq!(tools.len(), 2);
        for tool in &tools {
            assert_eq!(tool.name, "execute_tool read_file");
            assert_eq!(
                tool.parent_span_id, agent.span_id,
                "tool calls are children of invoke_agent"
            );
            assert_eq!(attr(tool, "gen_ai.tool.name").as_deref(), Some("read_file"));
            assert_eq!(attr(tool, "gen_ai.operation.name").as_deref(), Some("execute_tool"));
            assert_eq!(attr(tool, "gen_ai.tool.call.arguments"), None, "content is opt-in");
        }
        let by_id = |id: &str| {
            tools
                .iter()
                .find(|t| attr(t, "gen_ai.tool.call.id").as_deref() == Some(id))
                .unwrap_or_else(|| panic!("{id}"))
        };
        assert_eq!(attr(by_id("call_ok"), "error.type"), None);
        assert_eq!(attr(by_id("call_bad"), "error.type").as_deref(), Some("tool_error"));
        // Status code ERROR = 2.
        assert_eq!(by_id("call_bad").status.as_ref().map(|s| s.code), Some(2));
    }
    for (resource, _) in &spans {
        assert_eq!(resource.get("service.name").map(String::as_str), Some("harness"));
    }
}

#[test]
fn service_name_resource_attributes_and_opt_in_content_through_the_redactor() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (ws, model) = workspace(
        dir.path(),
        "[telemetry]\ncapture_content = true\nservice_name = \"from-config\"\n",
    );
    run(
        &ws,
        &model,
        &receiver,
        &[
            ("OTEL_SERVICE_NAME", "ops-test"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,team=ops"),
        ],
    );
    let spans = receiver.spans();
    assert!(!spans.is_empty());
    for (resource, _) in &spans {
        assert_eq!(resource.get("service.name").map(String::as_str), Some("ops-test"));
        assert_eq!(resource.get("deployment.environment").map(String::as_str), Some("ci"));
        assert_eq!(resource.get("team").map(String::as_str), Some("ops"));
    }
    let bad = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| attr(s, "gen_ai.tool.call.id").as_deref() == Some("call_bad"))
        .unwrap();
    let arguments = attr(bad, "gen_ai.tool.call.arguments").unwrap();
    assert!(arguments.contains("missing-"), "{arguments}");
    assert!(!arguments.contains(SECRET) && arguments.contains("***"), "{arguments}");
    let result = attr(bad, "gen_ai.tool.call.result").unwrap();
    assert!(!result.contains(SECRET), "{result}");
    let agent = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name.starts_with("invoke_agent"))
        .unwrap();
    assert_eq!(
        attr(agent, "gen_ai.output.messages").as_deref(),
        Some("The meeting is on Tuesday.")
    );
    // No span anywhere carries the secret.
    for (_, span) in &spans {
        for (key, value) in attributes(&span.attributes) {
            assert!(!value.contains(SECRET), "{key} = {value}");
        }
    }
}

#[test]
fn telemetry_section_alone_turns_export_on_and_grpc_is_refused_with_the_fix() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (ws, model) = workspace(
        dir.path(),
        &format!("[telemetry]\nendpoint = \"{}\"\n", receiver.endpoint),
    );
    let output = harness()
        .args(["run", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("hi")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(receiver.spans().iter().any(|(_, s)| s.name == "invoke_agent harness"));

    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(&ws)
        .arg("hi")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("use `http/protobuf`"), "{stderr}");

    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(&ws)
        .arg("hi")
        .env("HARNESS_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("use `text` or `json`"), "{stderr}");
}

#[test]
fn json_logs_carry_the_trace_and_span_ids_of_the_exported_spans() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (ws, model) = workspace(dir.path(), "");
    let output = harness()
        .args(["run", "--model", &model, "--session", "s-log", "--workspace"])
        .arg(&ws)
        .arg("when is the meeting?")
        .env("HARNESS_LOG_FORMAT", "json")
        .env("HARNESS_LOG", "harness_core=debug")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect();
    let in_span: Vec<&serde_json::Value> = lines.iter().filter(|l| l.get("trace_id").is_some()).collect();
    assert!(!in_span.is_empty(), "{stderr}");
    let spans = receiver.spans();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for line in in_span {
        let trace = line["trace_id"].as_str().unwrap();
        let span = line["span_id"].as_str().unwrap();
        assert!(
            spans
                .iter()
                .any(|(_, s)| hex(&s.trace_id) == trace && hex(&s.span_id) == span),
            "{line} joins an exported span"
        );
        assert!(line["level"].is_string() && line["target"].is_string() && line["message"].is_string());
    }
}

/// A remote subagent's turn joins the parent's trace (W3C `traceparent`): the parent's
/// `harness run` spawns a subagent declared with the `url` of a `harness serve`; both export
/// to one receiver, and the served turn's `serve_turn` span is a child of the parent's
/// `execute_tool agent_spawn` span, with the served agent's spans below it in the same trace.
#[test]
fn a_remote_subagents_spans_join_the_parents_trace() {
    use std::io::BufRead as _;
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let rules = serde_json::json!([
        {"when": {"last_role": "user", "last_text_contains": "delegate"},
         "reply": {"tool_calls": [{"name": "agent_spawn",
            "arguments": {"agent_id": "far", "task": "level 1", "timeout_seconds": 120}}]}},
        {"when": {"last_role": "user", "last_text_contains": "level 1"}, "reply": {"text": "REMOTE-ANSWER-5"}},
        {"when": {"last_role": "tool", "last_text_contains": "REMOTE-ANSWER-5"},
         "reply": {"text": "relayed REMOTE-ANSWER-5"}},
        {"when": {"last_role": "tool"}, "reply": {"text": "no answer"}}
    ]);
    let rules_file = dir.path().join("rules.json");
    std::fs::write(&rules_file, rules.to_string()).unwrap();
    let model = super::serve::MockLlm::start(&rules_file);
    let served = dir.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::write(served.join("harness.toml"), "[memory]\nenabled = false\n").unwrap();
    let mut serve = harness()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &model.base)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_SERVICE_NAME", "served")
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "openai:fake",
            "--workspace",
        ])
        .arg(&served)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(serve.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("harness serve exited before listening").unwrap();
        if let Some(url) = line.strip_prefix("listening on ") {
            break url.to_owned();
        }
    };
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    let parent = dir.path().join("parent");
    std::fs::create_dir_all(parent.join("subagents")).unwrap();
    // The operator allows the remote spawn (it asks by default).
    std::fs::write(
        parent.join("harness.toml"),
        "[memory]\nenabled = false\n\n[permissions]\nallow = [\"agent_spawn\"]\n",
    )
    .unwrap();
    std::fs::write(
        parent.join("subagents/far.md"),
        format!("---\ndescription: A helper on another server\nurl: {url}\nagent: harness\n---\nHelp.\n"),
    )
    .unwrap();
    let output = harness()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &model.base)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_SERVICE_NAME", "parent")
        .args(["run", "--model", "openai:fake", "--workspace"])
        .arg(&parent)
        .arg("delegate this")
        .output()
        .unwrap();
    // SIGTERM: the server shuts down and flushes its spans.
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    serve.wait().unwrap();
    let serve_log = drain.join().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(
        output.status.success(),
        "{:?}\n{stdout}\n{stderr}\n{serve_log}",
        output.status
    );
    assert!(
        stdout.contains("relayed REMOTE-ANSWER-5"),
        "{stdout}\n{stderr}\n{serve_log}"
    );
    let spans = receiver.spans();
    let of = |service: &str, name: &str| -> Vec<Span> {
        spans
            .iter()
            .filter(|(resource, span)| {
                resource.get("service.name").map(String::as_str) == Some(service) && span.name == name
            })
            .map(|(_, span)| span.clone())
            .collect()
    };
    let names: Vec<String> = spans
        .iter()
        .map(|(resource, span)| {
            format!(
                "{}:{}",
                resource.get("service.name").cloned().unwrap_or_default(),
                span.name
            )
        })
        .collect();
    let spawn = of("parent", "execute_tool agent_spawn");
    assert_eq!(spawn.len(), 1, "{names:?}");
    let turn = of("served", "serve_turn");
    assert_eq!(turn.len(), 1, "{names:?}");
    assert_eq!(
        turn[0].trace_id, spawn[0].trace_id,
        "the served turn is in the parent's trace"
    );
    assert_eq!(turn[0].parent_span_id, spawn[0].span_id, "below the spawning tool call");
    let agent = of("served", "invoke_agent harness");
    assert_eq!(agent.len(), 1, "{names:?}");
    assert_eq!(agent[0].trace_id, spawn[0].trace_id);
    assert_eq!(agent[0].parent_span_id, turn[0].span_id);
    let chats: Vec<Span> = spans
        .iter()
        .filter(|(resource, span)| {
            resource.get("service.name").map(String::as_str) == Some("served") && span.name.starts_with("chat ")
        })
        .map(|(_, span)| span.clone())
        .collect();
    assert!(
        !chats.is_empty() && chats.iter().all(|chat| chat.trace_id == spawn[0].trace_id),
        "{names:?}"
    );
}
