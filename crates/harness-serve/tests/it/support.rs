//! A served agent on a scripted model, an HTTP client, and an SSE reader.

use async_trait::async_trait;
use futures::StreamExt;
use harness::HarnessAgent;
use harness_core::{ChatModel, ChatRequest, ModelError, ModelStream, Role};
use harness_models::{Reply, ScriptedModel};
use harness_serve::{Gateway, ServeError, ServeOptions};
use std::sync::Arc;
use tokio::sync::{Semaphore, oneshot};

/// The last user message's text in a request.
fn last_user(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.text())
        .unwrap_or_default()
}

/// Replies `turn N: TEXT` (N = user messages in the context, TEXT = the last one). A message
/// containing `tool` first calls `list_files`, then answers `listed`; `spawn:TASK` starts
/// the `researcher` subagent on TASK in the background, `delegate:TASK` waits for it.
fn scripted() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = last_user(request);
        let after_tool = request.messages.last().is_some_and(|m| m.role == Role::Tool);
        // An image in the last message: says where it came from.
        let image = request.messages.last().and_then(|m| {
            m.content.iter().find_map(|block| match block {
                harness_core::Block::Image { source } => Some(source.clone()),
                _ => None,
            })
        });
        if let Some(source) = image {
            let from = match source {
                harness_core::MediaSource::Url { url } => url,
                harness_core::MediaSource::Base64 { media_type, .. } => media_type,
                other => format!("{other:?}"),
            };
            return Reply::text(format!("saw an image ({from}) and: {last}"));
        }
        // Forced to call a tool (`tool_choice` required or named, not the structured output's
        // own tool): calls the first offered one, naming every offered tool in its arguments
        // (`name`/`age` for a schema that has them).
        if request.tool_choice == harness_core::ToolChoice::Required
            && !after_tool
            && let Some(first) = request.tools.first()
            && first.name != "generate_response"
        {
            let names: Vec<&str> = request.tools.iter().map(|tool| tool.name.as_str()).collect();
            let args = if first.input_schema.pointer("/properties/age").is_some() {
                serde_json::json!({"name": "Ann", "age": 3})
            } else {
                serde_json::json!({"city": format!("forced among {}", names.join(","))})
            };
            return Reply::tool_call(&first.name, args);
        }
        if let Some(task) = last.strip_prefix("spawn:")
            && !after_tool
        {
            return Reply::tool_call(
                "agent_spawn",
                serde_json::json!({"agent_id": "researcher", "task": task, "timeout_seconds": 0}),
            );
        }
        if let Some(task) = last.strip_prefix("delegate:")
            && !after_tool
        {
            return Reply::tool_call(
                "agent_spawn",
                serde_json::json!({"agent_id": "researcher", "task": task}),
            );
        }
        // `call:NAME {json}`: calls that tool, then answers `result: <the tool's output>`.
        if let Some(call) = last.strip_prefix("call:") {
            if after_tool {
                let output = request
                    .messages
                    .last()
                    .map(|m| serde_json::to_string(m).unwrap())
                    .unwrap_or_default();
                return Reply::text(format!("result: {output}"));
            }
            let (name, args) = call.split_once(' ').unwrap_or((call, "{}"));
            return Reply::tool_call(name, serde_json::from_str(args).unwrap());
        }
        // `weather:CITY`: calls the client's `get_weather`, then answers with its result.
        if let Some(city) = last.strip_prefix("weather:") {
            if after_tool {
                let output = request
                    .messages
                    .last()
                    .map(|m| serde_json::to_string(m).unwrap())
                    .unwrap_or_default();
                return Reply::text(format!("weather done: {output}"));
            }
            // `weather:?` sends arguments that do not match the schema.
            if city == "?" {
                return Reply::tool_call("get_weather", serde_json::json!({"town": 3}));
            }
            return Reply::tool_call("get_weather", serde_json::json!({"city": city}));
        }
        // `profile`: prose first; asked again, the answer through `generate_response`.
        // `never-profile`: prose every time.
        let asked_again = last.starts_with("Your answer did not match");
        let first_user = request
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.text())
            .unwrap_or_default();
        if asked_again && !first_user.contains("never-profile") {
            return Reply::tool_call("generate_response", serde_json::json!({"name": "Ann", "age": 3}));
        }
        if last.contains("profile") || asked_again {
            return Reply::text("Ann is three years old.");
        }
        // `steps`: text with a tool call, then more text.
        if last == "steps" {
            if after_tool {
                return Reply::text("Found it.");
            }
            let mut reply = Reply::tool_call("list_files", serde_json::json!({"path": "."}));
            reply.text = Some("Let me look.".to_owned());
            return reply;
        }
        if last.contains("tool") && !after_tool {
            return Reply::tool_call("list_files", serde_json::json!({"path": "."}));
        }
        let users = request.messages.iter().filter(|m| m.role == Role::User).count();
        if after_tool {
            return Reply::text(format!("turn {users}: listed"));
        }
        Reply::text(format!("turn {users}: {last}"))
    })
}

