//! Issue 30 through the binary: the `[model] fallback` chain (a provider answering 503, one
//! that cannot be reached, one that rejects the key) and `run --output-schema` (prose first,
//! never compliant, the native field refused), against in-process OpenAI-compatible fakes.

use crate::cli::{harness, text};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};

type Answer = Arc<dyn Fn(&Value) -> (u16, Value) + Send + Sync>;

/// What a fake received: (Authorization header, body) per request.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A fake Chat Completions server on 127.0.0.1 answering every request with `answer`.
struct Fake {
    base: String,
    seen: Seen,
    _runtime: tokio::runtime::Runtime,
}

impl Fake {
    fn start(answer: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static) -> Self {
        async fn completions(
            State((answer, seen)): State<(Answer, Seen)>,
            headers: HeaderMap,
            body: String,
        ) -> (StatusCode, [(&'static str, &'static str); 1], String) {
            let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let auth = headers
                .get("authorization")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let (status, reply) = answer(&body);
            seen.lock().unwrap().push((auth, body));
            (
                StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                reply.to_string(),
            )
        }
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let seen: Seen = Arc::default();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let address = listener.local_addr().unwrap();
        let state: (Answer, Seen) = (Arc::new(answer), Arc::clone(&seen));
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(state);
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self {
            base: format!("http://{address}/v1"),
            seen,
            _runtime: runtime,
        }
    }

    fn seen(&self) -> Vec<(String, Value)> {
        self.seen.lock().unwrap().clone()
    }
}

fn completion(message: Value) -> (u16, Value) {
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    (
        200,
        json!({
            "id": "c1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3}
        }),
    )
}

fn said(text: &str) -> (u16, Value) {
    completion(json!({"role": "assistant", "content": text}))
}

fn error(status: u16, message: &str) -> (u16, Value) {
    (
        status,
        json!({"error": {"message": message, "type": "server_error", "code": null}}),
    )
}

/// The last message's text of a request body.
fn last_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A workspace with `model` as the main model, memory off (no extraction requests), and
/// `model_section` as `[model]`.
fn workspace(model: &str, model_section: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        format!("[agent]\nmodel = \"{model}\"\n[memory]\nenabled = false\n[model]\n{model_section}"),
    )
    .unwrap();
    dir
}

fn run(ws: &Path, env: &[(&str, &str)], args: &[&str]) -> (bool, String, String) {
    let mut command = harness();
    for key in ["DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL"] {
        command.env_remove(key);
    }
    command
        .envs(env.iter().copied())
        .args(["run", "--workspace"])
        .arg(ws)
        .args(args);
    let output = command.output().unwrap();
    let (stdout, stderr) = text(&output);
    (output.status.success(), stdout, stderr)
}

#[test]
fn a_main_provider_answering_503_is_replaced_by_the_fallback_and_stderr_says_so() {
    let main = Fake::start(|_| error(503, "upstream overloaded"));
    let spare = Fake::start(|_| said("answered by the spare"));
    let ws = workspace(
        "openai:main-model",
        "max_retries = 0\nfallback = [\"deepseek:spare-model\"]\n",
    );
    let env = [
        ("OPENAI_API_KEY", "sk-main"),
        ("OPENAI_BASE_URL", main.base.as_str()),
        ("DEEPSEEK_API_KEY", "sk-spare"),
        ("DEEPSEEK_BASE_URL", spare.base.as_str()),
    ];
    let (ok, stdout, stderr) = run(ws.path(), &env, &["--session", "s1", "hello"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), "answered by the spare");
    let line = stderr
        .lines()
        .find(|line| line.contains("falling back"))
        .unwrap_or_else(|| panic!("no fallback line: {stderr}"));
    assert!(
        line.starts_with("model openai:main-model failed (")
            && line.ends_with("; falling back to deepseek:spare-model"),
        "{line}"
    );
    assert!(line.contains("503"), "{line}");
    // Each model got its own preset's key, and only its own.
    assert_eq!(main.seen().len(), 1);
    assert_eq!(main.seen()[0].0, "Bearer sk-main");
    let spare_seen = spare.seen();
    assert_eq!(spare_seen.len(), 1);
    assert_eq!(spare_seen[0].0, "Bearer sk-spare");
    assert_eq!(spare_seen[0].1["model"], "spare-model");
    // One valid turn in the transcript: the user's message and the spare's answer.
    let log = std::fs::read_to_string(ws.path().join("default/agents/harness/sessions/s1.log.jsonl")).unwrap();
    let roles: Vec<String> = log
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["role"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(roles, ["user", "assistant"]);

    // The same in a stream: the switch is a warning event.
    let (ok, stdout, stderr) = run(ws.path(), &env, &["--session", "s2", "--json", "hello"]);
    assert!(ok, "{stderr}");
    let warning = stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|event| event["type"] == "warning")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(warning["code"], "model_fallback", "{warning}");
}

