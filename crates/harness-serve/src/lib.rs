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
//! `openai` and `native` are the two route sets. What clients see — the events, the error
//! body, the header names, the native API's bodies — is [`harness_protocol`]'s.
//!
//! **Architecture invariant:** a turn is owned by its session's worker, never by an HTTP
//! request: a client that disconnects or reads slowly cannot stop, stall or lose a turn.

mod auth;
mod control;
mod error;
mod feed;
mod guard;
mod listen;
mod metrics;
mod native;
mod openai;
mod owners;
mod page;
mod queue;
mod responses;
mod section;
mod threads;

pub use guard::MAX_BODY_BYTES;
pub use section::{SECTION, ServeKey, ServeSection, sections};

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

/// Default `[serve] max_queued_per_session`.
pub const DEFAULT_MAX_QUEUED: usize = 64;

/// Default address when neither `--bind` nor `[serve] bind` is given.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";

/// Events kept per turn for readers that resume (`Last-Event-ID`) or read slowly.
pub const DEFAULT_REPLAY_EVENTS: usize = 4096;

/// How long running turns may take to finish after a shutdown signal, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Default `[serve] header_read_timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default `[serve] body_read_timeout`.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Default `[serve] idle_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default `[serve] max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Default `[serve] max_turns`.
pub const DEFAULT_MAX_TURNS: usize = 256;

/// Default `[serve] max_turns_per_user`.
pub const DEFAULT_MAX_TURNS_PER_USER: usize = 32;

/// How the server runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Messages that may wait behind a session's running turn; more are refused with 429.
    pub max_queued_per_session: usize,
    /// `[[serve.keys]]`: SHA-256 hashes of API keys and their users. Empty: no
    /// authentication, the user comes from `X-Harness-User` (loopback binds only).
    pub keys: Vec<ServeKey>,
    /// Events kept per turn for replay.
    pub replay_events: usize,
    /// After a shutdown signal: how long running turns may go on before they are cancelled.
    pub shutdown_grace: Duration,
    /// `[serve] cors_origins`: origins whose pages may call the API.
    pub cors_origins: Vec<String>,
    /// `[serve] allowed_hosts`: more names the `Host` header may carry.
    pub allowed_hosts: Vec<String>,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_read_timeout: Duration,
    /// How long an idle keep-alive connection stays open.
    pub idle_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Turns running or queued at once on the server.
    pub max_turns: usize,
    /// Turns running or queued at once for one user.
    pub max_turns_per_user: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_queued_per_session: DEFAULT_MAX_QUEUED,
            keys: Vec::new(),
            replay_events: DEFAULT_REPLAY_EVENTS,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_turns: DEFAULT_MAX_TURNS,
            max_turns_per_user: DEFAULT_MAX_TURNS_PER_USER,
        }
    }
}

