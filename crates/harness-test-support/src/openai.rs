//! A fake OpenAI-compatible chat-completions server: `POST /v1/chat/completions`, streaming
//! (`"stream": true`, SSE) or not, answering each request with the [`Reply`] a test's closure
//! computes from it and recording every request body.
//!
//! It binds `127.0.0.1:0` itself and serves on a thread of its own, so it works from plain
//! `#[test]`s and from inside a tokio runtime alike; dropping it stops it.

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server answers to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    text: String,
    delay: Duration,
    /// A tool call (name, JSON arguments) instead of text.
    call: Option<(String, String)>,
}

impl Reply {
    /// An assistant message with `text`, answered at once.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            delay: Duration::ZERO,
            call: None,
        }
    }

    /// An assistant message calling the tool `name` with `arguments` (id `call_1`).
    pub fn tool_call(name: &str, arguments: &Value) -> Self {
        Self {
            call: Some((name.to_owned(), arguments.to_string())),
            ..Self::text("")
        }
    }

    /// The same reply, sent only after `delay` (to keep a turn in flight).
    #[must_use]
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// The request bodies the server received, in arrival order.
pub type Seen = Arc<Mutex<Vec<Value>>>;

type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// A running fake server; stopped on drop.
pub struct FakeOpenAi {
    base_url: String,
    seen: Seen,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeOpenAi {
    /// A server answering every request with `text`.
    pub fn replying(text: &str) -> Self {
        let text = text.to_owned();
        Self::start(move |_| Reply::text(text.clone()))
    }

    /// A server answering each request with `respond(request body)`.
    ///
    /// # Panics
    /// When loopback cannot be bound or the server thread cannot start.
    pub fn start(respond: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .unwrap_or_else(|err| panic!("binding 127.0.0.1:0 for the fake OpenAI server: {err}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|err| panic!("the address of a bound listener: {err}"));
        let seen: Seen = Arc::default();
        let state = (Arc::clone(&seen), Arc::new(respond) as Responder);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("fake-openai".to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap_or_else(|err| panic!("a runtime for the fake OpenAI server: {err}"));
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .unwrap_or_else(|err| panic!("handing the listener to tokio: {err}"));
                    let app = Router::new()
                        .route("/v1/chat/completions", post(completions))
                        .with_state(state);
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                // Requests still in flight (a reply waiting out its delay) are abandoned.
                runtime.shutdown_background();
            })
            .unwrap_or_else(|err| panic!("starting the fake OpenAI server thread: {err}"));
        Self {
            base_url: format!("http://{address}/v1"),
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The base URL to give a client (`OPENAI_BASE_URL`): `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The shared record of request bodies.
    pub fn seen(&self) -> Seen {
        Arc::clone(&self.seen)
    }

    /// A copy of the request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.lock().map(|seen| seen.clone()).unwrap_or_default()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn completions(State((seen, respond)): State<(Seen, Responder)>, body: String) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap_or_default();
    let stream = request["stream"].as_bool().unwrap_or(false);
    let reply = respond(&request);
    if let Ok(mut seen) = seen.lock() {
        seen.push(request);
    }
    tokio::time::sleep(reply.delay).await;
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15});
    let calls = reply.call.as_ref().map(|(name, arguments)| {
        json!([{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": name, "arguments": arguments}}])
    });
    let (content_type, body) = if stream {
        let (delta, finish) = match &calls {
            Some(calls) => (json!({"role": "assistant", "tool_calls": calls}), "tool_calls"),
            None => (json!({"role": "assistant", "content": reply.text}), "stop"),
        };
        let chunks = [
            json!({"id": "c1", "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": delta}]}),
            json!({"id": "c1", "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {}, "finish_reason": finish}]}),
            json!({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage}),
        ];
        let frames: String = chunks.iter().map(|chunk| format!("data: {chunk}\n\n")).collect();
        ("text/event-stream", frames + "data: [DONE]\n\n")
    } else {
        let (message, finish) = match &calls {
            Some(calls) => (
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                "tool_calls",
            ),
            None => (json!({"role": "assistant", "content": reply.text}), "stop"),
        };
        let body = json!({"id": "c1", "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage});
        ("application/json", body.to_string())
    };
    let mut response = Response::new(Body::from(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    response
}
