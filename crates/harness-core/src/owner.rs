//! [`SessionOwners`]: who owns a session, recorded once in the session's own state through
//! the [`StateStore`] (so every replica sharing the `[state]` backend agrees), with
//! compare-and-set so two first turns on two replicas cannot both win.
//!
//! The record is the `owner` slot of the session's [`AgentState`] extensions: it lives and
//! dies with the session's state, and every state save carries it along unchanged.

use crate::id::UserId;
use crate::state::{AgentState, StateError, StateKey, StateStore};
use serde_json::Value;
use std::sync::Arc;

/// The [`AgentState::extensions`] slot holding the owner's user id.
pub const OWNER_SLOT: &str = "owner";

/// How many times [`SessionOwners::claim`] re-reads after losing a compare-and-set race.
const CLAIM_ATTEMPTS: usize = 8;

/// Reads and records session owners in a [`StateStore`]. Cheap to clone.
#[derive(Clone)]
pub struct SessionOwners {
    store: Arc<dyn StateStore>,
}

impl std::fmt::Debug for SessionOwners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionOwners").finish_non_exhaustive()
    }
}

fn owner_of(state: &AgentState) -> Option<UserId> {
    match state.extensions.get(OWNER_SLOT) {
        Some(Value::String(raw)) => UserId::parse(raw.as_str()).ok(),
        _ => None,
    }
}

impl SessionOwners {
    /// Owners kept in `store` (the agent's state store).
    pub fn new(store: Arc<dyn StateStore>) -> Self {
        Self { store }
    }

    /// The recorded owner of the session at `key`; `None` when the session has no state yet
    /// or none was recorded (a session made without API keys).
    ///
    /// # Errors
    /// What the store's `load` returns.
    pub async fn owner(&self, key: &StateKey) -> Result<Option<UserId>, StateError> {
        Ok(self.store.load(key).await?.and_then(|(state, _)| owner_of(&state)))
    }

    /// Whether `user` may reach the session at `key`: it has no recorded owner, or `user` is it.
    ///
    /// # Errors
    /// What the store's `load` returns.
    pub async fn allows(&self, key: &StateKey, user: &UserId) -> Result<bool, StateError> {
        Ok(self.owner(key).await?.is_none_or(|owner| &owner == user))
    }

    /// Records `user` as the owner of the session at `key` unless it already has one, and
    /// returns the owner: `user`, or whoever recorded first. A session with state but no
    /// owner (made before keys were configured) goes to its first claimant.
    ///
    /// # Errors
    /// What the store returns; [`StateError::Conflict`] if the state kept changing under
    /// every attempt.
    pub async fn claim(&self, key: &StateKey, user: &UserId) -> Result<UserId, StateError> {
        let mut last = None;
        for _ in 0..CLAIM_ATTEMPTS {
            let (mut state, version) = self.store.load(key).await?.unwrap_or_default();
            if let Some(owner) = owner_of(&state) {
                return Ok(owner);
            }
            state
                .extensions
                .insert(OWNER_SLOT.to_owned(), Value::String(user.to_string()));
            match self.store.save(key, &state, version, None).await {
                Ok(_) => return Ok(user.clone()),
                // Someone else saved first (perhaps another replica's claim): read again.
                Err(err @ StateError::Conflict { .. }) => last = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last.unwrap_or(StateError::Conflict {
            key: key.display(),
            expected: 0,
            found: 0,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::id::{AgentId, SessionId};
    use crate::state::InMemoryStateStore;

    fn key() -> StateKey {
        StateKey {
            agent_id: AgentId::parse("a").unwrap(),
            user_id: UserId::parse("global").unwrap(),
            session_id: SessionId::parse("s1").unwrap(),
        }
    }

    #[tokio::test]
    async fn the_first_claim_wins_and_the_record_survives_later_saves() {
        let store: Arc<dyn StateStore> = Arc::new(InMemoryStateStore::default());
        let owners = SessionOwners::new(Arc::clone(&store));
        let (alice, bob) = (UserId::parse("alice").unwrap(), UserId::parse("bob").unwrap());
        assert_eq!(owners.owner(&key()).await.unwrap(), None);
        assert!(owners.allows(&key(), &bob).await.unwrap());
        assert_eq!(owners.claim(&key(), &alice).await.unwrap(), alice);
        assert_eq!(owners.claim(&key(), &bob).await.unwrap(), alice);
        // A turn's save keeps the slot it loaded.
        let (mut state, version) = store.load(&key()).await.unwrap().unwrap();
        state.transcript_offset = 10;
        store.save(&key(), &state, version, None).await.unwrap();
        assert!(owners.allows(&key(), &alice).await.unwrap());
        assert!(!owners.allows(&key(), &bob).await.unwrap());
    }

    #[tokio::test]
    async fn racing_claims_agree_on_one_owner() {
        let owners = SessionOwners::new(Arc::new(InMemoryStateStore::default()));
        let claims = (0..8).map(|n| {
            let owners = owners.clone();
            async move {
                owners
                    .claim(&key(), &UserId::parse(format!("u{n}")).unwrap())
                    .await
                    .unwrap()
            }
        });
        let winners = futures::future::join_all(claims).await;
        assert!(winners.iter().all(|w| w == &winners[0]), "{winners:?}");
        assert_eq!(owners.owner(&key()).await.unwrap().as_ref(), Some(&winners[0]));
    }
}
