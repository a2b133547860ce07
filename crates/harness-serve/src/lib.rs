//! The HTTP gateway of `harness serve`: agents served over an OpenAI-compatible API (`/v1`)
//! and a native session API (`/api`) with resumable Server-Sent Events.
//!
//! Where to start: [`Gateway::new`] takes built [`HarnessAgent`]s (usually from
//! [`harness::WorkspaceLoader`]) and [`ServeOptions`] (from `[serve]` in harness.toml);
//! [`Gateway::router`] is the axum router, and [`Gateway::serve`] runs it on a listener until
//! a shutdown signal, then finishes the running turns and flushes every agent.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use harness_serve::{Gateway, ServeOptions};
//! let env = |key: &str| std::env::var(key).ok();
//! let agent = harness::HarnessAgent::from_workspace("./ws", &env).await?.build()?;
//! let gateway = Gateway::new(vec![agent], ServeOptions::default())?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! gateway.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
//!
//! Layers: `auth` decides the user, `queue` runs each session's messages in arrival order on
//! one worker task per busy session, `feed` buffers a turn's events for any number of readers,
//! `wire` is the event schema clients see, `openai` and `native` are the two route sets.
//!
//! **Architecture invariant:** a turn is owned by its session's worker, never by an HTTP
//! request: a client that disconnects or reads slowly cannot stop, stall or lose a turn.

mod auth;
mod error;
mod feed;
mod native;
mod openai;
mod owners;
mod queue;
mod wire;

pub use auth::USER_HEADER;
pub use wire::{WireEvent, WireKind, WireSource};

use auth::Auth;
use axum::Router;
use axum::http::HeaderMap;
use error::ApiError;
use harness::{HarnessAgent, SessionReader};
use queue::Queues;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The header carrying the session id (request: which session; response: which one ran).
pub const SESSION_HEADER: &str = "x-harness-session";

/// Default `[serve] max_queued_per_session`.
pub const DEFAULT_MAX_QUEUED: usize = 64;

/// Default address when neither `--bind` nor `[serve] bind` is given.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";

/// Events kept per turn for readers that resume (`Last-Event-ID`) or read slowly.
pub const DEFAULT_REPLAY_EVENTS: usize = 4096;

/// How long running turns may take to finish after a shutdown signal, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How the server runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Messages that may wait behind a session's running turn; more are refused with 429.
    pub max_queued_per_session: usize,
    /// `[[serve.keys]]`: SHA-256 hashes of API keys and their users. Empty: no
    /// authentication, the user comes from `X-Harness-User` (loopback binds only).
    pub keys: Vec<harness::ServeKey>,
    /// Events kept per turn for replay.
    pub replay_events: usize,
    /// After a shutdown signal: how long running turns may go on before they are cancelled.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_queued_per_session: DEFAULT_MAX_QUEUED,
            keys: Vec::new(),
            replay_events: DEFAULT_REPLAY_EVENTS,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

impl ServeOptions {
    /// The options `[serve]` describes (defaults for what it leaves out).
    ///
    /// # Errors
    /// [`ServeError::Config`] for `max_queued_per_session = 0`.
    pub fn from_section(section: Option<&harness::ServeSection>) -> Result<Self, ServeError> {
        let mut options = Self::default();
        if let Some(section) = section {
            if let Some(max) = section.max_queued_per_session {
                if max == 0 {
                    return Err(ServeError::Config(
                        "[serve] max_queued_per_session must be at least 1".to_owned(),
                    ));
                }
                options.max_queued_per_session = max;
            }
            options.keys.clone_from(&section.keys);
        }
        Ok(options)
    }
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A `[[serve.keys]]` entry is malformed (`index` is 0-based; the message counts from 1).
    #[error("[[serve.keys]] entry {}: {message}", index + 1)]
    Key {
        /// Which entry.
        index: usize,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The configuration cannot be used.
    #[error("{0}")]
    Config(String),
    /// No API keys and a bind address other people can reach.
    #[error(
        "refusing to listen on {0} without API keys: add [[serve.keys]] (user + sha256 of the key) to harness.toml, or bind a loopback address such as 127.0.0.1:8080"
    )]
    Unauthenticated(SocketAddr),
    /// The listener failed.
    #[error("the server failed")]
    Io(#[source] std::io::Error),
}

