//! Who may reach the routes from a browser, and the shape of every error answer.
//!
//! - **Host**: without keys (always loopback) the `Host` header must name the loopback
//!   address the server listens on (`127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`) or an
//!   entry of `[serve] allowed_hosts`, so a DNS-rebound name reaches nothing. With keys the
//!   check applies only when `allowed_hosts` is set (proxies and remote parents keep working).
//! - **Origin**: a request carrying an `Origin` other than the server's own (the origin of
//!   the `Host` it was sent to) is refused unless `[serve] cors_origins` lists it; listed
//!   origins get CORS headers and their preflights are answered.
//! - **Non-simple requests**: every state-changing request (any method but GET, HEAD and
//!   OPTIONS) must send a JSON content type or `X-Harness-Request`, which a browser only
//!   sends after a preflight: a page on another origin cannot post a message or an approval
//!   with a `no-cors` fetch or a form.
//! - **Bodies** are read here, within `[serve] body_read_timeout` and the size limit (408 /
//!   413).
//! - **Errors**: any answer of 400 and up that is not JSON yet (axum's extractor rejections,
//!   unknown paths, wrong methods) is rewritten into the one error JSON of [`ApiError`].

use crate::Gateway;
use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use harness_protocol::header::{
    DEPTH_HEADER, LAST_EVENT_ID_HEADER, REQUEST_HEADER, SESSION_HEADER, TRACEPARENT_HEADER, USER_HEADER,
};
use harness_protocol::{ErrorCode, ErrorType};
use std::time::Duration;

/// Request headers a listed origin may send (the preflight's answer).
fn allowed_headers() -> String {
    [
        "authorization",
        "content-type",
        REQUEST_HEADER,
        USER_HEADER,
        SESSION_HEADER,
        DEPTH_HEADER,
        LAST_EVENT_ID_HEADER,
        TRACEPARENT_HEADER,
    ]
    .join(", ")
}

/// Largest request body read (bytes).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The guard's settings (from `[serve]`).
#[derive(Debug, Clone, Default)]
pub(crate) struct GuardConfig {
    pub(crate) cors_origins: Vec<String>,
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) body_read_timeout: Duration,
}

/// The middleware: Host, Origin, non-simple rule, body read, then errors as JSON.
pub(crate) async fn guard(State(gateway): State<Gateway>, request: Request, next: Next) -> Response {
    match admit(&gateway, request).await {
        Ok(request) => {
            let origin = allowed_cors_origin(&gateway, request.headers());
            let response = next.run(request).await;
            let mut response = as_json_error(response).await;
            if let Some(origin) = origin {
                add_cors(response.headers_mut(), &origin);
            }
            response
        }
        Err(refusal) => refusal,
    }
}

async fn admit(gateway: &Gateway, request: Request) -> Result<Request, Response> {
    let config = &gateway.inner.guard;
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let path = request.uri().path().to_owned();
    if !host_allowed(gateway, host) {
        tracing::warn!(host, path, "refused a request: its Host is not this server's");
        return Err(ApiError::forbidden(
            ErrorCode::HostNotAllowed,
            format!(
                "Host `{host}` is not this server's address; use http://{} or add the name to [serve] allowed_hosts",
                gateway
                    .local_addr()
                    .map_or_else(|| "127.0.0.1:PORT".to_owned(), |addr| addr.to_string())
            ),
        )
        .into_response());
    }
    let origin = headers
        .get(header::ORIGIN)
        .map(|value| value.to_str().unwrap_or("?").to_owned());
    let listed = origin
        .as_deref()
        .is_some_and(|origin| config.cors_origins.iter().any(|allowed| allowed == origin));
    if let Some(origin) = origin.as_deref()
        && !listed
        && !same_origin(origin, host)
    {
        tracing::warn!(origin, host, path, method = %request.method(), "refused a cross-origin request");
        return Err(ApiError::forbidden(
            ErrorCode::OriginNotAllowed,
            format!("requests from origin `{origin}` are refused; list it in [serve] cors_origins to allow it"),
        )
        .into_response());
    }
    if request.method() == Method::OPTIONS && listed && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        let mut response = StatusCode::NO_CONTENT.into_response();
        if let Some(origin) = origin.as_deref() {
            add_cors(response.headers_mut(), origin);
        }
        let preflight = response.headers_mut();
        preflight.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        if let Ok(allowed) = HeaderValue::from_str(&allowed_headers()) {
            preflight.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allowed);
        }
        preflight.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        return Err(response);
    }
    let changes_state = !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes_state && !non_simple(headers) {
        tracing::warn!(
            host,
            path,
            origin = origin.as_deref().unwrap_or(""),
            "refused a state-changing request without a JSON content type or X-Harness-Request"
        );
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorType::InvalidRequestError,
            ErrorCode::UnsupportedMediaType,
            "send `Content-Type: application/json` (or the header `X-Harness-Request: 1` for a request without a body)",
        )
        .into_response());
    }
    read_body(request, config.body_read_timeout).await
}

/// Whether `host` (the `Host` header) may be served.
fn host_allowed(gateway: &Gateway, host: &str) -> bool {
    let allowed = &gateway.inner.guard.allowed_hosts;
    let host = host.to_ascii_lowercase();
    let (name, port) = split_host(&host);
    if allowed
        .iter()
        .any(|entry| entry.eq_ignore_ascii_case(&host) || entry.eq_ignore_ascii_case(name))
    {
        return true;
    }
    if gateway.authenticates() {
        // With keys the names are checked only when the operator listed some.
        return allowed.is_empty();
    }
    let loopback = matches!(name, "127.0.0.1" | "localhost" | "[::1]");
    let port_matches = match gateway.local_addr() {
        Some(addr) => port == Some(addr.port()) || (port.is_none() && addr.port() == 80),
        // A router used without `serve` (tests, embedding): any port of a loopback name.
        None => true,
    };
    loopback && port_matches
}

