//! SandboxManager: one live sandbox per scope key, shared by concurrent acquirers in one
//! process, warm between bindings, state recorded under the lease's fencing token.

use crate::support::{Scratch, config};
use harness_core::{CancellationToken, SessionLease};
use harness_fs::{CallScope, IsolationScope, ShellRequest};
use harness_sandbox::{NamespaceProvider, Network, SandboxManager, SandboxScope, SandboxState, ScopeKey};
use harness_store::{InMemoryKv, KvStore, LocalLease};
use std::sync::Arc;

fn scope(user: &str, session: &str) -> CallScope {
    CallScope::parse(IsolationScope::User, "agent", user, session).unwrap()
}

#[tokio::test]
async fn concurrent_acquirers_share_one_sandbox_and_it_stays_warm() {
    let scratch = Scratch::new();
    let provider = Arc::new(NamespaceProvider::new(config(&scratch)));
    let states = Arc::new(InMemoryKv::default());
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let manager = SandboxManager::new(provider, lease.clone(), states.clone(), "manager-test");
    let cancel = CancellationToken::new();
    let key = ScopeKey::for_call(SandboxScope::User, &scope("alice", "s1"));
    assert_eq!(key, ScopeKey::for_call(SandboxScope::User, &scope("alice", "s2")));
    assert_ne!(key, ScopeKey::for_call(SandboxScope::Session, &scope("alice", "s1")));
    let work = scratch.join("alice");
    let (a, b) = tokio::join!(
        manager.acquire(&key, &work, Network::Offline, &cancel),
        manager.acquire(&key, &work, Network::Offline, &cancel)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.state().instance, b.state().instance, "one live sandbox per key");
    // The key's lease is held while a binding lives: another holder must wait.
    let busy = CancellationToken::new();
    busy.cancel();
    assert!(lease.acquire(key.lease_key(), &busy).await.is_err());
    a.sandbox()
        .shell()
        .execute(ShellRequest::new("(sleep 300 &); echo warm > marker"))
        .await
        .unwrap();
    let instance = a.state().instance.clone();
    drop((a, b));
    // Released: the lease is free, the state recorded, the instance warm.
    let guard = lease.acquire(key.lease_key(), &cancel).await.unwrap();
    drop(guard);
    let stored: SandboxState = serde_json::from_slice(
        &states
            .get(&format!("sandboxes/{}", key.as_str()))
            .await
            .unwrap()
            .unwrap()
            .value,
    )
    .unwrap();
    assert_eq!(stored.instance, instance);
    let again = manager.acquire(&key, &work, Network::Offline, &cancel).await.unwrap();
    assert_eq!(again.state().instance, instance, "the warm instance is reused");
    let out = again
        .sandbox()
        .shell()
        // The background `sleep` may still be a forked shell that has not exec'd yet on a
        // loaded machine: wait for it (up to 5 s) rather than race it.
        .execute(ShellRequest::new(
            "cat marker; for i in $(seq 50); do n=$(pgrep -c sleep); [ \"$n\" = 1 ] && break; sleep 0.1; done; echo $n",
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout, "warm\n1\n");
    let sandbox = again.sandbox().clone();
    drop(again);
    manager.evict_idle().await.unwrap();
    assert!(!sandbox.is_alive());
    // Gone: the next acquisition creates a new instance on the same work tree.
    let fresh = manager.acquire(&key, &work, Network::Offline, &cancel).await.unwrap();
    assert_ne!(fresh.state().instance, instance);
    let out = fresh
        .sandbox()
        .shell()
        .execute(ShellRequest::new("cat marker"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "warm\n");
    fresh.sandbox().shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stale_fence_cannot_take_over_the_state() {
    let scratch = Scratch::new();
    let provider = Arc::new(NamespaceProvider::new(config(&scratch)));
    let states = Arc::new(InMemoryKv::default());
    let key = ScopeKey::for_call(SandboxScope::Agent, &scope("bob", "s1"));
    // A newer holder (fence 99) recorded the state.
    let newer = SandboxState {
        version: SandboxState::VERSION,
        backend: "namespace".to_owned(),
        instance: "ns-elsewhere".to_owned(),
        scope_key: key.as_str().to_owned(),
        owner: "other".to_owned(),
        uid: 1,
        work_tree: scratch.join("w"),
        network: Network::Offline,
        fence: Some(99),
        created_ms: 0,
    };
    states
        .put(
            &format!("sandboxes/{}", key.as_str()),
            &serde_json::to_vec(&newer).unwrap(),
            None,
        )
        .await
        .unwrap();
    let manager = SandboxManager::new(provider, Arc::new(FencedLease(5)), states, "manager-test");
    let refused = manager
        .acquire(&key, scratch.join("w"), Network::Offline, &CancellationToken::new())
        .await;
    assert!(
        matches!(
            refused,
            Err(harness_sandbox::SandboxError::Store(
                harness_store::StoreError::Fenced { .. }
            ))
        ),
        "{refused:?}"
    );
}

/// A lease that always hands out the same (old) fencing token.
struct FencedLease(u64);

struct NoRelease;

#[async_trait::async_trait]
impl harness_core::LeaseRelease for NoRelease {
    async fn release(self: Box<Self>) {}
    fn release_now(self: Box<Self>) {}
}

#[async_trait::async_trait]
impl SessionLease for FencedLease {
    async fn acquire(
        &self,
        _key: &harness_core::LeaseKey,
        _cancel: &CancellationToken,
    ) -> Result<harness_core::LeaseGuard, harness_core::LeaseError> {
        Ok(harness_core::LeaseGuard::new(
            Some(harness_core::FencingToken::new(self.0)),
            CancellationToken::new(),
            Box::new(NoRelease),
        ))
    }
}
