//! The HTTP leg both clients share: sending a JSON body, turning failures into
//! [`ModelError`]s (through [`classify`](crate::classify())), and turning an SSE body into a
//! [`ModelStream`] with a protocol-specific [`EventDecoder`].

use crate::classify::{Dialect, classify, excerpt};
use crate::sse::{SseEvent, sse_events};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use harness_core::{Block, ModelChunk, ModelError, ModelResponse, ModelStream};
use reqwest::header::HeaderMap;
use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

/// What went wrong on the wire: the source of a [`ModelError::Transient`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The provider answered with a server-side status.
    #[error("provider returned {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The provider's words.
        message: String,
    },
    /// The request could not be sent or its response headers never came.
    #[error("could not reach the provider at {target}")]
    Connect {
        /// The base URL, and where it was set when known.
        target: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// No byte arrived for the idle timeout: the attempt was given up.
    #[error("no answer from the provider at {target} for {}s (the idle timeout)", after.as_secs_f64())]
    Idle {
        /// The base URL, and where it was set when known.
        target: String,
        /// The idle timeout that expired.
        after: Duration,
    },
    /// The connection broke while the response body was being read.
    #[error("the response stream was cut")]
    StreamCut(#[source] reqwest::Error),
    /// The body ended cleanly but before the protocol's end marker.
    #[error("the response stream ended before the response was complete")]
    Incomplete,
}

/// Connect timeout for provider connections.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default idle timeout: the longest silence tolerated while waiting for response
/// headers or between two reads of a body (streams send keep-alives or tokens far more
/// often). `[model] idle_timeout` overrides it.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// A reqwest client with the connect timeout above. Idle timeouts are enforced per request
/// by [`Endpoint`], so one client can serve models with different settings.
pub(crate) fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .user_agent(concat!("harness/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
}

/// `base_url`, plus where it was set (`OPENAI_BASE_URL`, …) when known: the words connection
/// errors use to point at the fix.
pub(crate) fn describe_target(base_url: &str, origin: Option<&str>) -> String {
    match origin {
        Some(origin) => format!("{base_url} ({origin})"),
        None => base_url.to_owned(),
    }
}

/// Largest error body read for classification.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// POSTs `body` and returns the response when its status is a success; otherwise the
/// classified error.
async fn post(endpoint: &Endpoint<'_>, body: Vec<u8>) -> Result<reqwest::Response, ModelError> {
    let url = endpoint.url;
    let send = endpoint
        .http
        .post(url)
        .headers(endpoint.headers.clone())
        .body(body)
        .send();
    let response = tokio::time::timeout(endpoint.idle_timeout, send)
        .await
        .map_err(|_| endpoint.idle_error())?
        .map_err(|err| {
            if err.is_builder() {
                ModelError::InvalidRequest {
                    status: 0,
                    message: format!("cannot build the request to {url}: {err}"),
                }
            } else {
                ModelError::transient(WireError::Connect {
                    target: endpoint.target.to_owned(),
                    source: err,
                })
            }
        })?;
    let dialect = endpoint.dialect;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let headers = response.headers().clone();
    let body = read_capped(response, MAX_ERROR_BODY).await;
    tracing::debug!(
        status = status.as_u16(),
        body_len = body.len(),
        "provider returned an error status"
    );
    Err(classify(dialect, status.as_u16(), &headers, &body))
}

/// Reads at most `max` bytes of an error body; a read failure leaves what was read.
async fn read_capped(response: reqwest::Response, max: usize) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = max.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= max {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Reads a whole (non-streaming) response body; a silence longer than the idle timeout
/// between two reads ends the attempt.
async fn read_body(endpoint: &Endpoint<'_>, response: reqwest::Response) -> Result<Bytes, ModelError> {
    let mut body = Vec::new();
    let mut chunks = idle_bounded(response, endpoint.idle_timeout, endpoint.target.to_owned());
    while let Some(chunk) = chunks.next().await {
        body.extend_from_slice(&chunk.map_err(ModelError::transient)?);
    }
    Ok(Bytes::from(body))
}

/// The body of `response` as chunks, each awaited for at most `idle`: a longer silence
/// yields [`WireError::Idle`] and ends the stream.
fn idle_bounded(response: reqwest::Response, idle: Duration, target: String) -> ByteStream {
    let inner = Box::pin(response.bytes_stream());
    Box::pin(futures::stream::unfold(
        Some((inner, target)),
        move |state| async move {
            let (mut inner, target) = state?;
            match tokio::time::timeout(idle, inner.next()).await {
                Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some((inner, target)))),
                Ok(Some(Err(err))) => Some((Err(WireError::StreamCut(err)), None)),
                Ok(None) => None,
                Err(_) => Some((Err(WireError::Idle { target, after: idle }), None)),
            }
        },
    ))
}

/// Whether a response to a streaming request came back as one JSON document instead of SSE
/// (servers that ignore `stream: true`, proxies that answer errors with 200).
pub(crate) fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// A complete response replayed as chunks, for [`is_json`] answers to streaming requests.
pub(crate) fn replay(response: ModelResponse) -> ModelStream {
    let mut chunks = Vec::new();
    let mut calls = 0;
    for block in response.message.content {
        match block {
            Block::Text { text } => chunks.push(ModelChunk::TextDelta(text)),
            Block::Thinking { thinking, signature } => chunks.push(ModelChunk::ThinkingDelta {
                text: thinking,
                signature,
            }),
            Block::ToolUse { id, name, input } => {
                chunks.push(ModelChunk::ToolCallDelta {
                    index: calls,
                    id: Some(id),
                    name: Some(name),
                    arguments: match input {
                        serde_json::Value::String(raw) => raw,
                        other => other.to_string(),
                    },
                });
                calls += 1;
            }
            _ => {}
        }
    }
    chunks.extend(response.usage.map(ModelChunk::Usage));
    chunks.extend(response.finish_reason.map(ModelChunk::Finish));
    Box::pin(futures::stream::iter(chunks.into_iter().map(Ok)))
}

/// A [`ModelError::Malformed`] for a payload that did not decode.
pub(crate) fn malformed(what: &str, err: &serde_json::Error, payload: &str) -> ModelError {
    ModelError::Malformed {
        detail: format!("{what} is not valid JSON ({err}): {}", excerpt(payload, 200)),
    }
}

/// Turns one protocol's SSE events into chunks.
pub(crate) trait EventDecoder: Send + 'static {
    /// Handles one event, appending chunks to `out`. Returns `true` when the response is
    /// complete (the protocol's end marker).
    fn event(&mut self, event: &SseEvent, out: &mut VecDeque<ModelChunk>) -> Result<bool, ModelError>;

    /// The body ended without the end marker: `Ok` when what arrived is a complete response
    /// anyway (some servers omit the marker), else the error to report.
    fn end_of_body(&mut self) -> Result<(), ModelError>;
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, WireError>> + Send>>;

struct ChunkState<D> {
    events: crate::sse::SseStream<ByteStream>,
    decoder: D,
    pending: VecDeque<ModelChunk>,
    done: bool,
}

/// Where a request goes and how its answers are read: the part of a client that differs
/// between providers.
pub(crate) struct Endpoint<'a> {
    pub(crate) http: &'a reqwest::Client,
    pub(crate) url: &'a str,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) dialect: Dialect,
    /// Decodes a whole (non-streaming) response body.
    pub(crate) decode: fn(&[u8]) -> Result<ModelResponse, ModelError>,
    /// No byte for this long (headers or body) ends the attempt.
    pub(crate) idle_timeout: Duration,
    /// The base URL and where it was set, for connection and idle errors.
    pub(crate) target: &'a str,
}

