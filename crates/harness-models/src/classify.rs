//! Error classification: the one place where an HTTP status, headers and a provider's error
//! body become a typed [`ModelError`]. Nothing else in Harness inspects error text.
//!
//! The overflow phrases are data ([`OVERFLOW_PHRASES`]), one row per provider wording, each
//! tested against a recorded body.

use crate::transport::WireError;
use harness_core::ModelError;
use reqwest::header::HeaderMap;
use serde_json::Value;
use std::time::Duration;

/// Which provider's error and event shapes to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// OpenAI Chat Completions and compatible servers (DashScope, DeepSeek, vLLM, Ollama…):
    /// `{"error": {"message", "type", "code"}}`, and the variants those servers use.
    OpenAi,
    /// Anthropic Messages: `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
    /// Google Gemini (`generateContent`): `{"error": {"code", "message", "status", "details"}}`,
    /// where a 429's wait is a `google.rpc.RetryInfo` detail (`"retryDelay": "37s"`).
    Gemini,
}

/// Error codes that mean "the prompt does not fit the context window".
/// (llama.cpp's server puts `exceed_context_size_error` in the error's `type`.)
const OVERFLOW_CODES: &[&str] = &[
    "context_length_exceeded",
    "model_context_window_exceeded",
    "exceed_context_size_error",
];

/// Lower-case phrases that mean "the prompt does not fit", with who says them.
const OVERFLOW_PHRASES: &[(&str, &str)] = &[
    ("maximum context length", "OpenAI, DeepSeek, vLLM, Mistral"),
    ("prompt is too long", "Anthropic"),
    ("exceed context limit", "Anthropic (input plus max_tokens)"),
    ("range of input length should be", "DashScope / Qwen"),
    ("exceeds the context window", "OpenAI Responses"),
    ("exceeds the maximum number of tokens", "Gemini OpenAI-compatible"),
    ("reduce the length of the messages", "OpenAI legacy, Groq"),
    ("context length exceeded", "various proxies"),
    ("input is too long", "Bedrock-style proxies"),
    ("exceeds the available context size", "llama.cpp server"),
    (
        "longer than the maximum model length",
        "vLLM (prompt past max_model_len)",
    ),
    ("exceeds the context length", "Ollama"),
    ("exceeds maximum context length", "Ollama (older wording)"),
];

/// The message, code and type a provider put in an error body.
#[derive(Debug, Default, PartialEq)]
struct ErrorInfo {
    message: String,
    code: String,
    kind: String,
}

/// Maps a failed HTTP response to a [`ModelError`].
///
/// - context overflow (per provider wording, or 413) → [`ModelError::ContextOverflow`]
/// - 429 → [`ModelError::RateLimited`] with `Retry-After` (except OpenAI's `insufficient_quota`,
///   which no wait fixes: [`ModelError::InvalidRequest`])
/// - 401, 403 → [`ModelError::Auth`] (and Gemini's 400 with an `API_KEY_INVALID` reason)
/// - 529 and Anthropic `overloaded_error` → [`ModelError::RateLimited`]
/// - 408, other 5xx → [`ModelError::Transient`]
/// - other 4xx → [`ModelError::InvalidRequest`] with the provider's message
pub fn classify(dialect: Dialect, status: u16, headers: &HeaderMap, body: &str) -> ModelError {
    let wait = match dialect {
        Dialect::Gemini => retry_after(headers).or_else(|| gemini_retry_delay(body)),
        Dialect::OpenAi | Dialect::Anthropic => retry_after(headers),
    };
    let info = extract(body, status);
    if dialect == Dialect::Gemini && status == 400 && gemini_error_reason(body).as_deref() == Some("API_KEY_INVALID") {
        // Gemini answers a bad key with 400 INVALID_ARGUMENT; the ErrorInfo reason says which.
        return ModelError::Auth {
            status,
            message: info.message,
        };
    }
    classify_info(dialect, status, wait, info)
}

/// The `reason` of a `google.rpc.ErrorInfo` detail in a Gemini error body.
fn gemini_error_reason(body: &str) -> Option<String> {
    let top: Value = serde_json::from_str(body).ok()?;
    top.get("error")?
        .get("details")?
        .as_array()?
        .iter()
        .filter(|detail| {
            detail
                .get("@type")
                .and_then(Value::as_str)
                .is_some_and(|kind| kind.ends_with("google.rpc.ErrorInfo"))
        })
        .find_map(|detail| detail.get("reason")?.as_str().map(str::to_owned))
}