/// The scripted model, except that a request whose last user message contains `wait` (or is
/// `hold`, a subagent's task) first waits for a permit of the gate (one per such request).
#[derive(Clone)]
pub struct Gated {
    inner: ScriptedModel,
    pub gate: Arc<Semaphore>,
}

impl Gated {
    /// The same model, reporting that it takes images.
    pub fn with_images(self) -> Self {
        Self {
            inner: self.inner.with_images(true),
            gate: self.gate,
        }
    }
}

/// A gated scripted model with a closed gate.
pub fn gated() -> Gated {
    Gated {
        inner: scripted(),
        gate: Arc::new(Semaphore::new(0)),
    }
}

#[async_trait]
impl ChatModel for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn accepts_images(&self) -> bool {
        self.inner.accepts_images()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        let last = last_user(&request);
        if last.contains("wait") || last == "hold" {
            self.gate.acquire().await.expect("gate open").forget();
        }
        self.inner.stream(request).await
    }
}

pub struct Server {
    pub base: String,
    pub gate: Arc<Semaphore>,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
    _dir: tempfile::TempDir,
}

pub fn agent(dir: &std::path::Path, model: Gated, name: &str) -> HarnessAgent {
    agent_with(dir, model, name, None)
}

/// [`agent`] with a harness.toml text (e.g. permissions that ask).
pub fn agent_with(dir: &std::path::Path, model: Gated, name: &str, config: Option<&str>) -> HarnessAgent {
    let mut memory = harness_memory::MemoryConfig::default();
    memory.enabled = false;
    let mut builder = HarnessAgent::builder()
        .memory(memory)
        .workspace(dir)
        .name(name)
        .model(model)
        .subagent(harness::subagents::SubagentDeclaration::new(
            "researcher",
            "Finds facts",
            "You research.",
        ));
    if let Some(config) = config {
        builder = builder.config(harness::HarnessConfig::parse(config, std::path::Path::new("harness.toml")).unwrap());
    }
    builder.build().unwrap()
}

/// Permissions under which the scripted model's `list_files` call waits for approval.
pub const ASK_LIST: &str = "[permissions]\nask = [\"list_files\"]\n";

impl Server {
    pub async fn start(options: ServeOptions) -> Self {
        Self::start_with(options, None).await
    }

    /// A server whose agent has this harness.toml text.
    pub async fn start_with(options: ServeOptions, config: Option<&str>) -> Self {
        Self::start_built(options, |dir, model| agent_with(dir, model, "helper", config)).await
    }

    /// A server whose agent `build` makes (in a fresh workspace, on the gated model).
    pub async fn start_built(
        options: ServeOptions,
        build: impl FnOnce(&std::path::Path, Gated) -> HarnessAgent,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = gated();
        let gate = Arc::clone(&model.gate);
        let gateway = Gateway::new(vec![build(dir.path(), model)], options).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(gateway.serve(listener, async move {
            let _ = stopped.await;
        }));
        Self {
            base,
            gate,
            client: reqwest::Client::new(),
            stop: Some(stop),
            handle: Some(handle),
            _dir: dir,
        }
    }

    /// The agent's workspace directory.
    pub fn workspace(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.client.post(self.url(path)).json(&body).send().await.unwrap()
    }

    /// Sends a native message to session `session` of `helper`.
    pub async fn send(&self, session: &str, message: &str, stream: bool) -> reqwest::Response {
        self.post(
            &format!("/api/agents/helper/sessions/{session}/messages"),
            serde_json::json!({"message": message, "stream": stream}),
        )
        .await
    }

    /// The user and assistant texts of a session's history.
    pub async fn history(&self, session: &str) -> Vec<(String, String)> {
        let body: serde_json::Value = self
            .get(&format!("/api/agents/helper/sessions/{session}"))
            .await
            .json()
            .await
            .unwrap();
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user" || m["role"] == "assistant")
            .map(|m| {
                let text = m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<String>();
                (m["role"].as_str().unwrap().to_owned(), text)
            })
            .filter(|(_, text)| !text.is_empty())
            .collect()
    }

    /// Sends the shutdown signal and waits for `serve` to return.
    pub fn shutdown(&mut self) -> tokio::task::JoinHandle<Result<(), ServeError>> {
        let _ = self.stop.take().unwrap().send(());
        self.handle.take().unwrap()
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, Default)]
pub struct Sse {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// Reads a response body as SSE, one event at a time.
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Self {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next event (comments skipped), or `None` at the end of the body.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = Sse::default();
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        event.id = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("event:") {
                        event.event = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
                    }
                }
                if data.is_empty() && event.event.is_none() {
                    continue; // keep-alive comment
                }
                event.data = data.join("\n");
                return Some(event);
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }

    /// Every remaining event.
    pub async fn rest(mut self) -> Vec<Sse> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}