/// `name` and the port of a `Host` value (`[::1]:8080`, `localhost:8080`, `example`).
fn split_host(host: &str) -> (&str, Option<u16>) {
    let (name, port) = match host.rfind(':') {
        Some(colon) if !host[colon..].contains(']') => (&host[..colon], Some(&host[colon + 1..])),
        _ => (host, None),
    };
    match port {
        Some(port) => port.parse().map_or((host, None), |port| (name, Some(port))),
        None => (name, None),
    }
}

/// Whether `origin` is the origin of a page served from `host`.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    matches!(scheme, "http" | "https") && !host.is_empty() && rest.eq_ignore_ascii_case(host)
}

/// A JSON content type (`application/json`, `application/*+json`) or `X-Harness-Request`.
fn non_simple(headers: &HeaderMap) -> bool {
    if headers.contains_key(REQUEST_HEADER) {
        return true;
    }
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
        })
}

fn allowed_cors_origin(gateway: &Gateway, headers: &HeaderMap) -> Option<String> {
    let origin = headers.get(header::ORIGIN)?.to_str().ok()?;
    gateway
        .inner
        .guard
        .cors_origins
        .iter()
        .any(|allowed| allowed == origin)
        .then(|| origin.to_owned())
}

fn add_cors(headers: &mut HeaderMap, origin: &str) {
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        // What a listed origin's page may read of the response.
        if let Ok(exposed) = HeaderValue::from_str(&format!("{SESSION_HEADER}, retry-after")) {
            headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, exposed);
        }
    }
}

/// Reads the body within `timeout` and [`MAX_BODY_BYTES`]; 413 / 408 / 400 otherwise.
async fn read_body(request: Request, timeout: Duration) -> Result<Request, Response> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorType::InvalidRequestError,
            ErrorCode::RequestTooLarge,
            format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
        )
        .into_response()
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                ErrorType::InvalidRequestError,
                ErrorCode::RequestTimeout,
                format!(
                    "the request body did not arrive within {}s ([serve] body_read_timeout)",
                    timeout.as_secs()
                ),
            )
            .into_response());
        }
        Ok(Err(err)) => {
            let chain = harness_core::error_chain(&err);
            if chain.contains("length limit") {
                return Err(too_large());
            }
            return Err(ApiError::bad_request(format!("the request body could not be read: {chain}")).into_response());
        }
        Ok(Ok(bytes)) => bytes,
    };
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// An error answer that is not JSON yet becomes the error JSON, keeping its status and text.
async fn as_json_error(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if status.as_u16() < 400 || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let (kind, code) = match status {
        StatusCode::NOT_FOUND => (ErrorType::InvalidRequestError, ErrorCode::NotFound),
        StatusCode::METHOD_NOT_ALLOWED => (ErrorType::InvalidRequestError, ErrorCode::MethodNotAllowed),
        StatusCode::PAYLOAD_TOO_LARGE => (ErrorType::InvalidRequestError, ErrorCode::RequestTooLarge),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (ErrorType::InvalidRequestError, ErrorCode::UnsupportedMediaType),
        StatusCode::TOO_MANY_REQUESTS => (ErrorType::RateLimitError, ErrorCode::RateLimited),
        status if status.is_server_error() => (ErrorType::ServerError, ErrorCode::Internal),
        _ => (ErrorType::InvalidRequestError, ErrorCode::InvalidRequest),
    };
    let message = if text.is_empty() {
        match status {
            StatusCode::NOT_FOUND => "no such route; the README lists the routes under /v1 and /api".to_owned(),
            StatusCode::METHOD_NOT_ALLOWED => {
                let allow = parts
                    .headers
                    .get(header::ALLOW)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("another method");
                format!("this route does not take that method; use {allow}")
            }
            other => other.canonical_reason().unwrap_or("error").to_owned(),
        }
    } else {
        text
    };
    let mut rebuilt = ApiError::new(status, kind, code, message).into_response();
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(value) = parts.headers.get(&name) {
            rebuilt.headers_mut().insert(name, value.clone());
        }
    }
    rebuilt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_values_split_into_name_and_port() {
        assert_eq!(split_host("127.0.0.1:8080"), ("127.0.0.1", Some(8080)));
        assert_eq!(split_host("[::1]:9"), ("[::1]", Some(9)));
        assert_eq!(split_host("[::1]"), ("[::1]", None));
        assert_eq!(split_host("localhost"), ("localhost", None));
        assert_eq!(split_host("evil:x"), ("evil:x", None));
    }

    #[test]
    fn only_the_hosts_own_origin_is_same_origin() {
        assert!(same_origin("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(!same_origin("http://127.0.0.1:8081", "127.0.0.1:8080"));
        assert!(!same_origin("null", "127.0.0.1:8080"));
        assert!(!same_origin("http://evil.example", "127.0.0.1:8080"));
        assert!(!same_origin("http://", ""));
    }

    #[test]
    fn json_content_types_and_the_header_are_non_simple() {
        let with = |name: &'static str, value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static(value));
            non_simple(&headers)
        };
        assert!(with("content-type", "application/json"));
        assert!(with("content-type", "Application/JSON; charset=utf-8"));
        assert!(with("content-type", "application/merge-patch+json"));
        assert!(with("x-harness-request", "1"));
        assert!(!with("content-type", "text/plain"));
        assert!(!with("content-type", "application/x-www-form-urlencoded"));
        assert!(!with("content-type", "multipart/form-data; boundary=x"));
        assert!(!non_simple(&HeaderMap::new()));
    }
}