/// The web chat page: one file, no build step; it uses the native API (the key it is given is
/// kept in the browser's local storage). It holds no data, so it is served without a key.
async fn chat_page() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("chat.html"))
}

struct Served {
    agent: HarnessAgent,
    reader: SessionReader,
}

struct Inner {
    agents: BTreeMap<String, Served>,
    auth: Auth,
    queues: Arc<Queues>,
    shutdown_grace: Duration,
}

/// The server: agents by name, the per-session queues and the configured keys. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("agents", &self.inner.agents.keys().collect::<Vec<_>>())
            .field("auth", &self.inner.auth)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A server for `agents`, each reachable by its name (`[agent] name`).
    ///
    /// # Errors
    /// [`ServeError::Config`] with no agent or two of one name; [`ServeError::Key`] for a
    /// malformed key entry.
    pub fn new(agents: Vec<HarnessAgent>, options: ServeOptions) -> Result<Self, ServeError> {
        if agents.is_empty() {
            return Err(ServeError::Config("no agent to serve".to_owned()));
        }
        let mut served = BTreeMap::new();
        for agent in agents {
            let name = agent.kernel().name().to_string();
            let workspace = agent.workspace();
            let reader = SessionReader::new(
                Arc::clone(workspace.filesystem()),
                workspace.scope(),
                workspace.agent().clone(),
            );
            if served.insert(name.clone(), Served { agent, reader }).is_some() {
                return Err(ServeError::Config(format!("two agents are named `{name}`")));
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                agents: served,
                auth: Auth::new(&options.keys)?,
                queues: Queues::new(options.max_queued_per_session, options.replay_events),
                shutdown_grace: options.shutdown_grace,
            }),
        })
    }

    /// Whether API keys are configured.
    pub fn authenticates(&self) -> bool {
        self.inner.auth.enabled()
    }

    /// Refuses an address off the loopback interface when no keys are configured.
    ///
    /// # Errors
    /// [`ServeError::Unauthenticated`].
    pub fn check_bind(&self, addr: SocketAddr) -> Result<(), ServeError> {
        if self.authenticates() || addr.ip().is_loopback() {
            Ok(())
        } else {
            Err(ServeError::Unauthenticated(addr))
        }
    }

    /// The routes: the chat page at `/`, `/v1/models`, `/v1/chat/completions` and `/api/...`
    /// (see the README).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", axum::routing::get(chat_page))
            .merge(openai::routes())
            .merge(native::routes())
            .with_state(self.clone())
    }

    /// Serves until `shutdown` resolves, then: stops accepting, ends queued messages with
    /// a `shutting_down` error, lets running turns finish (cancelling them after
    /// [`ServeOptions::shutdown_grace`]; a cancelled turn is still saved), and flushes every
    /// agent's sessions and memory.
    ///
    /// # Errors
    /// [`ServeError::Io`] when the listener fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let stopping = harness_core::CancellationToken::new();
        let signal = stopping.clone();
        let queues = Arc::clone(&self.inner.queues);
        let grace = self.inner.shutdown_grace;
        let signal_task = tokio::spawn(async move {
            shutdown.await;
            tracing::info!(running = queues.busy(), "shutting down: finishing running turns");
            queues.close();
            signal.cancel();
            // Past the grace period running turns are cancelled; they still save.
            tokio::select! {
                () = queues.drained() => {}
                () = tokio::time::sleep(grace) => {
                    tracing::warn!("shutdown grace period over: cancelling running turns");
                    queues.cancel_all();
                }
            }
        });
        let server = axum::serve(listener, self.router()).with_graceful_shutdown({
            let stopping = stopping.clone();
            async move { stopping.cancelled().await }
        });
        let result = server.await.map_err(ServeError::Io);
        // The server returns after the signal, or on an IO error: then stop the rest too.
        if !stopping.is_cancelled() {
            signal_task.abort();
        }
        self.inner.queues.close();
        self.inner.queues.drained().await;
        let _ = signal_task.await;
        for served in self.inner.agents.values() {
            served.agent.shutdown(Duration::from_secs(10)).await;
        }
        result
    }

    fn agent(&self, name: &str) -> Result<&Served, ApiError> {
        self.inner.agents.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.inner.agents.keys().map(String::as_str).collect();
            ApiError::unknown_model(name, &known)
        })
    }

    fn user(&self, headers: &HeaderMap) -> Result<harness_core::UserId, ApiError> {
        self.inner.auth.user(headers)
    }
}