impl Endpoint<'_> {
    /// Sends `body` and streams the answer: SSE through `D`, or a JSON answer (asked for
    /// with `stream: false`, or sent by a server that ignores streaming) replayed as chunks.
    pub(crate) async fn stream<D: EventDecoder + Default>(&self, body: Vec<u8>) -> Result<ModelStream, ModelError> {
        let response = post(self, body).await?;
        if is_json(&response) {
            return Ok(replay((self.decode)(&read_body(self, response).await?)?));
        }
        Ok(chunk_stream(
            idle_bounded(response, self.idle_timeout, self.target.to_owned()),
            D::default(),
        ))
    }

    /// Sends `body` (a non-streaming request) and decodes the whole answer.
    pub(crate) async fn call(&self, body: Vec<u8>) -> Result<ModelResponse, ModelError> {
        let response = post(self, body).await?;
        (self.decode)(&read_body(self, response).await?)
    }

    fn idle_error(&self) -> ModelError {
        ModelError::transient(WireError::Idle {
            target: self.target.to_owned(),
            after: self.idle_timeout,
        })
    }
}

/// The [`ModelStream`] of a successful streaming response.
fn chunk_stream<D: EventDecoder>(body: ByteStream, decoder: D) -> ModelStream {
    let state = ChunkState {
        events: sse_events(body),
        decoder,
        pending: VecDeque::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(chunk) = state.pending.pop_front() {
                return Some((Ok(chunk), state));
            }
            if state.done {
                return None;
            }
            let failed = match state.events.next().await {
                Some(Ok(event)) => match state.decoder.event(&event, &mut state.pending) {
                    Ok(complete) => {
                        state.done = complete;
                        continue;
                    }
                    Err(err) => err,
                },
                Some(Err(err)) => ModelError::transient(err),
                None => {
                    state.done = true;
                    match state.decoder.end_of_body() {
                        Ok(()) => continue,
                        Err(err) => err,
                    }
                }
            };
            // The stream ends with its first error; chunks of the failing event are dropped.
            state.done = true;
            state.pending.clear();
            return Some((Err(failed), state));
        }
    }))
}
