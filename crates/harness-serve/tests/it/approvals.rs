//! `/api/.../approvals`: a turn that waits for a person says so (JSON, SSE, OpenAI route),
//! the pending calls are listed, decisions resume the turn through the session's queue, and
//! bad decisions are refused with what to do.

use super::support::{ASK_LIST, Server, SseReader};
use harness_serve::ServeOptions;
use serde_json::{Value, json};

const APPROVALS: &str = "/api/agents/helper/sessions/s1/approvals";

async fn asking_server() -> Server {
    Server::start_with(ServeOptions::default(), Some(ASK_LIST)).await
}

/// Sends `use a tool` and returns the pending call's id (checking the JSON reply says so).
async fn ask(server: &Server) -> String {
    let response = server.send("s1", "use a tool", false).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "awaiting_approval", "{body}");
    assert_eq!(body["pending"][0]["tool"], "list_files");
    body["pending"][0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_waiting_turn_lists_its_call_and_approving_it_runs_the_rest_of_the_turn() {
    let server = asking_server().await;
    let call = ask(&server).await;

    let listed: Value = server.get(APPROVALS).await.json().await.unwrap();
    assert_eq!(listed["pending"][0]["id"], call.as_str());
    assert_eq!(listed["pending"][0]["input"], json!({"path": "."}));
    let history: Value = server.get("/api/agents/helper/sessions/s1").await.json().await.unwrap();
    assert_eq!(history["pending_approvals"][0]["id"], call.as_str());

    let response = server
        .post(
            APPROVALS,
            json!({"decisions": [{"call_id": call, "decision": "approve"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["text"], "turn 1: listed");
    let listed: Value = server.get(APPROVALS).await.json().await.unwrap();
    assert_eq!(listed["pending"], json!([]));
    let history: Value = server.get("/api/agents/helper/sessions/s1").await.json().await.unwrap();
    assert_eq!(history["pending_approvals"], json!([]));
}

#[tokio::test]
async fn the_stream_carries_approval_required_and_a_streamed_decision_streams_the_rest() {
    let server = asking_server().await;
    let events = SseReader::new(server.send("s1", "use a tool", true).await).rest().await;
    let asked = events
        .iter()
        .find(|e| e.event.as_deref() == Some("approval_required"))
        .expect("approval_required event");
    let call = asked.json()["calls"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(events.last().unwrap().event.as_deref(), Some("final"));

    let resumed = server.post(APPROVALS, json!({"all": "approve", "stream": true})).await;
    let events = SseReader::new(resumed).rest().await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    assert!(names.contains(&"tool_result"), "{names:?}");
    let last = events.last().unwrap().json();
    assert_eq!(last["type"], "final");
    assert_eq!(last["message"]["content"][0]["text"], "turn 1: listed");
    let result = events
        .iter()
        .find(|e| e.event.as_deref() == Some("tool_result"))
        .unwrap()
        .json();
    assert_eq!(result["id"], call.as_str());
    assert_eq!(result["is_error"], false);
}

#[tokio::test]
async fn a_denied_call_is_not_run_and_the_model_is_told_a_person_refused() {
    let server = asking_server().await;
    let call = ask(&server).await;
    let response = server
        .post(
            APPROVALS,
            json!({"decisions": [{"call_id": call, "decision": "deny", "note": "not now"}], "stream": true}),
        )
        .await;
    let events = SseReader::new(response).rest().await;
    let result = events
        .iter()
        .find(|e| e.event.as_deref() == Some("tool_result"))
        .expect("the refused call gets a result")
        .json();
    assert_eq!(result["is_error"], true);
    assert!(result["output"].as_str().unwrap().contains("not now"), "{result}");
    assert_eq!(events.last().unwrap().json()["type"], "final");
}

/// `always` reaches the library as approve-always (what it adds to the session's rules
/// cannot beat this test's explicit `ask` rule, so the next call still asks).
#[tokio::test]
async fn approve_always_is_accepted_and_runs_the_call() {
    let server = asking_server().await;
    let call = ask(&server).await;
    let body: Value = server
        .post(
            APPROVALS,
            json!({"decisions": [{"call_id": call, "decision": "approve", "always": true}]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["text"], "turn 1: listed");
}

#[tokio::test]
async fn bad_decisions_are_refused_with_what_to_do() {
    let server = asking_server().await;
    // Nothing pending yet: 404.
    server.send("s1", "hello", false).await;
    let response = server.post(APPROVALS, json!({"all": "approve"})).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("nothing"), "{body}");

    let call = ask(&server).await;
    let refused = [
        (
            json!({"decisions": [{"call_id": "nope", "decision": "approve"}]}),
            "not waiting",
        ),
        (
            json!({"decisions": [{"call_id": call, "decision": "maybe"}]}),
            "not one of",
        ),
        (
            json!({"decisions": [{"call_id": call, "decision": "deny", "args": {"path": "x"}}]}),
            "make no sense",
        ),
        (
            json!({"decisions": [{"call_id": call, "decision": "deny", "always": true}]}),
            "only goes with",
        ),
        (json!({"decisions": []}), "empty"),
        (json!({}), "no decision"),
        (json!({"all": "approve", "decisions": []}), "not both"),
        (json!({"verdict": "yes"}), "invalid request body"),
    ];
    for (request, says) in refused {
        let response = server.post(APPROVALS, request.clone()).await;
        assert_eq!(response.status(), 400, "{request}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{request}: {message}");
    }
    // Nothing ran: the call still waits.
    let listed: Value = server.get(APPROVALS).await.json().await.unwrap();
    assert_eq!(listed["pending"][0]["id"], call.as_str());
}

#[tokio::test]
async fn another_users_approvals_are_not_reachable() {
    let server = asking_server().await;
    ask(&server).await;
    let response = server
        .client
        .post(server.url(APPROVALS))
        .header("x-harness-user", "mallory")
        .json(&json!({"all": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let listed: Value = server
        .client
        .get(server.url(APPROVALS))
        .header("x-harness-user", "mallory")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["pending"], json!([]));
}

#[tokio::test]
async fn the_openai_route_says_in_text_and_extension_that_the_turn_waits() {
    let server = asking_server().await;
    let body: Value = server
        .post(
            "/v1/chat/completions",
            json!({"model": "helper", "messages": [{"role": "user", "content": "use a tool"}]}),
        )
        .await
        .json()
        .await
        .unwrap();
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("[waiting for approval: list_files"), "{content}");
    assert!(content.contains("/approvals"), "{content}");
    assert_eq!(body["harness"]["status"], "awaiting_approval");
    assert_eq!(body["harness"]["pending"][0]["tool"], "list_files");

    let response = server
        .post(
            "/v1/chat/completions",
            json!({"model": "helper", "stream": true, "messages": [{"role": "user", "content": "use a tool"}]}),
        )
        .await;
    let chunks = SseReader::new(response).rest().await;
    assert!(
        chunks
            .iter()
            .any(|c| c.data != "[DONE]" && c.json()["harness"]["type"] == "approval_required"),
        "{chunks:?}"
    );
    let text: String = chunks
        .iter()
        .filter(|c| c.data != "[DONE]")
        .filter_map(|c| c.json()["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert!(text.contains("[waiting for approval: list_files"), "{text}");
}