/// The `retryDelay` of a `google.rpc.RetryInfo` detail in a Gemini error body: a protobuf
/// `Duration` in JSON, seconds with an `s` suffix (`"37s"`, `"0.5s"`).
fn gemini_retry_delay(body: &str) -> Option<Duration> {
    let top: Value = serde_json::from_str(body).ok()?;
    let details = top.get("error")?.get("details")?.as_array()?;
    details
        .iter()
        .filter(|detail| {
            detail
                .get("@type")
                .and_then(Value::as_str)
                .is_some_and(|kind| kind.ends_with("google.rpc.RetryInfo"))
        })
        .find_map(|detail| {
            detail
                .get("retryDelay")?
                .as_str()?
                .trim()
                .strip_suffix('s')?
                .parse::<f64>()
                .ok()
        })
        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
}

/// Maps an error reported inside a stream (an Anthropic `error` event, an OpenAI chunk with an
/// `error` object) to a [`ModelError`], deriving a status from the error's type or code.
pub(crate) fn classify_stream_error(dialect: Dialect, data: &str) -> ModelError {
    let info = extract(data, 500);
    let status = match info.kind.as_str() {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" => 429,
        "overloaded_error" => 529,
        _ => info
            .code
            .parse::<u16>()
            .ok()
            .filter(|code| (400..600).contains(code))
            .unwrap_or(500),
    };
    let wait = match dialect {
        Dialect::Gemini => gemini_retry_delay(data),
        Dialect::OpenAi | Dialect::Anthropic => None,
    };
    classify_info(dialect, status, wait, info)
}

fn classify_info(dialect: Dialect, status: u16, retry_after: Option<Duration>, info: ErrorInfo) -> ModelError {
    // Overflow wording wins over the status (some servers answer it with a 5xx, or inside a
    // stream without any status), except where the status says "wait" or "who are you".
    let overflow_possible = !matches!(status, 401 | 403 | 429);
    if status == 413 || (overflow_possible && is_overflow(&info)) {
        return ModelError::ContextOverflow { message: info.message };
    }
    let overloaded = status == 529 || (dialect == Dialect::Anthropic && info.kind == "overloaded_error");
    match status {
        429 if info.code == "insufficient_quota" || info.kind == "insufficient_quota" => ModelError::InvalidRequest {
            status,
            message: info.message,
        },
        429 => ModelError::RateLimited { retry_after },
        _ if overloaded => ModelError::RateLimited { retry_after },
        401 | 403 => ModelError::Auth {
            status,
            message: info.message,
        },
        408 => ModelError::transient(WireError::Status {
            status,
            message: info.message,
        }),
        400..=499 => ModelError::InvalidRequest {
            status,
            message: info.message,
        },
        _ => ModelError::transient(WireError::Status {
            status,
            message: info.message,
        }),
    }
}

fn is_overflow(info: &ErrorInfo) -> bool {
    if OVERFLOW_CODES.contains(&info.code.as_str()) || OVERFLOW_CODES.contains(&info.kind.as_str()) {
        return true;
    }
    let message = info.message.to_lowercase();
    OVERFLOW_PHRASES.iter().any(|(phrase, _)| message.contains(phrase))
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Pulls message, code and type out of the error shapes providers use; falls back to the
/// body text itself (capped), then to the status's reason phrase.
fn extract(body: &str, status: u16) -> ErrorInfo {
    let mut info = ErrorInfo::default();
    if let Ok(Value::Object(top)) = serde_json::from_str::<Value>(body) {
        let error = top.get("error");
        let pick = |key: &str| {
            error
                .and_then(|e| e.get(key))
                .or_else(|| top.get(key))
                .map(text_of)
                .unwrap_or_default()
        };
        info.message = match error {
            Some(Value::String(message)) => message.clone(),
            _ => pick("message"),
        };
        if info.message.is_empty() {
            info.message = top.get("detail").map(text_of).unwrap_or_default();
        }
        info.code = pick("code");
        info.kind = pick("type");
        if info.kind == "error" {
            // Anthropic's envelope type; the interesting type is inside `error`.
            info.kind = error.and_then(|e| e.get("type")).map(text_of).unwrap_or_default();
        }
    }
    if info.message.is_empty() {
        info.message = excerpt(body.trim(), 500);
    }
    if info.message.is_empty() {
        info.message = reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|code| code.canonical_reason())
            .unwrap_or("no error message")
            .to_owned();
    }
    info
}

/// At most `max` characters of `text`, cut at a character boundary with a visible marker.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// How long the provider asked us to wait: `retry-after-ms`, then `Retry-After` as seconds or
/// as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    header("retry-after").and_then(|value| parse_retry_after(value, jiff::Timestamp::now()))
}

