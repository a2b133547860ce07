//! Errors on the wire: the one error body every route answers with (OpenAI's
//! `{"error": {"message", "type", "code"}}`), its typed `type` and `code`, and the class
//! (status, type, code) of a turn that failed with a kernel [`ErrorKind`].

use harness_core::ErrorKind;
use serde::{Deserialize, Serialize};

/// OpenAI's error `type`: the broad class a client branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorType {
    /// The request is wrong (fix it, do not retry it as is).
    InvalidRequestError,
    /// No key, or a key no `[[serve.keys]]` entry matches.
    AuthenticationError,
    /// The guard refused the request (Host, Origin).
    PermissionError,
    /// Too many requests or turns; retry after `Retry-After`.
    RateLimitError,
    /// Another turn or replica holds the session; retry.
    ConflictError,
    /// The server or the provider failed.
    ServerError,
}

/// The error's `code`: what exactly happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request is malformed.
    InvalidRequest,
    /// The key is missing or unknown.
    InvalidApiKey,
    /// The `Host` header names another server.
    HostNotAllowed,
    /// The `Origin` is not listed in `[serve] cors_origins`.
    OriginNotAllowed,
    /// A state-changing request without a JSON content type or `X-Harness-Request`.
    UnsupportedMediaType,
    /// The body is over the size limit.
    RequestTooLarge,
    /// The body did not arrive in time.
    RequestTimeout,
    /// The route does not take that method.
    MethodNotAllowed,
    /// No agent of that name (OpenAI's `model_not_found`).
    ModelNotFound,
    /// No such route, session, task or pending call for this caller.
    NotFound,
    /// The session's queue is full.
    SessionQueueFull,
    /// Too many turns running or queued (server-wide or for the caller).
    TooManyTurns,
    /// Rate limited (a non-JSON 429 rewritten).
    RateLimited,
    /// The server is shutting down.
    ShuttingDown,
    /// A turn failed: the prompt does not fit the model's context window.
    ContextLengthExceeded,
    /// A turn failed: the provider's content filter stopped the reply.
    ContentFilter,
    /// A turn failed: the provider rate limited us past the retries.
    RateLimitExceeded,
    /// A turn failed: the agent or the call is set up wrongly.
    Configuration,
    /// A turn failed: the provider rejected the operator's credentials.
    Auth,
    /// A turn failed: something took too long.
    Timeout,
    /// A turn failed: the provider failed or answered with something unusable.
    Provider,
    /// A turn failed: a tool failed in a way that ended it.
    Tool,
    /// A turn failed: it was cancelled.
    Cancelled,
    /// A turn failed: another writer changed the session first.
    Conflict,
    /// A failure on our side.
    Internal,
}

/// The error JSON: `{"error": {"message", "type", "code"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The inside of [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// What went wrong and what to do about it.
    pub message: String,
    /// The broad class.
    #[serde(rename = "type")]
    pub error_type: ErrorType,
    /// What exactly happened.
    pub code: ErrorCode,
}

/// How a failure is answered: the HTTP status, the error `type` and its `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorClass {
    /// The HTTP status.
    pub status: u16,
    /// The error `type`.
    pub error_type: ErrorType,
    /// The error `code`.
    pub code: ErrorCode,
}

impl ErrorClass {
    /// The answer to a turn that failed with `kind` (also the `status` of a wire `error`
    /// event). Provider credentials are the operator's problem, not the caller's: `auth` is
    /// a 500, never a 401.
    pub fn of_turn(kind: ErrorKind) -> Self {
        let (status, error_type) = match kind {
            ErrorKind::Configuration | ErrorKind::Overflow | ErrorKind::ContentFilter => {
                (400, ErrorType::InvalidRequestError)
            }
            ErrorKind::RateLimit => (429, ErrorType::RateLimitError),
            // Another turn or replica holds the session: the caller may retry.
            ErrorKind::Conflict => (409, ErrorType::ConflictError),
            ErrorKind::Timeout | ErrorKind::Provider | ErrorKind::Cancelled => (503, ErrorType::ServerError),
            _ => (500, ErrorType::ServerError),
        };
        let code = match kind {
            ErrorKind::Configuration => ErrorCode::Configuration,
            ErrorKind::Auth => ErrorCode::Auth,
            ErrorKind::RateLimit => ErrorCode::RateLimitExceeded,
            ErrorKind::Overflow => ErrorCode::ContextLengthExceeded,
            ErrorKind::Timeout => ErrorCode::Timeout,
            ErrorKind::ContentFilter => ErrorCode::ContentFilter,
            ErrorKind::Provider => ErrorCode::Provider,
            ErrorKind::Tool => ErrorCode::Tool,
            ErrorKind::Cancelled => ErrorCode::Cancelled,
            ErrorKind::Conflict => ErrorCode::Conflict,
            // `ErrorKind` is non-exhaustive: a kind added later is ours until mapped.
            _ => ErrorCode::Internal,
        };
        Self {
            status,
            error_type,
            code,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn turn_errors_map_to_the_documented_statuses_and_codes() {
        let check = |kind: ErrorKind, status: u16, code: &str| {
            let class = ErrorClass::of_turn(kind);
            assert_eq!(class.status, status, "{kind}");
            assert_eq!(serde_json::to_value(class.code).unwrap(), code, "{kind}");
        };
        check(ErrorKind::Configuration, 400, "configuration");
        check(ErrorKind::Overflow, 400, "context_length_exceeded");
        check(ErrorKind::ContentFilter, 400, "content_filter");
        check(ErrorKind::RateLimit, 429, "rate_limit_exceeded");
        check(ErrorKind::Provider, 503, "provider");
        check(ErrorKind::Timeout, 503, "timeout");
        check(ErrorKind::Cancelled, 503, "cancelled");
        check(ErrorKind::Conflict, 409, "conflict");
        check(ErrorKind::Auth, 500, "auth");
        check(ErrorKind::Internal, 500, "internal");
        check(ErrorKind::Tool, 500, "tool");
    }

    #[test]
    fn the_error_body_is_openais_shape() {
        let body = ErrorBody {
            error: ErrorDetail {
                message: "no agent `x`".into(),
                error_type: ErrorType::InvalidRequestError,
                code: ErrorCode::ModelNotFound,
            },
        };
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": {"message": "no agent `x`", "type": "invalid_request_error", "code": "model_not_found"}})
        );
        assert_eq!(serde_json::from_value::<ErrorBody>(json).unwrap(), body);
    }
}
