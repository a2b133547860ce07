//! The per-session inbox (issue 31, row 8): what one process posts another takes, once,
//! in order, on every state backend.

use harness_core::{AgentId, Msg, SessionId, StateKey, StateStore, UserId};
use harness_store::control::{SessionInbox, Signal};
use std::sync::Arc;

fn key() -> StateKey {
    StateKey {
        agent_id: AgentId::from_static("a"),
        user_id: UserId::from_static("u"),
        session_id: SessionId::from_static("s"),
    }
}

/// Two inboxes on two store instances sharing one backend: posts from one are taken by the
/// other, oldest first, exactly once; the session's own state is untouched.
async fn posts_are_taken_once_in_order(one: Arc<dyn StateStore>, two: Arc<dyn StateStore>) {
    let (poster, reader) = (SessionInbox::new(one), SessionInbox::new(Arc::clone(&two)));
    assert!(reader.take(&key()).await.unwrap().is_empty());
    poster.post(&key(), Signal::Cancel).await.unwrap();
    poster
        .post(
            &key(),
            Signal::Interrupt {
                message: Some(Msg::user("hi")),
            },
        )
        .await
        .unwrap();
    let taken = reader.take(&key()).await.unwrap();
    assert_eq!(taken.len(), 2);
    assert_eq!(taken[0], Signal::Cancel);
    assert!(matches!(&taken[1], Signal::Interrupt { message: Some(m) } if m.text() == "hi"));
    assert!(reader.take(&key()).await.unwrap().is_empty(), "taken once");
    assert!(
        two.load(&key()).await.unwrap().is_none(),
        "the session's state is another key"
    );
    // Concurrent posts are all kept.
    let key = key();
    let posts = (0..8).map(|_| poster.post(&key, Signal::Interrupt { message: None }));
    for result in futures::future::join_all(posts).await {
        result.unwrap();
    }
    assert_eq!(reader.take(&key).await.unwrap().len(), 8);
}

#[tokio::test]
async fn file_inbox_posts_are_taken_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    posts_are_taken_once_in_order(
        Arc::new(harness_store::FileStateStore::new(dir.path())),
        Arc::new(harness_store::FileStateStore::new(dir.path())),
    )
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_inbox_posts_are_taken_once_in_order() {
    use harness_store::{RedisStateConfig, RedisStateStore};
    let config = RedisStateConfig {
        url: harness_test_support::services::redis_url(),
        key_prefix: harness_test_support::services::redis_prefix("inbox"),
        ..RedisStateConfig::default()
    };
    let one = RedisStateStore::connect(&config).await.unwrap();
    let two = Arc::new(RedisStateStore::connect(&config).await.unwrap());
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(posts_are_taken_once_in_order(
        Arc::new(one),
        Arc::clone(&two) as Arc<dyn StateStore>,
    )))
    .await;
    two.purge().await.unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
