//! Session control over HTTP (issue 31): observe (row 4), clear (row 39), the session's
//! permission mode (row 240) and plan mode (row 228), and interrupt and cancel posted to one
//! gateway reaching a turn that runs on another one sharing the workspace (row 8).

use super::support::{Server, agent, gated};
use harness_serve::{Gateway, ServeOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const SESSION: &str = "/api/agents/helper/sessions/s";

#[tokio::test]
async fn observed_messages_are_in_the_history_and_seen_by_the_next_turn() {
    let server = Server::start(ServeOptions::default()).await;
    let observed = server
        .post(
            &format!("{SESSION}/observe"),
            json!({"messages": [{"content": "my name is Ada"}, {"role": "assistant", "content": "hello Ada"}]}),
        )
        .await;
    assert_eq!(observed.status(), 200);
    assert_eq!(observed.json::<Value>().await.unwrap()["observed"], 2);
    assert_eq!(
        server.history("s").await,
        [
            ("user".into(), "my name is Ada".into()),
            ("assistant".into(), "hello Ada".into())
        ]
    );
    // The scripted model counts the user messages it is sent: the observed one is among them.
    let reply: Value = server.send("s", "who am I?", false).await.json().await.unwrap();
    assert_eq!(reply["text"], "turn 2: who am I?");

    let bad = server
        .post(
            &format!("{SESSION}/observe"),
            json!({"messages": [{"role": "tool", "content": "x"}]}),
        )
        .await;
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("cannot be observed"));
}

#[tokio::test]
async fn clear_starts_the_context_afresh_and_the_history_keeps_everything() {
    let server = Server::start(ServeOptions::default()).await;
    server.send("s", "one", false).await;
    server.send("s", "two", false).await;
    let cleared = server.post(&format!("{SESSION}/clear"), json!({})).await;
    assert_eq!(cleared.status(), 200);
    let reply: Value = server.send("s", "three", false).await.json().await.unwrap();
    assert_eq!(reply["text"], "turn 1: three", "the model sees only the new message");
    assert_eq!(server.history("s").await.len(), 6, "the history keeps every message");
}

#[tokio::test]
async fn a_mode_above_harness_toml_is_refused_and_one_below_is_kept_in_the_session() {
    let server = Server::start_with(ServeOptions::default(), Some("[permissions]\nmode = \"default\"\n")).await;
    server.send("s", "hello", false).await;
    let above = server.post(&format!("{SESSION}/mode"), json!({"mode": "bypass"})).await;
    assert_eq!(above.status(), 400);
    assert!(above.text().await.unwrap().contains("more permissive"));
    let unknown = server.post(&format!("{SESSION}/mode"), json!({"mode": "yolo"})).await;
    assert_eq!(unknown.status(), 400);
    let below = server
        .post(&format!("{SESSION}/mode"), json!({"mode": "explore"}))
        .await;
    assert_eq!(below.status(), 200);
    let history: Value = server.get(SESSION).await.json().await.unwrap();
    assert_eq!(history["control"]["permission_mode"], "explore", "{history}");
    assert_eq!(history["control"]["shutdown_cut"], Value::Null);
}

#[tokio::test]
async fn plan_mode_is_switched_by_the_api_and_refused_when_off() {
    let off = Server::start(ServeOptions::default()).await;
    let refused = off.post(&format!("{SESSION}/plan"), json!({"active": true})).await;
    assert_eq!(refused.status(), 400);
    assert!(refused.text().await.unwrap().contains("[plan] enabled"));

    let on = Server::start_with(ServeOptions::default(), Some("[plan]\nenabled = true\n")).await;
    on.send("s", "hello", false).await;
    assert_eq!(
        on.post(&format!("{SESSION}/plan"), json!({"active": true}))
            .await
            .status(),
        200
    );
    let history: Value = on.get(SESSION).await.json().await.unwrap();
    assert_eq!(history["control"]["plan_mode"], true, "{history}");
}

/// Two gateways on one workspace (two replicas sharing the `[state]` files and the lock
/// directory); the shared gate of their models.
struct Replicas {
    bases: [String; 2],
    gate: Arc<tokio::sync::Semaphore>,
    client: reqwest::Client,
    dir: tempfile::TempDir,
}

