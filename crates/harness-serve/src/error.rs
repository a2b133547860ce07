//! [`ApiError`]: every error the server answers, in OpenAI's error JSON
//! ([`harness_protocol::ErrorBody`]) on both the `/v1` and the `/api` routes.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use harness_core::ErrorKind;
use harness_protocol::{ErrorBody, ErrorClass, ErrorCode, ErrorDetail, ErrorType};
use std::time::Duration;

/// One error answer: a status, OpenAI's `type` and `code`, and a message saying what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) error_type: ErrorType,
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    pub(crate) retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, error_type: ErrorType, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            error_type,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: the request is malformed.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorType::InvalidRequestError,
            ErrorCode::InvalidRequest,
            message,
        )
    }

    /// 401: no key, or a key that matches no `[[serve.keys]]` entry.
    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            ErrorType::AuthenticationError,
            ErrorCode::InvalidApiKey,
            message,
        )
    }

    /// 403: the guard refused the request (`code` says which check).
    pub(crate) fn forbidden(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorType::PermissionError, code, message)
    }

    /// 429: too many turns at once (server-wide or for the caller).
    pub(crate) fn too_many_turns(message: impl Into<String>, retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorType::RateLimitError,
                ErrorCode::TooManyTurns,
                message,
            )
        }
    }

    /// 404 for an unknown agent (OpenAI's `model_not_found`).
    pub(crate) fn unknown_model(name: &str, known: &[&str]) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorType::InvalidRequestError,
            ErrorCode::ModelNotFound,
            format!("no agent named `{name}`; this server serves: {}", known.join(", ")),
        )
    }

    /// 404 for anything else that does not exist for this caller.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorType::InvalidRequestError,
            ErrorCode::NotFound,
            message,
        )
    }

    /// 429: the session's queue is full.
    pub(crate) fn queue_full(limit: usize, retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorType::RateLimitError,
                ErrorCode::SessionQueueFull,
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
            ErrorType::ServerError,
            ErrorCode::ShuttingDown,
            "the server is shutting down; retry on another replica or after it restarts",
        )
    }

    /// 500: a failure on our side (reading sessions, a bug).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorType::ServerError,
            ErrorCode::Internal,
            message,
        )
    }

    /// The answer for a turn that ended with an error of `kind`.
    pub(crate) fn from_turn(kind: ErrorKind, message: String) -> Self {
        let class = ErrorClass::of_turn(kind);
        let status = StatusCode::from_u16(class.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self::new(status, class.error_type, class.code, message)
    }

    /// The error body (its message redacted).
    pub(crate) fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: harness_core::redact::redact(&self.message),
                error_type: self.error_type,
                code: self.code,
            },
        }
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
    fn typed_agent_errors_are_not_500() {
        let busy = harness_core::AgentError::Busy {
            what: "the session lease was lost".to_owned(),
            retry_after: None,
        };
        assert_eq!(
            ApiError::from_turn(busy.kind(), String::new()).status,
            StatusCode::CONFLICT
        );
        let refused = harness_core::AgentError::Refused {
            what: "user id \"memory\" is a reserved workspace name".to_owned(),
        };
        assert_eq!(
            ApiError::from_turn(refused.kind(), String::new()).status,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn a_full_queue_answers_429_with_retry_after() {
        let response = ApiError::queue_full(64, Duration::from_millis(200)).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
