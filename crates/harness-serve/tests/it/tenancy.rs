//! Tenancy with API keys under each of the four isolation scopes: alice tries every session
//! route and every session/task tool on bob's session, task and approval ids, and gets
//! nothing (404 over HTTP, no content in a tool result), while bob's task keeps running.

use super::support::{Gated, Server};
use harness::HarnessAgent;
use harness_serve::ServeOptions;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const BOB_SESSION: &str = "bobsession1";
const BOB_TASKS_SESSION: &str = "bobtasks1";
/// A word only bob's conversation contains.
const BOB_SECRET: &str = "zebrafish42";

fn key(user: &str, secret: &str) -> harness_serve::ServeKey {
    harness_serve::ServeKey {
        user: user.to_owned(),
        sha256: hex::encode(Sha256::digest(secret.as_bytes())),
    }
}

fn agent(dir: &std::path::Path, model: Gated, scope: &str) -> HarnessAgent {
    let mut memory = harness_memory::MemoryConfig::default();
    memory.mode = harness_memory::MemoryMode::Off;
    let config = format!("[agent]\nisolation = \"{scope}\"\n[permissions]\nask = [\"list_files\"]\n");
    HarnessAgent::builder()
        .memory(memory)
        .workspace(dir)
        .name("helper")
        .model(model)
        .subagent(harness::subagents::SubagentDeclaration::new(
            "researcher",
            "Finds facts",
            "You research.",
        ))
        .config(harness::HarnessConfig::parse(&config, std::path::Path::new("harness.toml")).unwrap())
        .build()
        .unwrap()
}

struct As<'a> {
    server: &'a Server,
    key: &'static str,
}

impl As<'_> {
    async fn get(&self, path: &str) -> reqwest::Response {
        self.server
            .client
            .get(self.server.url(path))
            .bearer_auth(self.key)
            .send()
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.server
            .client
            .post(self.server.url(path))
            .bearer_auth(self.key)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Sends `message` to `session` and returns the JSON reply.
    async fn say(&self, session: &str, message: &str) -> Value {
        let response = self
            .post(
                &format!("/api/agents/helper/sessions/{session}/messages"),
                json!({"message": message}),
            )
            .await;
        assert_eq!(response.status(), 200, "{message}");
        response.json().await.unwrap()
    }
}

