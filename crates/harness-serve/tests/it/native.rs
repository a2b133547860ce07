//! `/api`: agents, sessions, history, messages (JSON and SSE), resuming events, cancel,
//! users kept apart, bind checks.

use super::support::{Server, SseReader, agent, gated};
use harness_serve::{Gateway, ServeError, ServeOptions};
use serde_json::{Value, json};
use sha2::Digest;

#[tokio::test]
async fn a_message_gets_a_json_reply_and_lands_in_the_sessions_and_history() {
    let server = Server::start(ServeOptions::default()).await;
    let agents: Value = server.get("/api/agents").await.json().await.unwrap();
    assert_eq!(agents["agents"][0]["name"], "helper");

    let response = server.send("s1", "hello", false).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["text"], "turn 1: hello");
    assert_eq!(body["session_id"], "s1");
    assert_eq!(body["message"]["role"], "assistant");

    let sessions: Value = server.get("/api/agents/helper/sessions").await.json().await.unwrap();
    let ids: Vec<&str> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s1"]);
    assert_eq!(
        server.history("s1").await,
        [
            ("user".into(), "hello".into()),
            ("assistant".into(), "turn 1: hello".into())
        ]
    );
}

#[tokio::test]
async fn a_streamed_message_sends_typed_events_with_ids_ending_in_final() {
    let server = Server::start(ServeOptions::default()).await;
    let events = SseReader::new(server.send("s1", "use a tool", true).await).rest().await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    assert_eq!(names.first(), Some(&"turn_start"));
    assert_eq!(names.last(), Some(&"final"));
    for kind in ["tool_call_start", "tool_call", "tool_result", "text_delta", "step_end"] {
        assert!(names.contains(&kind), "{kind} missing from {names:?}");
    }
    // Ids grow; every data is the event's JSON with its type.
    let ids: Vec<u64> = events
        .iter()
        .map(|e| e.id.as_deref().unwrap().parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    for event in &events {
        assert_eq!(event.json()["type"], event.event.as_deref().unwrap());
    }
    let last = events.last().unwrap().json();
    assert_eq!(last["message"]["content"][0]["text"], "turn 1: listed");

    // Resuming after the first event replays the rest of the turn, from either form.
    let first = events[0].id.clone().unwrap();
    let resumed = server
        .client
        .get(server.url("/api/agents/helper/sessions/s1/events"))
        .header("last-event-id", &first)
        .send()
        .await
        .unwrap();
    let resumed = SseReader::new(resumed).rest().await;
    assert_eq!(resumed.len(), events.len() - 1);
    assert_eq!(resumed[0].id, events[1].id);
    let after = SseReader::new(
        server
            .get(&format!("/api/agents/helper/sessions/s1/events?after={first}"))
            .await,
    )
    .rest()
    .await;
    assert_eq!(after.len(), events.len() - 1);
}

/// A turn that runs out of steps reports it once: one `warning` with code `max_iterations`
/// (the kernel's typed limit event is not carried again as a second warning).
#[tokio::test]
async fn a_turn_out_of_steps_streams_one_max_iterations_warning() {
    let server = Server::start_with(ServeOptions::default(), Some("[agent]\nmax_iters = 1\n")).await;
    // "tool" makes the model call `list_files` in the only step; the last call answers.
    let events = SseReader::new(server.send("s1", "use a tool", true).await).rest().await;
    let warnings: Vec<Value> = events
        .iter()
        .filter(|event| event.event.as_deref() == Some("warning"))
        .map(super::support::Sse::json)
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["code"], "max_iterations");
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("all 1 reasoning steps"),
        "{warnings:?}"
    );
    assert_eq!(events.last().and_then(|event| event.event.as_deref()), Some("final"));
}

#[tokio::test]
async fn events_of_a_session_with_no_turn_here_are_404() {
    let server = Server::start(ServeOptions::default()).await;
    let response = server.get("/api/agents/helper/sessions/nothing/events").await;
    assert_eq!(response.status(), 404);
    assert_eq!(server.get("/api/agents/helper/sessions/nothing").await.status(), 404);
    assert_eq!(server.get("/api/agents/other/sessions").await.status(), 404);
    assert_eq!(server.send("../x", "hi", false).await.status(), 404);
    let bad = server
        .post("/api/agents/helper/sessions/s1/messages", json!({"text": "hi"}))
        .await;
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn cancel_ends_the_running_turn_which_is_still_saved() {
    let server = Server::start(ServeOptions::default()).await;
    let mut reader = SseReader::new(server.send("s1", "wait for me", true).await);
    assert_eq!(reader.next().await.unwrap().event.as_deref(), Some("turn_start"));
    let body: Value = server
        .post("/api/agents/helper/sessions/s1/cancel", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body, json!({"cancelled": true, "posted": false}));
    let events = reader.rest().await;
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(last.json()["kind"], "cancelled");
    assert_eq!(server.history("s1").await, [("user".into(), "wait for me".into())]);
    let again: Value = server
        .post("/api/agents/helper/sessions/s1/cancel", json!({}))
        .await
        .json()
        .await
        .unwrap();
    // Not running here: posted to the session's inbox for whichever replica runs it (none
    // does, so the next turn drops it).
    assert_eq!(again, json!({"cancelled": false, "posted": true}));
}

#[tokio::test]
async fn users_never_reach_each_others_sessions() {
    let keys = [("alice", "k-a"), ("bob", "k-b")].map(|(user, key)| harness_serve::ServeKey {
        user: user.into(),
        sha256: hex::encode(sha2::Sha256::digest(key)),
    });
    let mut options = ServeOptions::default();
    options.keys = keys.to_vec();
    let server = Server::start(options).await;
    let send = |key: &'static str| {
        server
            .client
            .post(server.url("/api/agents/helper/sessions/mine/messages"))
            .bearer_auth(key)
            .json(&json!({"message": "secret plans"}))
            .send()
    };
    assert_eq!(send("k-a").await.unwrap().status(), 200);
    let as_bob = |path: &str| server.client.get(server.url(path)).bearer_auth("k-b").send();
    assert_eq!(as_bob("/api/agents/helper/sessions/mine").await.unwrap().status(), 404);
    let listing: Value = as_bob("/api/agents/helper/sessions")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing, json!({"sessions": []}));
    let as_alice = server
        .client
        .get(server.url("/api/agents/helper/sessions/mine"))
        .bearer_auth("k-a");
    assert_eq!(as_alice.send().await.unwrap().status(), 200);
    assert_eq!(server.get("/api/agents/helper/sessions").await.status(), 401);
}