/// Parses a `Retry-After` value: delay seconds (fractions accepted) or an HTTP date, relative
/// to `now`. A date in the past means "now" (zero).
pub(crate) fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let when = jiff::fmt::rfc2822::DateTimeParser::new().parse_timestamp(value).ok()?;
    let millis = when.as_millisecond().saturating_sub(now.as_millisecond());
    Some(Duration::from_millis(u64::try_from(millis).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    /// Classifies a recorded body and renders the outcome as a short, comparable string.
    fn check(dialect: Dialect, status: u16, headers: &[(&'static str, &str)], body: &str, expect: &str) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")));
        }
        let got = match classify(dialect, status, &map, body) {
            ModelError::ContextOverflow { message } => format!("overflow: {message}"),
            ModelError::RateLimited { retry_after } => format!("rate_limited: {retry_after:?}"),
            ModelError::Transient(source) => format!("transient: {source}"),
            ModelError::Auth { status, message } => format!("auth {status}: {message}"),
            ModelError::InvalidRequest { status, message } => format!("invalid {status}: {message}"),
            other => format!("other: {other}"),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn openai_context_length_exceeded() {
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130310 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#,
            "overflow: This model's maximum context length is 128000 tokens. However, your messages resulted in 130310 tokens. Please reduce the length of the messages.",
        );
    }

    #[test]
    fn gemini_errors() {
        // 400 INVALID_ARGUMENT with the token-limit wording: overflow.
        check(
            Dialect::Gemini,
            400,
            &[],
            r#"{"error": {"code": 400, "message": "The input token count (1239813) exceeds the maximum number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}"#,
            "overflow: The input token count (1239813) exceeds the maximum number of tokens allowed (1048576).",
        );
        // 429 RESOURCE_EXHAUSTED: the wait comes from the RetryInfo detail.
        check(
            Dialect::Gemini,
            429,
            &[],
            r#"{"error": {"code": 429, "message": "You exceeded your current quota, please check your plan and billing details.", "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]}, {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Learn more", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]}, {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}]}}"#,
            "rate_limited: Some(37s)",
        );
        // Without a RetryInfo detail the wait is unknown (backoff decides).
        check(
            Dialect::Gemini,
            429,
            &[],
            r#"{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}"#,
            "rate_limited: None",
        );
        check(
            Dialect::Gemini,
            403,
            &[],
            r#"{"error": {"code": 403, "message": "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.", "status": "PERMISSION_DENIED"}}"#,
            "auth 403: Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
        );
        check(
            Dialect::Gemini,
            503,
            &[],
            r#"{"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}}"#,
            "transient: provider returned 503: The model is overloaded. Please try again later.",
        );
        check(
            Dialect::Gemini,
            400,
            &[],
            r#"{"error": {"code": 400, "message": "* GenerateContentRequest.contents: contents is not specified\n", "status": "INVALID_ARGUMENT"}}"#,
            "invalid 400: * GenerateContentRequest.contents: contents is not specified\n",
        );
        // A bad key is a 400 on Gemini; its ErrorInfo reason makes it an auth failure.
        check(
            Dialect::Gemini,
            400,
            &[],
            r#"{"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}}"#,
            "auth 400: API key not valid. Please pass a valid API key.",
        );
    }

    #[test]
    fn anthropic_prompt_too_long() {
        check(
            Dialect::Anthropic,
            400,
            &[],
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CU"}"#,
            "overflow: prompt is too long: 208310 tokens > 200000 maximum",
        );
        check(
            Dialect::Anthropic,
            400,
            &[],
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"}}"#,
            "overflow: input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again",
        );
    }

    #[test]
    fn dashscope_range_of_input_length() {
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"error":{"code":"invalid_parameter_error","param":null,"message":"<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]","type":"invalid_request_error"},"id":"chatcmpl-5b1","request_id":"5b1"}"#,
            "overflow: <400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]",
        );
    }

    #[test]
    fn deepseek_and_vllm_maximum_context_length() {
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70123 tokens (70123 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
            "overflow: This model's maximum context length is 65536 tokens. However, you requested 70123 tokens (70123 in the messages, 0 in the completion). Please reduce the length of the messages or completion.",
        );
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","param":null,"code":400}"#,
            "overflow: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages, Please reduce the length of the messages.",
        );
    }

    #[test]
    fn llama_cpp_server_context_size() {
        // llama.cpp's `llama-server` (OpenAI-compatible endpoint), both wordings.
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"error":{"code":400,"message":"request (8193 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":8193,"n_ctx":8192}}"#,
            "overflow: request (8193 tokens) exceeds the available context size (8192 tokens), try increasing it",
        );
        check(
            Dialect::OpenAi,
            500,
            &[],
            r#"{"error":{"code":500,"message":"the request exceeds the available context size, try increasing the context size or enable context shift","type":"server_error"}}"#,
            "overflow: the request exceeds the available context size, try increasing the context size or enable context shift",
        );
    }

    #[test]
    fn vllm_prompt_longer_than_max_model_len() {
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"object":"error","message":"The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}"#,
            "overflow: The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.",
        );
    }

    #[test]
    fn ollama_input_length() {
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"error":{"message":"the input length exceeds the context length","type":"api_error","param":null,"code":null}}"#,
            "overflow: the input length exceeds the context length",
        );
        check(
            Dialect::OpenAi,
            500,
            &[],
            r#"{"error":"input exceeds maximum context length"}"#,
            "overflow: input exceeds maximum context length",
        );
    }

    #[test]
    fn payload_too_large_is_overflow() {
        check(Dialect::OpenAi, 413, &[], "", "overflow: Payload Too Large");
    }

    #[test]
    fn rate_limited_with_retry_after_seconds() {
        check(
            Dialect::OpenAi,
            429,
            &[("retry-after", "7")],
            r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
            "rate_limited: Some(7s)",
        );
        check(
            Dialect::Anthropic,
            429,
            &[("retry-after-ms", "1500")],
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
            "rate_limited: Some(1.5s)",
        );
    }

    #[test]
    fn insufficient_quota_is_not_retried() {
        check(
            Dialect::OpenAi,
            429,
            &[],
            r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
            "invalid 429: You exceeded your current quota, please check your plan and billing details.",
        );
    }

    #[test]
    fn auth_failures() {
        check(
            Dialect::OpenAi,
            401,
            &[],
            r#"{"error":{"message":"Incorrect API key provided: sk-abc***. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            "auth 401: Incorrect API key provided: sk-abc***. You can find your API key at https://platform.openai.com/account/api-keys.",
        );
        check(
            Dialect::Anthropic,
            401,
            &[],
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            "auth 401: invalid x-api-key",
        );
        check(
            Dialect::OpenAi,
            403,
            &[],
            "<html>Forbidden</html>",
            "auth 403: <html>Forbidden</html>",
        );
    }

    #[test]
    fn overloaded_and_server_errors() {
        check(
            Dialect::Anthropic,
            529,
            &[],
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            "rate_limited: None",
        );
        check(
            Dialect::OpenAi,
            503,
            &[],
            r#"{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}"#,
            "transient: provider returned 503: The server is overloaded or not ready yet.",
        );
        check(
            Dialect::OpenAi,
            502,
            &[],
            "",
            "transient: provider returned 502: Bad Gateway",
        );
    }

    #[test]
    fn other_client_errors_keep_the_provider_message() {
        check(
            Dialect::OpenAi,
            400,
            &[],
            r#"{"error":{"message":"Invalid schema for function 'lookup': 'object' is not valid under any of the given schemas.","type":"invalid_request_error","param":"tools[0].function.parameters","code":"invalid_function_parameters"}}"#,
            "invalid 400: Invalid schema for function 'lookup': 'object' is not valid under any of the given schemas.",
        );
        check(
            Dialect::OpenAi,
            404,
            &[],
            r#"{"detail":"Not Found"}"#,
            "invalid 404: Not Found",
        );
        check(
            Dialect::OpenAi,
            402,
            &[],
            r#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#,
            "invalid 402: Insufficient Balance",
        );
    }

    #[test]
    fn stream_errors_derive_a_status_from_their_type() {
        let overloaded = classify_stream_error(
            Dialect::Anthropic,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert!(matches!(overloaded, ModelError::RateLimited { retry_after: None }));
        let too_long = classify_stream_error(
            Dialect::Anthropic,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 1 tokens > 0 maximum"}}"#,
        );
        assert!(matches!(too_long, ModelError::ContextOverflow { .. }));
        let internal = classify_stream_error(Dialect::OpenAi, r#"{"error":{"message":"internal error"}}"#);
        assert!(matches!(internal, ModelError::Transient(_)));
        let untyped_overflow = classify_stream_error(
            Dialect::OpenAi,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens"}}"#,
        );
        assert!(matches!(untyped_overflow, ModelError::ContextOverflow { .. }));
    }

    #[test]
    fn retry_after_forms() {
        let now = jiff::Timestamp::from_second(784_111_717).unwrap_or_else(|e| panic!("{e}")); // Sun, 06 Nov 1994 08:48:37 GMT
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("0.25", now), Some(Duration::from_millis(250)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn excerpts_cut_at_character_boundaries() {
        assert_eq!(excerpt("你好世界", 2), "你好…");
        assert_eq!(excerpt("abc", 3), "abc");
    }
}
