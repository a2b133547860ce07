//! `/api/.../tasks`: a session's subagent tasks listed and read, a running task's events
//! followed over SSE, a task cancelled; other users and unknown tasks get 404.

use super::support::{Server, SseReader};
use harness_serve::ServeOptions;
use serde_json::Value;

const TASKS: &str = "/api/agents/helper/sessions/s1/tasks";

/// Starts a background `researcher` task on `task` in session s1; its id.
async fn spawn(server: &Server, task: &str) -> String {
    let body: Value = server
        .send("s1", &format!("spawn:{task}"), false)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    let listed: Value = server.get(TASKS).await.json().await.unwrap();
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["agent_id"], "researcher");
    tasks[0]["task_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_background_task_is_listed_read_and_its_events_streamed() {
    let server = Server::start(ServeOptions::default()).await;
    let task = spawn(&server, "look around").await;

    // Its events as SSE: the child's own, tagged with its source, ending with its answer.
    let events = SseReader::new(server.get(&format!("{TASKS}/{task}/events")).await)
        .rest()
        .await;
    let last = events.last().expect("events").json();
    assert_eq!(last["type"], "final", "{events:?}");
    assert_eq!(last["source"]["agent_id"], "researcher");
    assert_eq!(last["message"]["content"][0]["text"], "turn 1: look around");
    assert!(events.iter().all(|e| e.json()["source"]["agent_id"] == "researcher"));

    let read: Value = server.get(&format!("{TASKS}/{task}")).await.json().await.unwrap();
    assert_eq!(read["task"]["task_id"], task.as_str());
    assert_eq!(read["task"]["status"], "completed", "{read}");
    assert_eq!(read["local"], true);
    assert!(
        read["events"].as_array().unwrap().iter().any(|e| e["type"] == "final"),
        "{read}"
    );
}

#[tokio::test]
async fn a_running_task_is_cancelled() {
    let server = Server::start(ServeOptions::default()).await;
    let task = spawn(&server, "hold").await;
    let read: Value = server.get(&format!("{TASKS}/{task}")).await.json().await.unwrap();
    assert_eq!(read["task"]["status"], "running", "{read}");
    let response = server
        .post(&format!("{TASKS}/{task}/cancel"), serde_json::json!({}))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["task"]["status"], "cancelled", "{body}");
}

#[tokio::test]
async fn unknown_tasks_and_other_users_get_404() {
    let server = Server::start(ServeOptions::default()).await;
    let task = spawn(&server, "look").await;
    for path in [
        format!("{TASKS}/task-none"),
        format!("{TASKS}/task-none/events"),
        "/api/agents/helper/sessions/nobody/tasks".to_owned(),
    ] {
        let response = server.get(&path).await;
        assert_eq!(response.status(), 404, "{path}");
    }
    let response = server
        .post(&format!("{TASKS}/task-none/cancel"), serde_json::json!({}))
        .await;
    assert_eq!(response.status(), 404);

    let as_mallory = |path: String| {
        server
            .client
            .get(server.url(&path))
            .header("x-harness-user", "mallory")
            .send()
    };
    for path in [
        TASKS.to_owned(),
        format!("{TASKS}/{task}"),
        format!("{TASKS}/{task}/events"),
    ] {
        let response = as_mallory(path.clone()).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    let response = server
        .client
        .post(server.url(&format!("{TASKS}/{task}/cancel")))
        .header("x-harness-user", "mallory")
        .header("x-harness-request", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}