#[tokio::test]
async fn the_user_header_picks_the_user_when_no_keys_are_configured() {
    let server = Server::start(ServeOptions::default()).await;
    let send = server
        .client
        .post(server.url("/api/agents/helper/sessions/s/messages"))
        .header("x-harness-user", "carol")
        .json(&json!({"message": "hi"}));
    assert_eq!(send.send().await.unwrap().status(), 200);
    assert_eq!(server.get("/api/agents/helper/sessions/s").await.status(), 404);
    let as_carol = server
        .client
        .get(server.url("/api/agents/helper/sessions/s"))
        .header("x-harness-user", "carol");
    assert_eq!(as_carol.send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn without_keys_only_loopback_binds_are_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let build = |options| Gateway::new(vec![agent(dir.path(), gated(), "helper")], options).unwrap();
    let open = build(ServeOptions::default());
    assert!(open.check_bind("127.0.0.1:8080".parse().unwrap()).is_ok());
    assert!(open.check_bind("[::1]:0".parse().unwrap()).is_ok());
    let err = open.check_bind("0.0.0.0:8080".parse().unwrap()).unwrap_err();
    assert!(matches!(err, ServeError::Unauthenticated(_)));
    assert_eq!(
        err.to_string(),
        "refusing to listen on 0.0.0.0:8080 without API keys: add [[serve.keys]] (user + sha256 of the key) to \
         harness.toml, or bind a loopback address such as 127.0.0.1:8080"
    );
    let mut options = ServeOptions::default();
    options.keys = vec![harness_serve::ServeKey {
        user: "alice".into(),
        sha256: "ab".repeat(32),
    }];
    assert!(build(options).check_bind("0.0.0.0:8080".parse().unwrap()).is_ok());
}

#[tokio::test]
async fn the_chat_page_is_served_at_the_root() {
    let server = Server::start(ServeOptions::default()).await;
    let response = server.get("/").await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = response.text().await.unwrap();
    // The page drives the native API: agents, sessions, streamed messages, cancel.
    for needle in [
        "/api/agents",
        "/sessions",
        "/messages",
        "stream: true",
        "/cancel",
        "tool_call",
    ] {
        assert!(page.contains(needle), "{needle}");
    }
}

#[test]
fn the_serve_section_is_checked_with_the_rest_of_harness_toml() {
    let parse = |text: &str| {
        harness::HarnessConfig::parse_with(text, std::path::Path::new("harness.toml"), &harness_serve::sections())
    };
    let config = parse(
        "[serve]\nbind = \"127.0.0.1:9000\"\nmax_queued_per_session = 3\n[[serve.keys]]\nuser = \"alice\"\nsha256 = \"ab\"\n",
    )
    .unwrap();
    let section = config.section::<harness_serve::ServeSection>().unwrap().unwrap();
    assert_eq!(section.bind.as_deref(), Some("127.0.0.1:9000"));
    let options = ServeOptions::from_section(Some(&section)).unwrap();
    assert_eq!(options.max_queued_per_session, 3);
    assert_eq!(options.keys.len(), 1);
    let unknown = parse("[serve]\nport = 80\n").unwrap_err().to_string();
    assert!(unknown.contains("unknown field `port`"), "{unknown}");
    let zero = parse("[serve]\nmax_queued_per_session = 0\n").unwrap();
    let err = ServeOptions::from_section(zero.section::<harness_serve::ServeSection>().unwrap().as_ref()).unwrap_err();
    // Without `[serve]`'s registration the section is unknown (harness does not own it).
    let err_unregistered =
        harness::HarnessConfig::parse("[serve]\nbind = \"x\"\n", std::path::Path::new("harness.toml"))
            .unwrap_err()
            .to_string();
    assert!(
        err_unregistered.contains("unknown section `serve`"),
        "{err_unregistered}"
    );
    assert_eq!(err.to_string(), "[serve] max_queued_per_session must be at least 1");
    // A malformed key hash is refused when the server is built, naming the entry.
    let dir = tempfile::tempdir().unwrap();
    let err = Gateway::new(vec![agent(dir.path(), gated(), "helper")], options).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[[serve.keys]] entry 1: sha256 must be 64 hex digits (e.g. `printf %s KEY | sha256sum`)"
    );
}