async fn isolated_under(scope: &str) {
    let mut options = ServeOptions::default();
    options.keys = vec![key("alice", "k-alice"), key("bob", "k-bob")];
    let server = Server::start_built(options, |dir, model| agent(dir, model, scope)).await;
    let alice = As {
        server: &server,
        key: "k-alice",
    };
    let bob = As {
        server: &server,
        key: "k-bob",
    };

    // bob: a conversation with a secret word and a call waiting for approval, and a
    // background task that waits at the gate.
    let reply = bob.say(BOB_SESSION, &format!("{BOB_SECRET} tool")).await;
    assert_eq!(reply["status"], "awaiting_approval", "{reply}");
    let call_id = reply["pending"][0]["id"].as_str().unwrap().to_owned();
    let reply = bob.say(BOB_TASKS_SESSION, "spawn:hold").await;
    assert_eq!(reply["status"], "completed", "{reply}");
    let listed: Value = bob
        .get(&format!("/api/agents/helper/sessions/{BOB_TASKS_SESSION}/tasks"))
        .await
        .json()
        .await
        .unwrap();
    let task = listed["tasks"][0]["task_id"].as_str().unwrap().to_owned();

    // Every route on bob's ids answers alice 404.
    let session = format!("/api/agents/helper/sessions/{BOB_SESSION}");
    let tasks = format!("/api/agents/helper/sessions/{BOB_TASKS_SESSION}/tasks");
    for path in [
        session.clone(),
        format!("{session}/events"),
        format!("{session}/approvals"),
        format!("{session}/tasks"),
        tasks.clone(),
        format!("{tasks}/{task}"),
        format!("{tasks}/{task}/events"),
    ] {
        let response = alice.get(&path).await;
        let status = response.status();
        let body = response.text().await.unwrap();
        // Under `user` scope the id names alice's own (empty) session in her namespace.
        let own_empty = scope == "user"
            && status == 200
            && !body.contains(BOB_SECRET)
            && !body.contains(&call_id)
            && !body.contains(&task);
        assert!(status == 404 || own_empty, "{scope}: GET {path}: {status} {body}");
    }
    // Under `user` scope alice's `bobsession1` is her own (empty) session in her own
    // namespace: cancelling there stops nothing of bob's.
    let response = alice.post(&format!("{session}/cancel"), json!({})).await;
    let status = response.status();
    let body = response.text().await.unwrap();
    assert!(
        status == 404 || (scope == "user" && status == 200 && body.contains("\"cancelled\":false")),
        "{scope}: cancel: {status} {body}"
    );
    for (path, body) in [
        (
            format!("{session}/approvals"),
            json!({"decisions": [{"call_id": call_id, "decision": "approve"}]}),
        ),
        (format!("{session}/approvals"), json!({"all": "approve"})),
        (format!("{tasks}/{task}/cancel"), json!({})),
    ] {
        assert_eq!(alice.post(&path, body).await.status(), 404, "{scope}: POST {path}");
    }
    // Continuing bob's session: 404, or (user scope) a first turn of alice's own session.
    let response = alice
        .post(&format!("{session}/messages"), json!({"message": "hello"}))
        .await;
    let status = response.status();
    let body = response.text().await.unwrap();
    assert!(
        status == 404 || (scope == "user" && status == 200 && body.contains("turn 1: hello")),
        "{scope}: continue: {status} {body}"
    );
    // The OpenAI endpoint on bob's session id.
    let response = server
        .client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth("k-alice")
        .header("x-harness-session", BOB_SESSION)
        .json(&json!({"model": "helper", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    assert!(
        status == 404 || (scope == "user" && status == 200 && !body.contains(BOB_SECRET)),
        "{scope}: openai on bob's session: {status} {body}"
    );
    // alice's list shows none of bob's sessions.
    let list: Value = alice.get("/api/agents/helper/sessions").await.json().await.unwrap();
    let text = list.to_string();
    assert!(!text.contains(BOB_TASKS_SESSION), "{scope}: {text}");
    assert!(scope == "user" || !text.contains(BOB_SESSION), "{scope}: {text}");

    // The model's ways in, from alice's own session.
    for call in [
        "call:session_list {}".to_owned(),
        format!("call:session_history {{\"sessionId\": \"{BOB_SESSION}\"}}"),
        format!("call:session_search {{\"query\": \"{BOB_SECRET}\"}}"),
        format!("call:task_output {{\"task_id\": \"{task}\", \"block\": false}}"),
        format!("call:task_cancel {{\"task_id\": \"{task}\"}}"),
        "call:task_list {}".to_owned(),
    ] {
        let reply = alice.say("alice1", &call).await;
        let text = reply["text"].as_str().unwrap();
        assert!(text.starts_with("result:"), "{scope}: {call}: {reply}");
        assert!(
            !text.contains(&format!("{BOB_SECRET} tool"))
                && !text.contains(&format!("{BOB_SESSION}.log"))
                && !text.contains(&format!("session {BOB_SESSION}"))
                && !text.contains(BOB_TASKS_SESSION)
                && !text.contains("\"hold"),
            "{scope}: {call} showed bob's conversation: {text}"
        );
    }

    // bob's call still waits and his task still runs.
    let pending: Value = bob.get(&format!("{session}/approvals")).await.json().await.unwrap();
    assert_eq!(pending["pending"][0]["id"], call_id.as_str(), "{scope}");
    let record: Value = bob.get(&format!("{tasks}/{task}")).await.json().await.unwrap();
    assert_eq!(record["task"]["status"], "running", "{scope}: {record}");
    // And bob sees his own session.
    let history = bob.get(&session).await;
    assert_eq!(history.status(), 200);
    assert!(history.text().await.unwrap().contains(BOB_SECRET));
    server.gate.add_permits(4);
}

#[tokio::test]
async fn user_scope_keeps_each_users_sessions_and_tasks_to_them() {
    isolated_under("user").await;
}

#[tokio::test]
async fn session_scope_keeps_each_users_sessions_and_tasks_to_them() {
    isolated_under("session").await;
}

#[tokio::test]
async fn agent_scope_keeps_each_users_sessions_and_tasks_to_them() {
    isolated_under("agent").await;
}

#[tokio::test]
async fn global_scope_keeps_each_users_sessions_and_tasks_to_them() {
    isolated_under("global").await;
}