impl ServeOptions {
    /// The options `[serve]` describes (defaults for what it leaves out).
    ///
    /// # Errors
    /// [`ServeError::Config`] for `max_queued_per_session = 0`, a zero timeout or cap, or a
    /// `cors_origins` entry that is not an origin (`scheme://host[:port]`).
    pub fn from_section(section: Option<&ServeSection>) -> Result<Self, ServeError> {
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
            for origin in &section.cors_origins {
                let valid = origin.split_once("://").is_some_and(|(scheme, rest)| {
                    matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')
                });
                if !valid {
                    return Err(ServeError::Config(format!(
                        "[serve] cors_origins: `{origin}` is not an origin; write scheme://host[:port], e.g. \"https://app.example\""
                    )));
                }
            }
            options.cors_origins.clone_from(&section.cors_origins);
            options.allowed_hosts.clone_from(&section.allowed_hosts);
            let positive = |name: &str, value: Option<Duration>, default: Duration| match value {
                Some(value) if value.is_zero() => {
                    Err(ServeError::Config(format!("[serve] {name} must be longer than 0s")))
                }
                Some(value) => Ok(value),
                None => Ok(default),
            };
            options.header_read_timeout = positive(
                "header_read_timeout",
                section.header_read_timeout,
                DEFAULT_HEADER_READ_TIMEOUT,
            )?;
            options.body_read_timeout = positive(
                "body_read_timeout",
                section.body_read_timeout,
                DEFAULT_BODY_READ_TIMEOUT,
            )?;
            options.idle_timeout = positive("idle_timeout", section.idle_timeout, DEFAULT_IDLE_TIMEOUT)?;
            let at_least_one = |name: &str, value: Option<usize>, default: usize| match value {
                Some(0) => Err(ServeError::Config(format!("[serve] {name} must be at least 1"))),
                Some(value) => Ok(value),
                None => Ok(default),
            };
            options.max_connections =
                at_least_one("max_connections", section.max_connections, DEFAULT_MAX_CONNECTIONS)?;
            options.max_turns = at_least_one("max_turns", section.max_turns, DEFAULT_MAX_TURNS)?;
            options.max_turns_per_user = at_least_one(
                "max_turns_per_user",
                section.max_turns_per_user,
                DEFAULT_MAX_TURNS_PER_USER,
            )?;
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

/// Any path no route serves: 404 in the error JSON.
async fn unknown_route(uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::not_found(format!(
        "no route `{}`; the README lists the routes under /v1 and /api",
        uri.path()
    ))
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
    guard: guard::GuardConfig,
    limits: listen::Limits,
    /// The address `serve` listens on (the `Host` check of a keyless server).
    local_addr: std::sync::OnceLock<SocketAddr>,
    /// More gauges for `/metrics`, read at each scrape ([`Gateway::add_gauges`]).
    gauges: std::sync::OnceLock<Arc<dyn harness_ops::metrics::GaugeSource>>,
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
                queues: Queues::new(
                    options.max_queued_per_session,
                    options.replay_events,
                    queue::TurnCaps {
                        server: options.max_turns.max(1),
                        per_user: options.max_turns_per_user.max(1),
                    },
                ),
                shutdown_grace: options.shutdown_grace,
                guard: guard::GuardConfig {
                    cors_origins: options.cors_origins,
                    allowed_hosts: options.allowed_hosts,
                    body_read_timeout: options.body_read_timeout,
                },
                limits: listen::Limits {
                    header_read_timeout: options.header_read_timeout,
                    idle_timeout: options.idle_timeout,
                    max_connections: options.max_connections.max(1),
                },
                local_addr: std::sync::OnceLock::new(),
                gauges: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Adds `source`'s gauges to every `/metrics` rendering (e.g. background tasks by state
    /// from the workspace's task records); only the first source set is used.
    pub fn add_gauges(&self, source: Arc<dyn harness_ops::metrics::GaugeSource>) {
        let _ = self.inner.gauges.set(source);
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

    /// The routes: the chat page at `/`, `/v1/models`, `/v1/chat/completions`,
    /// `/v1/responses` and `/api/...`
    /// (see the README), behind the Host/Origin guard; every error answer is the error JSON.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", axum::routing::get(page::chat_page))
            .route("/metrics", axum::routing::get(metrics::metrics))
            .merge(openai::routes())
            .merge(responses::routes())
            .merge(native::routes())
            .merge(control::routes())
            .fallback(unknown_route)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(self.clone(), guard::guard))
            .with_state(self.clone())
    }

    /// What a scope still shares between the users of this server, in one line (printed at
    /// start): sessions never are (with keys each is its owner's), files and memory may be.
    pub fn sharing_notice(&self) -> String {
        let mut parts = Vec::new();
        for (name, served) in &self.inner.agents {
            let scope = serde_json::to_value(served.agent.workspace().scope())
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default();
            let shares = match scope.as_str() {
                "user" => "nothing between users".to_owned(),
                "session" => "nothing between sessions; one user's sessions share no files".to_owned(),
                "agent" => "files and the memory extracted from every user's conversations".to_owned(),
                _ => "files and the memory extracted from every user's conversations, with every agent".to_owned(),
            };
            parts.push(format!("agent `{name}` (isolation = \"{scope}\") shares {shares}"));
        }
        let sessions = if self.authenticates() {
            "each session is its owner's (others get 404)"
        } else {
            "no keys: every caller on this machine names its own user (X-Harness-User), so nothing is private from local processes"
        };
        format!("{}; {sessions}", parts.join("; "))
    }

    /// The address `serve` listens on, once it does.
    fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.local_addr.get().copied()
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
        if let Ok(addr) = listener.local_addr() {
            let _ = self.inner.local_addr.set(addr);
        }
        let result = listen::run(listener, self.router(), self.inner.limits, stopping.clone())
            .await
            .map_err(ServeError::Io);
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
