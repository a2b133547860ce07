//! An in-process HTTP server on 127.0.0.1:0 that replays scripted responses and records every
//! request it receives.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// One scripted response.
#[derive(Debug, Clone)]
pub enum Mock {
    /// `200 text/event-stream`, the body sent in `pieces` (separate writes). With `cut`, the
    /// connection is aborted after the last piece instead of closed cleanly.
    Sse { pieces: Vec<Vec<u8>>, cut: bool },
    /// Any status with a body and headers.
    Raw {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
}

impl Mock {
    /// An SSE body from events, split into `piece`-byte writes (so lines straddle writes).
    pub fn sse(events: &[String], piece: usize) -> Self {
        let body = events.concat().into_bytes();
        Self::Sse {
            pieces: body.chunks(piece.max(1)).map(<[u8]>::to_vec).collect(),
            cut: false,
        }
    }

    /// The same SSE body, then an aborted connection.
    pub fn sse_cut(events: &[String]) -> Self {
        Self::Sse {
            pieces: vec![events.concat().into_bytes()],
            cut: true,
        }
    }

    /// A JSON (or any text) body with a status.
    pub fn status(status: u16, body: impl Into<String>) -> Self {
        Self::Raw {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: body.into(),
        }
    }

    /// The same response with one more header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        if let Self::Raw { headers, .. } = &mut self {
            headers.push((name, value.into()));
        }
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    /// The query string (empty when there is none).
    pub query: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct State {
    mocks: Mutex<VecDeque<Mock>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The running server. Dropping it stops serving (the task is aborted).
pub struct Server {
    pub base: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Server {
    /// Starts a server that answers requests with `mocks`, in order.
    pub async fn start(mocks: Vec<Mock>) -> Self {
        let state = Arc::new(State {
            mocks: Mutex::new(mocks.into()),
            requests: Mutex::default(),
        });
        let shared = Arc::clone(&state);
        let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = Arc::clone(&shared);
            async move { respond(&state, uri, headers, body) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base: format!("http://{addr}"),
            state,
            task,
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state.requests).clone()
    }

    /// The single request received (fails the test if there were more or fewer).
    pub fn only_request(&self) -> Recorded {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "expected exactly one request");
        requests.into_iter().next().unwrap_or_else(|| unreachable!())
    }
}

fn respond(state: &State, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(&state.requests).push(Recorded {
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        headers,
        body,
    });
    let mock = lock(&state.mocks).pop_front();
    let build = Response::builder();
    let response = match mock {
        None => build
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("no mock response left")),
        Some(Mock::Raw { status, headers, body }) => {
            let mut build = build.status(status);
            for (name, value) in headers {
                build = build.header(name, value);
            }
            build.body(Body::from(body))
        }
        Some(Mock::Sse { pieces, cut }) => {
            let data = futures::stream::iter(pieces.into_iter().map(|p| Ok::<_, std::io::Error>(Bytes::from(p))));
            // Yielding once makes hyper flush what was written before the connection is
            // aborted, so the client sees a cut inside the body, not a failed request.
            let cut = futures::stream::iter(cut.then_some(())).then(|()| async {
                tokio::task::yield_now().await;
                Err(std::io::Error::other("connection dropped by the test server"))
            });
            build
                .status(200)
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(Body::from_stream(data.chain(cut)))
        }
    };
    response.unwrap_or_else(|e| panic!("response: {e}"))
}
