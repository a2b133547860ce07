//! Who may reach the server: Host, Origin, the non-simple rule, CORS, the error JSON of
//! every refusal, body limits, turn caps, and connection limits with real sockets.

use super::support::{ASK_LIST, Server};
use harness_serve::ServeOptions;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MESSAGES: &str = "/api/agents/helper/sessions/s1/messages";

/// The error JSON's `code`, asserting the shape.
async fn error_code(response: reqwest::Response) -> String {
    let status = response.status();
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("application/json".to_owned()),
        "{status}"
    );
    let body: Value = response.json().await.unwrap();
    let error = &body["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(error["type"].is_string(), "{body}");
    error["code"].as_str().unwrap().to_owned()
}

/// Whether the session has any history (a turn ran).
async fn ran(server: &Server, session: &str) -> bool {
    server
        .get(&format!("/api/agents/helper/sessions/{session}"))
        .await
        .status()
        == 200
}

#[tokio::test]
async fn a_simple_cross_site_post_is_refused_and_nothing_runs() {
    let server = Server::start_with(ServeOptions::default(), Some(ASK_LIST)).await;
    // What a `no-cors` fetch or a form can send: text/plain, form-encoded, no content type.
    for content_type in [Some("text/plain"), Some("application/x-www-form-urlencoded"), None] {
        let mut request = server
            .client
            .post(server.url(MESSAGES))
            .body(r#"{"message": "tool please"}"#);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 415, "{content_type:?}");
        assert_eq!(error_code(response).await, "unsupported_media_type");
    }
    assert!(!ran(&server, "s1").await, "a refused request started a turn");
    // The approval route is refused the same way (nothing to approve either).
    let response = server
        .client
        .post(server.url("/api/agents/helper/sessions/s1/approvals"))
        .header("content-type", "text/plain")
        .body(r#"{"all": "approve"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    // With the custom header a body-less POST passes the rule.
    let response = server
        .client
        .post(server.url("/api/agents/helper/sessions/s1/cancel"))
        .header("x-harness-request", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_foreign_origin_is_refused_even_with_a_json_body() {
    let server = Server::start(ServeOptions::default()).await;
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let response = server
            .client
            .post(server.url(MESSAGES))
            .header("origin", origin)
            .json(&json!({"message": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{origin}");
        assert!(response.headers().get("access-control-allow-origin").is_none());
        assert_eq!(error_code(response).await, "origin_not_allowed");
        // Its preflight gets no CORS answer either.
        let preflight = server
            .client
            .request(reqwest::Method::OPTIONS, server.url(MESSAGES))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type")
            .send()
            .await
            .unwrap();
        assert!(preflight.headers().get("access-control-allow-origin").is_none());
        assert!(!preflight.status().is_success(), "{origin}: {}", preflight.status());
    }
    assert!(!ran(&server, "s1").await);
    // The page's own origin passes.
    let own = server.base.clone();
    let response = server
        .client
        .post(server.url(MESSAGES))
        .header("origin", own)
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// A raw HTTP/1.1 exchange (reqwest would not send a foreign Host).
async fn raw(base: &str, request: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_keyless_server_answers_only_its_own_loopback_host() {
    let mut options = ServeOptions::default();
    options.allowed_hosts = vec!["harness.internal".to_owned()];
    let server = Server::start(options).await;
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let ask = |host: String| {
        let base = server.base.clone();
        async move {
            raw(
                &base,
                &format!("GET /api/agents HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
            )
            .await
        }
    };
    for refused in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("127.0.0.1:{}", port.parse::<u16>().unwrap() + 1),
        format!("localhost.evil.example:{port}"),
        String::new(),
    ] {
        let answer = ask(refused.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{refused}: {answer}");
        assert!(answer.contains("host_not_allowed"), "{answer}");
    }
    for allowed in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        "harness.internal".to_owned(),
    ] {
        let answer = ask(allowed.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{allowed}: {answer}");
    }
}

#[tokio::test]
async fn listed_cors_origins_are_answered_and_may_post() {
    let mut options = ServeOptions::default();
    options.cors_origins = vec!["https://app.example".to_owned()];
    let server = Server::start(options).await;
    let preflight = server
        .client
        .request(reqwest::Method::OPTIONS, server.url(MESSAGES))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type, authorization")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let allowed = preflight.headers()["access-control-allow-headers"].to_str().unwrap();
    assert!(allowed.contains("content-type") && allowed.contains("authorization"));
    let response = server
        .client
        .post(server.url(MESSAGES))
        .header("origin", "https://app.example")
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], "https://app.example");
    // Another origin is still refused.
    let response = server
        .client
        .post(server.url(MESSAGES))
        .header("origin", "https://app.example.evil")
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn every_error_is_the_error_json() {
    let server = Server::start(ServeOptions::default()).await;
    // 413 for a body over the limit.
    let big = "x".repeat(harness_serve::MAX_BODY_BYTES + 1);
    let response = server
        .client
        .post(server.url(MESSAGES))
        .header("content-type", "application/json")
        .body(format!(r#"{{"message": "{big}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(error_code(response).await, "request_too_large");
    // 404 for an unknown path, 405 for a wrong method.
    let response = server.get("/api/nothing/here").await;
    assert_eq!(response.status(), 404);
    assert_eq!(error_code(response).await, "not_found");
    let response = server.get(MESSAGES).await;
    assert_eq!(response.status(), 405);
    assert_eq!(error_code(response).await, "method_not_allowed");
    // An extractor rejection: a malformed OpenAI body.
    let response = server
        .client
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_client_error());
    error_code(response).await;
    // A bad session id.
    let response = server.send("bad id!", "hi", false).await;
    assert_eq!(response.status(), 400);
    error_code(response).await;
    // A reserved user name is the caller's mistake: 400, not 500.
    let response = server
        .client
        .post(server.url(MESSAGES))
        .header("x-harness-user", "memory")
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(error_code(response).await, "invalid_request");
}

#[tokio::test]
async fn turns_past_the_per_user_and_server_caps_get_429_with_retry_after() {
    let mut options = ServeOptions::default();
    options.max_turns_per_user = 1;
    options.max_turns = 2;
    let server = Server::start(options).await;
    let post_as = |user: &'static str, session: &'static str| {
        server
            .client
            .post(server.url(&format!("/api/agents/helper/sessions/{session}/messages")))
            .header("x-harness-user", user)
            .json(&json!({"message": "wait", "stream": true}))
            .send()
    };
    // alice's first turn waits at the gate; her second (another session) is over her cap.
    let first = post_as("alice", "a1").await.unwrap();
    assert_eq!(first.status(), 200);
    let second = post_as("alice", "a2").await.unwrap();
    assert_eq!(second.status(), 429);
    assert!(second.headers().contains_key("retry-after"));
    assert_eq!(error_code(second).await, "too_many_turns");
    // bob may run one; carol is then over the server's cap.
    let bob = post_as("bob", "b1").await.unwrap();
    assert_eq!(bob.status(), 200);
    let carol = post_as("carol", "c1").await.unwrap();
    assert_eq!(carol.status(), 429);
    assert!(carol.headers().contains_key("retry-after"));
    server.gate.add_permits(2);
    drop((first, bob));
}

/// Opens a connection and sends half a request's headers.
async fn half_open(addr: &str) -> Option<tokio::net::TcpStream> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(b"GET /api/agents HTTP/1.1\r\nHost: ").await.ok()?;
    Some(stream)
}

#[tokio::test]
async fn at_the_connection_cap_half_sent_requests_make_room_for_a_real_one() {
    let mut options = ServeOptions::default();
    options.max_connections = 8;
    let server = Server::start(options).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut attackers = Vec::new();
    for _ in 0..40 {
        if let Some(stream) = half_open(&addr).await {
            attackers.push(stream);
        }
    }
    let response = tokio::time::timeout(Duration::from_secs(60), server.get("/api/agents"))
        .await
        .expect("a normal request during the attack was answered");
    assert_eq!(response.status(), 200);
    drop(attackers);
}

#[tokio::test]
async fn a_half_sent_request_is_closed_after_the_header_read_timeout() {
    let mut options = ServeOptions::default();
    options.header_read_timeout = Duration::from_secs(1);
    options.idle_timeout = Duration::from_secs(1);
    let server = Server::start(options).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut stream = half_open(&addr).await.unwrap();
    let mut buffer = Vec::new();
    // The server closes it (an error answer or just EOF); a generous bound against hanging.
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut buffer)).await;
    assert!(read.is_ok(), "the half-sent request was still open after 60s");
    // An idle keep-alive connection is closed too.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /api/agents HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), idle.read_to_end(&mut buffer)).await;
    assert!(read.is_ok(), "an idle keep-alive connection was still open after 60s");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_a_408() {
    let mut options = ServeOptions::default();
    options.body_read_timeout = Duration::from_secs(1);
    let server = Server::start(options).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            format!(
                "POST {MESSAGES} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"mess"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = vec![0_u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut answer))
        .await
        .expect("no answer to a body that never arrives")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(!ran(&server, "s1").await);
}

#[tokio::test]
async fn with_keys_allowed_hosts_applies_only_when_set() {
    let key = harness_serve::ServeKey {
        user: "alice".to_owned(),
        sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"k-alice")),
    };
    let ask = |base: String, host: &'static str| async move {
        raw(
            &base,
            &format!(
                "GET /api/agents HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer k-alice\r\nConnection: close\r\n\r\n"
            ),
        )
        .await
    };
    let mut options = ServeOptions::default();
    options.keys = vec![key.clone()];
    let open = Server::start(options).await;
    // A proxy's name reaches a keyed server when no allowed_hosts are set.
    assert!(
        ask(open.base.clone(), "proxy.example")
            .await
            .starts_with("HTTP/1.1 200")
    );
    let mut options = ServeOptions::default();
    options.keys = vec![key];
    options.allowed_hosts = vec!["api.example".to_owned()];
    let listed = Server::start(options).await;
    assert!(
        ask(listed.base.clone(), "api.example")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        ask(listed.base.clone(), "api.example:443")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        ask(listed.base.clone(), "proxy.example")
            .await
            .starts_with("HTTP/1.1 403")
    );
}

#[tokio::test]
async fn known_secrets_are_masked_in_tool_results_and_events() {
    let server = Server::start(ServeOptions::default()).await;
    // A value a configuration expanded (as tools.json's `${VAR}` does), shown by list_files.
    harness_core::redact::remember("PLANTEDtoolsecret9911");
    // In the default user's layer, which list_files shows.
    let layer = server.workspace().join("default");
    std::fs::create_dir_all(&layer).unwrap();
    std::fs::write(layer.join("PLANTEDtoolsecret9911.txt"), "x").unwrap();
    let response = server.send("t1", "use a tool", true).await;
    let body = response.text().await.unwrap();
    assert!(body.contains("tool_result"), "{body}");
    assert!(!body.contains("PLANTEDtoolsecret9911"), "{body}");
    assert!(body.contains("***.txt"), "{body}");
    let history = server.get("/api/agents/helper/sessions/t1").await.text().await.unwrap();
    assert!(!history.contains("PLANTEDtoolsecret9911"), "{history}");
}

#[tokio::test]
async fn the_start_line_says_what_each_scope_shares() {
    let dir = tempfile::tempdir().unwrap();
    let config = |scope: &str| format!("[agent]\nisolation = \"{scope}\"\n");
    let user = super::support::agent_with(
        &dir.path().join("u"),
        super::support::gated(),
        "u",
        Some(&config("user")),
    );
    let shared = super::support::agent_with(
        &dir.path().join("a"),
        super::support::gated(),
        "a",
        Some(&config("agent")),
    );
    let gateway = harness_serve::Gateway::new(vec![user, shared], ServeOptions::default()).unwrap();
    let line = gateway.sharing_notice();
    assert!(
        line.contains("agent `u` (isolation = \"user\") shares nothing between users"),
        "{line}"
    );
    assert!(
        line.contains(
            "agent `a` (isolation = \"agent\") shares files and the memory extracted from every user's conversations"
        ),
        "{line}"
    );
    assert!(line.contains("no keys"), "{line}");
}

/// A session lease that is lost as soon as it is held (another replica took the session).
struct LostAtOnce;

struct NoRelease;

#[async_trait::async_trait]
impl harness_core::LeaseRelease for NoRelease {
    async fn release(self: Box<Self>) {}
    fn release_now(self: Box<Self>) {}
}

#[async_trait::async_trait]
impl harness_core::SessionLease for LostAtOnce {
    async fn acquire(
        &self,
        _key: &harness_core::LeaseKey,
        _cancel: &harness_core::CancellationToken,
    ) -> Result<harness_core::LeaseGuard, harness_core::LeaseError> {
        let lost = harness_core::CancellationToken::new();
        lost.cancel();
        Ok(harness_core::LeaseGuard::new(
            Some(harness_core::FencingToken::new(3)),
            lost,
            Box::new(NoRelease),
        ))
    }
}

#[tokio::test]
async fn a_lost_session_lease_is_a_409_conflict() {
    let server = Server::start_built(ServeOptions::default(), |dir, model| {
        let mut memory = harness_memory::MemoryConfig::default();
        memory.enabled = false;
        harness::HarnessAgent::builder()
            .memory(memory)
            .workspace(dir)
            .name("helper")
            .model(model)
            .session_lease(std::sync::Arc::new(LostAtOnce))
            .build()
            .unwrap()
    })
    .await;
    let response = tokio::time::timeout(Duration::from_secs(60), server.send("s1", "wait here", false))
        .await
        .expect("the turn ends when its lease is lost");
    assert_eq!(response.status(), 409);
    assert_eq!(error_code(response).await, "conflict");
}

#[test]
fn serve_limits_and_origins_are_read_from_the_config_and_bad_values_refused() {
    let options = |text: &str| {
        let config =
            harness::HarnessConfig::parse_with(text, std::path::Path::new("harness.toml"), &harness_serve::sections())
                .unwrap();
        let section = config.section::<harness_serve::ServeSection>().unwrap();
        ServeOptions::from_section(section.as_ref()).map_err(|err| err.to_string())
    };
    let parsed = options(
        "[serve]\ncors_origins = [\"https://app.example\"]\nallowed_hosts = [\"api.example\"]\nheader_read_timeout = \"5s\"\n\
         body_read_timeout = 7\nidle_timeout = \"500ms\"\nmax_connections = 9\nmax_turns = 8\nmax_turns_per_user = 2\n",
    )
    .unwrap();
    assert_eq!(parsed.cors_origins, ["https://app.example"]);
    assert_eq!(parsed.allowed_hosts, ["api.example"]);
    assert_eq!(parsed.header_read_timeout, Duration::from_secs(5));
    assert_eq!(parsed.body_read_timeout, Duration::from_secs(7));
    assert_eq!(parsed.idle_timeout, Duration::from_millis(500));
    assert_eq!(
        (parsed.max_connections, parsed.max_turns, parsed.max_turns_per_user),
        (9, 8, 2)
    );
    // Defaults free a half-sent request within 30 s.
    let defaults = options("").unwrap();
    assert!(defaults.header_read_timeout <= Duration::from_secs(30));
    assert!(defaults.body_read_timeout <= Duration::from_secs(30));
    for (text, expected) in [
        (
            "[serve]\ncors_origins = [\"app.example\"]\n",
            "[serve] cors_origins: `app.example` is not an origin",
        ),
        (
            "[serve]\ncors_origins = [\"https://app.example/\"]\n",
            "is not an origin",
        ),
        (
            "[serve]\nidle_timeout = \"0s\"\n",
            "[serve] idle_timeout must be longer than 0s",
        ),
        (
            "[serve]\nmax_connections = 0\n",
            "[serve] max_connections must be at least 1",
        ),
        (
            "[serve]\nmax_turns_per_user = 0\n",
            "[serve] max_turns_per_user must be at least 1",
        ),
    ] {
        let err = options(text).unwrap_err();
        assert!(err.contains(expected), "{text}: {err}");
    }
}