async fn replicas() -> Replicas {
    let dir = tempfile::tempdir().unwrap();
    let model = gated();
    let gate = Arc::clone(&model.gate);
    let mut bases = Vec::new();
    for _ in 0..2 {
        let gateway = Gateway::new(
            vec![agent(dir.path(), model.clone(), "helper")],
            ServeOptions::default(),
        )
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        bases.push(format!("http://{}", listener.local_addr().unwrap()));
        tokio::spawn(gateway.serve(listener, std::future::pending()));
    }
    Replicas {
        bases: bases.try_into().unwrap(),
        gate,
        client: reqwest::Client::new(),
        dir,
    }
}

impl Replicas {
    async fn post(&self, replica: usize, path: &str, body: Value) -> reqwest::Response {
        let url = format!("{}{path}", self.bases[replica]);
        self.client.post(url).json(&body).send().await.unwrap()
    }

    /// Waits until the session's inbox was read empty by the running turn.
    async fn await_inbox_taken(&self) {
        for _ in 0..500 {
            let inbox = find(self.dir.path(), "s.inbox");
            if let Some(dir) = inbox
                && let Ok(bytes) = std::fs::read(dir.join("agent_state.json"))
                && let Ok(state) = serde_json::from_slice::<Value>(&bytes)
                && state["state"]["extensions"]["inbox"]["signals"] == json!([])
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let inbox = find(self.dir.path(), "s.inbox");
        let files = inbox.map(|dir| {
            std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| (e.path(), std::fs::read_to_string(e.path()).unwrap_or_default()))
                .collect::<Vec<_>>()
        });
        panic!("the running turn never read its inbox: {files:?}");
    }
}

fn find(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).ok()?.flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == name) {
                return Some(path);
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    None
}

#[tokio::test]
async fn an_interrupt_posted_to_replica_b_reaches_the_turn_running_on_replica_a() {
    let replicas = Arc::new(replicas().await);
    let running = Arc::clone(&replicas);
    let turn = tokio::spawn(async move {
        let body = json!({"message": "wait, then use a tool"});
        running
            .post(0, &format!("{SESSION}/messages"), body)
            .await
            .json::<Value>()
            .await
            .unwrap()
    });
    // The turn runs on A (its model waits at the gate); B posts the interrupt.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let posted = replicas
        .post(1, &format!("{SESSION}/interrupt"), json!({"message": "PS use metric"}))
        .await;
    assert_eq!(posted.status(), 200);
    replicas.await_inbox_taken().await;
    replicas.gate.add_permits(1);
    let reply = turn.await.unwrap();
    // After the tool step the model was sent the injected message (the scripted model
    // answers the last user message).
    assert_eq!(reply["text"], "turn 2: PS use metric", "{reply}");
}

