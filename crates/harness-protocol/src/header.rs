//! The HTTP header names of the native and OpenAI-compatible APIs, shared by the server and
//! the remote-subagent client. Header names are case-insensitive; these are lowercase, the
//! form `http::HeaderName::from_static` accepts.

/// Names the user when the server has no keys (loopback only); ignored when a key decides.
pub const USER_HEADER: &str = "x-harness-user";

/// Marks a request as sent by a client of the API, not by a form or a `no-cors` fetch (any
/// value): a state-changing request without a JSON body must carry it.
pub const REQUEST_HEADER: &str = "x-harness-request";

/// The session: on a request, which one continues; on a response, which one ran.
pub const SESSION_HEADER: &str = "x-harness-session";

/// A remote parent's delegation depth (a whole number; a direct child is 1): the served
/// turn's own spawns count from it.
pub const DEPTH_HEADER: &str = "x-harness-depth";

/// Where an event stream resumes (an [`EventId`](crate::EventId)); SSE's standard header.
pub const LAST_EVENT_ID_HEADER: &str = "last-event-id";

/// W3C Trace Context: the span of the remote caller (a parent's `execute_tool` span) that the
/// served turn's spans join (`00-<trace id>-<span id>-<flags>`); a malformed value is ignored.
pub const TRACEPARENT_HEADER: &str = "traceparent";