#[test]
fn an_unreachable_provider_moves_on_after_fallback_after_attempts_not_the_retry_budget() {
    let spare = Fake::start(|_| said("spare"));
    // Nothing listens on port 1: every connection is refused at once.
    let ws = workspace(
        "openai:main-model",
        "max_retries = 3\nfallback_after = 1\nfallback = [\"openai-compatible:spare-model@SPARE\"]\n"
            .replace("SPARE", &spare.base)
            .as_str(),
    );
    let env = [
        ("OPENAI_API_KEY", "sk-main"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
    ];
    let (ok, stdout, stderr) = run(ws.path(), &env, &["hello"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), "spare");
    assert!(
        !stderr.contains("retrying the model"),
        "no retry of an unreachable provider: {stderr}"
    );
    assert!(
        stderr.contains("could not reach the provider at http://127.0.0.1:1/v1"),
        "{stderr}"
    );
    assert_eq!(spare.seen().len(), 1);
}

#[test]
fn a_rejected_key_or_a_bad_request_does_not_fall_back() {
    for (status, message) in [(401, "invalid api key"), (400, "messages: bad shape")] {
        let main = Fake::start(move |_| error(status, message));
        let spare = Fake::start(|_| said("never"));
        let ws = workspace(
            "openai:main-model",
            "fallback = [\"openai-compatible:spare-model@SPARE\"]\n"
                .replace("SPARE", &spare.base)
                .as_str(),
        );
        let env = [("OPENAI_API_KEY", "sk-main"), ("OPENAI_BASE_URL", main.base.as_str())];
        let (ok, _, stderr) = run(ws.path(), &env, &["hello"]);
        assert!(!ok, "{status}");
        assert!(stderr.contains(message), "{stderr}");
        assert!(!stderr.contains("falling back"), "{stderr}");
        assert!(spare.seen().is_empty(), "{status}: the spare was asked");
    }
}

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
  "required": ["city", "population"],
  "additionalProperties": false
}"#;

fn schema_file(ws: &Path) -> String {
    let path = ws.join("city.schema.json");
    std::fs::write(&path, SCHEMA).unwrap();
    path.display().to_string()
}

#[test]
fn output_schema_turns_a_model_that_first_answers_prose_into_schema_valid_json() {
    let fake = Fake::start(|body| {
        if last_text(body).contains("did not match the required JSON schema") {
            said("{\"city\": \"Paris\", \"population\": 2100000}")
        } else {
            said("Paris is the capital, with about two million people.")
        }
    });
    let ws = workspace("openai:gpt-4o", "max_retries = 0\n");
    let schema = schema_file(ws.path());
    let env = [("OPENAI_API_KEY", "sk-main"), ("OPENAI_BASE_URL", fake.base.as_str())];
    let (ok, stdout, stderr) = run(ws.path(), &env, &["--output-schema", &schema, "Capital of France?"]);
    assert!(ok, "{stderr}");
    let value: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(value, json!({"city": "Paris", "population": 2_100_000}));
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    // OpenAI is asked natively, on both calls.
    for (_, body) in &seen {
        assert_eq!(body["response_format"]["type"], "json_schema", "{body}");
        assert_eq!(
            body["response_format"]["json_schema"]["schema"]["required"],
            json!(["city", "population"])
        );
    }
}

#[test]
fn output_schema_with_a_model_that_never_complies_is_a_clear_error_and_exit_1() {
    let fake = Fake::start(|_| said("I only ever answer in prose."));
    let ws = workspace("openai:gpt-4o", "max_retries = 0\n");
    let schema = schema_file(ws.path());
    let env = [("OPENAI_API_KEY", "sk-main"), ("OPENAI_BASE_URL", fake.base.as_str())];
    let mut command = harness();
    command.envs(env).args(["run", "--workspace"]).arg(ws.path()).args([
        "--output-schema",
        &schema,
        "Capital of France?",
    ]);
    let output = command.output().unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stdout.trim().is_empty(),
        "no prose is presented as the answer: {stdout}"
    );
    assert!(
        stderr.contains("the model's answer did not match the output schema after 3 attempts")
            && stderr.contains("not valid JSON"),
        "{stderr}"
    );
    assert_eq!(fake.seen().len(), 3, "the answer and two repair asks");
}

#[test]
fn a_provider_refusing_response_format_is_asked_through_the_generate_response_tool() {
    let fake = Fake::start(|body| {
        if body.get("response_format").is_some() {
            return (
                400,
                json!({"error": {"message": "response_format is not supported by this model", "type": "invalid_request_error"}}),
            );
        }
        let offered = body["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|tool| tool["function"]["name"] == "generate_response"));
        if offered {
            completion(json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "generate_response",
                    "arguments": "{\"city\": \"Lyon\", \"population\": 520000}"
                }}]
            }))
        } else {
            said("no tool")
        }
    });
    let ws = workspace("openai:gpt-4o", "max_retries = 0\n");
    let schema = schema_file(ws.path());
    let env = [("OPENAI_API_KEY", "sk-main"), ("OPENAI_BASE_URL", fake.base.as_str())];
    let (ok, stdout, stderr) = run(ws.path(), &env, &["--output-schema", &schema, "Second city?"]);
    assert!(ok, "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(stdout.trim()).unwrap(),
        json!({"city": "Lyon", "population": 520_000})
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].1.get("response_format").is_none());
}

#[test]
fn a_bad_output_schema_file_is_a_usage_error() {
    let ws = workspace("openai:gpt-4o", "");
    let path = ws.path().join("bad.json");
    std::fs::write(&path, "{\"type\": 12}").unwrap();
    let mut command = harness();
    command
        .args(["run", "--workspace"])
        .arg(ws.path())
        .arg("--output-schema")
        .arg(&path)
        .arg("hi");
    let output = command.output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid output schema"), "{stderr}");
}
