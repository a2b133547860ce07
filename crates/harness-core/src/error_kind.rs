//! [`ErrorKind`]: the class of a failed call, carried on the stream's `Error` event so a
//! front-end or server can map it to a status without reading the message.

use serde::{Deserialize, Serialize};

/// What kind of failure ended a call. Derived from the typed error
/// ([`AgentError::kind`](crate::AgentError::kind)), never from its text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The agent or the call is set up wrongly (bad ids, missing settings).
    Configuration,
    /// The provider rejected the credentials.
    Auth,
    /// The provider is rate limiting us (after retries).
    RateLimit,
    /// The prompt does not fit the model's context window.
    Overflow,
    /// Something took too long.
    Timeout,
    /// The provider's content filter stopped the reply.
    ContentFilter,
    /// The provider failed or answered with something unusable.
    Provider,
    /// A tool failed in a way that ended the call.
    Tool,
    /// The call was cancelled.
    Cancelled,
    /// Another writer changed the session first.
    Conflict,
    /// A bug or a backend failure on our side.
    #[default]
    Internal,
}

impl ErrorKind {
    /// The snake_case name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configuration => "configuration",
            Self::Auth => "auth",
            Self::RateLimit => "rate_limit",
            Self::Overflow => "overflow",
            Self::Timeout => "timeout",
            Self::ContentFilter => "content_filter",
            Self::Provider => "provider",
            Self::Tool => "tool",
            Self::Cancelled => "cancelled",
            Self::Conflict => "conflict",
            Self::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
