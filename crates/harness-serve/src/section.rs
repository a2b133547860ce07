//! `[serve]`, the section of harness.toml this crate owns ([`SECTION`]); a parse that
//! should accept it uses [`sections`].

use harness::capability::{ConfigSection, Registration, Sections};
use serde::Deserialize;

/// `[serve]`'s registration: a section only (the gateway is not a capability of an agent).
pub const SECTION: Registration = Registration::section_only::<ServeSection>("serve");

/// The built-in sections and `[serve]`: what `harness serve` (and every CLI command, which
/// reads the same file) parses harness.toml with.
pub fn sections() -> Sections {
    Sections::builtin().with(SECTION)
}

impl ConfigSection for ServeSection {
    const KEY: &'static str = "serve";
}

/// `[serve]`: the HTTP server of `harness serve` (bind address, queue bound, API keys,
/// limits). This crate owns the section: parse harness.toml with [`sections`] so it is known.
///
/// ```toml
/// [serve]
/// bind = "127.0.0.1:8080"
/// max_queued_per_session = 64
/// [[serve.keys]]
/// user = "alice"
/// sha256 = "<hex SHA-256 of the key>"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// Address to listen on (`HOST:PORT`); the `--bind` flag overrides it.
    pub bind: Option<String>,
    /// Messages that may wait behind a session's running turn (default 64, at least 1).
    pub max_queued_per_session: Option<usize>,
    /// API keys; none means no authentication (loopback binds only).
    #[serde(default)]
    pub keys: Vec<ServeKey>,
    /// More agents to serve beside this workspace's: their workspace directories (relative
    /// paths are resolved against this workspace). Each is served under its own `[agent] name`.
    #[serde(default)]
    pub agents: Vec<std::path::PathBuf>,
    /// Origins (`https://app.example`) whose pages may call the API (CORS); none by default.
    #[serde(default)]
    pub cors_origins: Vec<String>,
    /// Names the `Host` header may carry besides the loopback address the server listens on
    /// (`name` or `name:port`). Without keys they add to the loopback names; with keys the
    /// check applies only when this is set.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// How long a client may take to send a request's headers (default 10 s).
    #[serde(default, deserialize_with = "harness::model_config::duration")]
    pub header_read_timeout: Option<std::time::Duration>,
    /// How long a client may take to send a request's body (default 30 s).
    #[serde(default, deserialize_with = "harness::model_config::duration")]
    pub body_read_timeout: Option<std::time::Duration>,
    /// How long an idle keep-alive connection stays open (default 30 s).
    #[serde(default, deserialize_with = "harness::model_config::duration")]
    pub idle_timeout: Option<std::time::Duration>,
    /// Open connections at most (default 1024); at the cap the oldest connection that is not
    /// running a request is closed for the new one.
    pub max_connections: Option<usize>,
    /// Turns running or queued at once on the whole server (default 256); more get 429.
    pub max_turns: Option<usize>,
    /// Turns running or queued at once for one user (default 32); more get 429.
    pub max_turns_per_user: Option<usize>,
}

/// One API key of `[[serve.keys]]`: the SHA-256 of the key (never the key) and its user.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeKey {
    /// The user id requests with this key run as.
    pub user: String,
    /// Lowercase or uppercase hex SHA-256 of the key (64 digits).
    pub sha256: String,
}

impl std::fmt::Debug for ServeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeKey")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}
