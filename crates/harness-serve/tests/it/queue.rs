//! The per-session fair queue: arrival order, a bounded queue (429), clients that go away,
//! and shutdown that finishes the running turn.

use super::support::{Server, SseReader};
use harness_serve::ServeOptions;
use serde_json::Value;

/// Starts a turn that waits at the gate and returns once it runs.
async fn block(server: &Server, session: &str) -> SseReader {
    let mut reader = SseReader::new(server.send(session, "wait", true).await);
    assert_eq!(reader.next().await.unwrap().event.as_deref(), Some("turn_start"));
    reader
}

#[tokio::test]
async fn twenty_concurrent_messages_run_one_at_a_time_in_arrival_order() {
    let server = Server::start(ServeOptions::default()).await;
    let blocker = block(&server, "s").await;
    // 20 concurrent requests; each learns its place in the queue from its first event.
    let requests = (0..20).map(|i| {
        let server = &server;
        async move {
            let mut reader = SseReader::new(server.send("s", &format!("m{i}"), true).await);
            let queued = reader.next().await.unwrap();
            assert_eq!(queued.event.as_deref(), Some("turn_queued"));
            let ahead = queued.json()["ahead"].as_u64().unwrap();
            (ahead, i, reader)
        }
    });
    let mut queued = futures::future::join_all(requests).await;
    queued.sort_by_key(|(ahead, _, _)| *ahead);
    let places: Vec<u64> = queued.iter().map(|(ahead, _, _)| *ahead).collect();
    assert_eq!(places, (1..=20).collect::<Vec<u64>>(), "each request has its own place");
    server.gate.add_permits(1);
    drop(blocker);
    let mut expected = vec![
        ("user".to_owned(), "wait".to_owned()),
        ("assistant".to_owned(), "turn 1: wait".to_owned()),
    ];
    for (turn, (_, i, reader)) in queued.into_iter().enumerate() {
        let last = reader.rest().await.pop().unwrap();
        assert_eq!(last.event.as_deref(), Some("final"), "{}", last.data);
        let text = format!("m{i}");
        expected.push(("assistant".to_owned(), format!("turn {}: {text}", turn + 2)));
        expected.insert(expected.len() - 1, ("user".to_owned(), text));
    }
    // Every turn is in the history once, in the order the requests arrived.
    assert_eq!(server.history("s").await, expected);
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after_and_drops_nothing() {
    let mut options = ServeOptions::default();
    options.max_queued_per_session = 2;
    let server = Server::start(options).await;
    let blocker = block(&server, "s").await;
    let first = SseReader::new(server.send("s", "q1", true).await);
    let second = SseReader::new(server.send("s", "q2", true).await);
    let refused = server.send("s", "q3", false).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "session_queue_full");
    // Other sessions are not affected.
    assert_eq!(server.send("other", "hi", false).await.status(), 200);
    server.gate.add_permits(1);
    for reader in [blocker, first, second] {
        assert_eq!(reader.rest().await.pop().unwrap().event.as_deref(), Some("final"));
    }
    let users: Vec<String> = server
        .history("s")
        .await
        .into_iter()
        .filter(|(role, _)| role == "user")
        .map(|(_, text)| text)
        .collect();
    assert_eq!(users, ["wait", "q1", "q2"]);
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_does_not_stop_the_turn() {
    let server = Server::start(ServeOptions::default()).await;
    let reader = block(&server, "s").await;
    drop(reader); // the client goes away while the model is still working
    server.gate.add_permits(1);
    // Following the session's events shows the turn finishing; it is in the history.
    let events = SseReader::new(server.get("/api/agents/helper/sessions/s/events").await)
        .rest()
        .await;
    assert_eq!(events.last().unwrap().event.as_deref(), Some("final"));
    assert_eq!(
        server.history("s").await,
        [
            ("user".into(), "wait".into()),
            ("assistant".into(), "turn 1: wait".into())
        ]
    );
}

#[tokio::test]
async fn shutdown_finishes_the_running_turn_and_refuses_the_queued_ones() {
    let mut server = Server::start(ServeOptions::default()).await;
    let running = block(&server, "s").await;
    let mut queued = SseReader::new(server.send("s", "later", true).await);
    assert_eq!(queued.next().await.unwrap().event.as_deref(), Some("turn_queued"));
    let stopped = server.shutdown();
    // The queued message ends with a shutting_down error ...
    let last = queued.rest().await.pop().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(last.json()["status"], 503);
    // ... while the running turn completes before serve returns.
    assert!(!stopped.is_finished());
    server.gate.add_permits(1);
    let last = running.rest().await.pop().unwrap();
    assert_eq!(last.event.as_deref(), Some("final"));
    stopped.await.unwrap().unwrap();
}
