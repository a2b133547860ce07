//! The per-session turn gate: a waiter that gives up never blocks the session.

use crate::support::*;
use harness_models::{Reply, ScriptedModel};
use std::time::Duration;

#[tokio::test]
async fn a_cancelled_waiter_does_not_leak_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply(Reply::text("first").delayed(Duration::from_millis(200)))
        .reply_text("third");
    let agent = agent(dir.path(), &model);
    let first = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.call("one", ctx("u", "s")).await })
    };
    // Readiness, not a sleep: once the first turn's model call started, it holds the session.
    while model.request_count() == 0 {
        tokio::task::yield_now().await;
    }
    // A second turn waits for the session and is abandoned while waiting.
    let waiting = agent.call("two", ctx("u", "s"));
    assert!(tokio::time::timeout(Duration::from_millis(50), waiting).await.is_err());
    assert_eq!(first.await.unwrap().unwrap().text(), "first");
    // The abandoned waiter left nothing behind: the next turn runs at once.
    let third = tokio::time::timeout(Duration::from_secs(5), agent.call("three", ctx("u", "s"))).await;
    assert_eq!(third.unwrap().unwrap().text(), "third");
    let texts: Vec<String> = model.requests()[1].messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["one", "first", "three"], "the abandoned turn left no trace");
}

#[tokio::test]
async fn different_sessions_do_not_wait_for_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::from_fn(|request| {
        let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
        if last == "slow" {
            Reply::text("slow done").delayed(Duration::from_secs(30))
        } else {
            Reply::text("fast done")
        }
    });
    let agent = agent(dir.path(), &model);
    let slow = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.call("slow", ctx("u", "s1")).await })
    };
    while model.request_count() == 0 {
        tokio::task::yield_now().await;
    }
    let fast = tokio::time::timeout(Duration::from_secs(5), agent.call("fast", ctx("u", "s2"))).await;
    assert_eq!(fast.unwrap().unwrap().text(), "fast done");
    slow.abort();
}
