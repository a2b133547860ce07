//! [`ApiError`]: every error the server answers, in OpenAI's error JSON
//! (`{"error": {"message", "type", "code"}}`) on both the `/v1` and the `/api` routes.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use harness_core::ErrorKind;
use std::time::Duration;

/// One error answer: a status, OpenAI's `type` and `code`, and a message saying what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) kind: &'static str,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: the request is malformed.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_request",
            message,
        )
    }

    /// 401: no key, or a key that matches no `[[serve.keys]]` entry.
    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            message,
        )
    }

    /// 403: the guard refused the request (`code` says which check).
    pub(crate) fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "permission_error", code, message)
    }

    /// 429: too many turns at once (server-wide or for the caller).
    pub(crate) fn too_many_turns(message: impl Into<String>, retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "too_many_turns",
                message,
            )
        }
    }

    /// 404 for an unknown agent (OpenAI's `model_not_found`).
    pub(crate) fn unknown_model(name: &str, known: &[&str]) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!("no agent named `{name}`; this server serves: {}", known.join(", ")),
        )
    }

    /// 404 for anything else that does not exist for this caller.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", message)
    }

    /// 429: the session's queue is full.
    pub(crate) fn queue_full(limit: usize, retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "session_queue_full",
                format!(
                    "{limit} messages are already waiting for this session; retry after the Retry-After delay \
                     (or raise [serve] max_queued_per_session)"
                ),
            )
        }
    }

    /// 503: the server is shutting down.
    pub(crate) fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "shutting_down",
            "the server is shutting down; retry on another replica or after it restarts",
        )
    }

    /// 500: a failure on our side (reading sessions, a bug).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal", message)
    }

    /// The answer for a turn that ended with an error of `kind`.
    pub(crate) fn from_turn(kind: ErrorKind, message: String) -> Self {
        let (status, kind_name) = turn_status(kind);
        Self::new(status, kind_name, kind_code(kind), message)
    }

    /// The OpenAI error body.
    pub(crate) fn body(&self) -> serde_json::Value {
        let message = harness_core::redact::redact(&self.message);
        serde_json::json!({"error": {"message": message, "type": self.kind, "code": self.code}})
    }
}

/// The HTTP status and OpenAI error type for a failed turn.
pub(crate) fn turn_status(kind: ErrorKind) -> (StatusCode, &'static str) {
    match kind {
        ErrorKind::Configuration | ErrorKind::Overflow | ErrorKind::ContentFilter => {
            (StatusCode::BAD_REQUEST, "invalid_request_error")
        }
        ErrorKind::RateLimit => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
        // Another turn or replica holds the session: the caller may retry.
        ErrorKind::Conflict => (StatusCode::CONFLICT, "conflict_error"),
        ErrorKind::Timeout | ErrorKind::Provider | ErrorKind::Cancelled => {
            (StatusCode::SERVICE_UNAVAILABLE, "server_error")
        }
        // Provider credentials are the operator's problem, not the caller's: not a 401.
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
    }
}

fn kind_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Overflow => "context_length_exceeded",
        ErrorKind::ContentFilter => "content_filter",
        ErrorKind::RateLimit => "rate_limit_exceeded",
        other => other.as_str(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(delay) = self.retry_after {
            let seconds = delay.as_secs().max(1);
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_errors_map_to_the_documented_statuses() {
        let check = |kind, status: u16| assert_eq!(turn_status(kind).0.as_u16(), status, "{kind}");
        check(ErrorKind::Configuration, 400);
        check(ErrorKind::Overflow, 400);
        check(ErrorKind::RateLimit, 429);
        check(ErrorKind::Provider, 503);
        check(ErrorKind::Timeout, 503);
        check(ErrorKind::Cancelled, 503);
        check(ErrorKind::Conflict, 409);
        check(ErrorKind::Auth, 500);
        check(ErrorKind::Internal, 500);
        check(ErrorKind::Tool, 500);
    }

    #[test]
    fn typed_agent_errors_are_not_500() {
        let busy = harness_core::AgentError::Busy {
            what: "the session lease was lost".to_owned(),
            retry_after: None,
        };
        assert_eq!(turn_status(busy.kind()).0, StatusCode::CONFLICT);
        let refused = harness_core::AgentError::Refused {
            what: "user id \"memory\" is a reserved workspace name".to_owned(),
        };
        assert_eq!(turn_status(refused.kind()).0, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_full_queue_answers_429_with_retry_after() {
        let response = ApiError::queue_full(64, Duration::from_millis(200)).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