#[tokio::test]
async fn a_cancel_posted_to_replica_b_cancels_the_turn_running_on_replica_a() {
    let replicas = Arc::new(replicas().await);
    let running = Arc::clone(&replicas);
    let turn = tokio::spawn(async move {
        let body = json!({"message": "wait forever"});
        running.post(0, &format!("{SESSION}/messages"), body).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancel: Value = replicas
        .post(1, &format!("{SESSION}/cancel"), json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(cancel, json!({"cancelled": false, "posted": true}));
    // A liveness bound: the gate never opens, only the cancel ends the turn.
    let response = tokio::time::timeout(Duration::from_secs(60), turn)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 503, "cancelled");
    assert!(response.text().await.unwrap().contains("cancel"));
}

/// Row 41: a turn the shutdown cancels (after the grace period) is flagged in the session,
/// shown with its history by the next server and offered to resume; the resuming turn
/// clears the flag.
#[tokio::test]
async fn a_turn_cut_by_the_shutdown_is_flagged_in_the_history_after_a_restart() {
    let mut options = ServeOptions::default();
    options.shutdown_grace = Duration::from_millis(200);
    let mut server = Server::start(options).await;
    let base = server.base.clone();
    let client = server.client.clone();
    let turn = tokio::spawn(async move {
        let url = format!("{base}{SESSION}/messages");
        client
            .post(url)
            .json(&json!({"message": "wait for me"}))
            .send()
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.shutdown().await.unwrap().unwrap();
    assert_eq!(turn.await.unwrap().status(), 503, "the cut turn ends with an error");

    // The next server on the same workspace.
    let model = gated();
    let gate = Arc::clone(&model.gate);
    let gateway = Gateway::new(
        vec![agent(server.workspace(), model, "helper")],
        ServeOptions::default(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway.serve(listener, std::future::pending()));
    let client = reqwest::Client::new();
    let history: Value = client
        .get(format!("{base}{SESSION}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(history["control"]["shutdown_cut"].is_string(), "{history}");
    assert!(
        history["control"]["resume"].as_str().unwrap().contains("/messages"),
        "{history}"
    );

    gate.add_permits(1);
    let resumed = client
        .post(format!("{base}{SESSION}/messages"))
        .json(&json!({"message": "wait for me"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let history: Value = client
        .get(format!("{base}{SESSION}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(history["control"]["shutdown_cut"], Value::Null, "{history}");
}

/// Rows 212, 213, 264: code exposes a labelled subagent instance of a session; the user
/// talks to it directly over the native API (it keeps its conversation), also after the
/// server restarts; another user, and an instance that is not exposed, get 404.
#[tokio::test]
async fn an_exposed_subagent_answers_the_user_directly_after_a_restart_and_others_get_404() {
    let dir = tempfile::tempdir().unwrap();
    let model = gated();
    let parent = agent(dir.path(), model.clone(), "helper");
    let alice = harness_core::RuntimeContext::for_user(harness_core::UserId::parse("alice").unwrap())
        .with_session(harness_core::SessionId::parse("s").unwrap());
    let spawn = harness::subagents::SpawnRequest::new("researcher", "first task")
        .label("r1")
        .wait(Duration::from_secs(60));
    let first = parent.spawn_subagent(alice.clone(), spawn).await.unwrap();
    assert_eq!(first.result.as_deref(), Some("turn 1: first task"));
    let unknown = parent.expose_subagent("nobody", alice.clone()).await;
    assert!(
        matches!(unknown, Err(harness_core::AgentError::Refused { .. })),
        "{unknown:?}"
    );
    parent.expose_subagent("r1", alice).await.unwrap();
    drop(parent);

    // A server started afterwards (a restart, or another replica) on the same workspace.
    let gateway = Gateway::new(vec![agent(dir.path(), model, "helper")], ServeOptions::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway.serve(listener, std::future::pending()));
    let client = reqwest::Client::new();
    let as_user = |user: &str, request: reqwest::RequestBuilder| request.header("X-Harness-User", user.to_owned());
    let listed: Value = as_user("alice", client.get(format!("{base}{SESSION}/subagents")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed,
        json!({"subagents": [{"label": "r1", "agent_id": "researcher"}]})
    );
    let url = format!("{base}{SESSION}/subagents/r1/messages");
    let reply = as_user("alice", client.post(&url))
        .json(&json!({"message": "and now?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let reply: Value = reply.json().await.unwrap();
    assert_eq!(
        reply["text"], "turn 2: and now?",
        "the child keeps its conversation: {reply}"
    );

    let other = as_user("bob", client.post(&url))
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404, "another user");
    let hidden = as_user("alice", client.post(format!("{base}{SESSION}/subagents/r2/messages")))
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(hidden.status(), 404, "not exposed");
}

/// Row 39: while a call waits for approval, `…/clear` is a 400 that says to decide it first.
#[tokio::test]
async fn clear_is_refused_while_a_call_waits_for_approval() {
    let server = Server::start_with(ServeOptions::default(), Some(super::support::ASK_LIST)).await;
    let reply: Value = server.send("s", "use a tool", false).await.json().await.unwrap();
    assert_eq!(reply["status"], "awaiting_approval", "{reply}");
    let refused = server.post(&format!("{SESSION}/clear"), json!({})).await;
    assert_eq!(refused.status(), 400);
    assert!(refused.text().await.unwrap().contains("approval"));
    let pending: Value = server.get(&format!("{SESSION}/approvals")).await.json().await.unwrap();
    assert_eq!(
        pending["pending"].as_array().map(Vec::len),
        Some(1),
        "still waiting: {pending}"
    );
}
