//! The head pointer of a scope: which chain of snapshots is current, kept in the fenced
//! state store ([`KvStore`]) — never an object-store overwrite. Moving it is a
//! compare-and-set that carries the writer's lease fence, so a writer whose lease passed to
//! another holder cannot move it.

use crate::SnapshotError;
use harness_core::FencingToken;
use harness_store::{KvFence, KvStore, StoreError};
use serde::{Deserialize, Serialize};

/// The current snapshot chain of one scope, and the previous ones kept for retention.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Shape version (1).
    pub version: u32,
    /// The chain restored: a full snapshot's id, then its deltas in order.
    pub chain: Vec<String>,
    /// Earlier heads' chains, newest first (kept, with everything they reach).
    #[serde(default)]
    pub history: Vec<Vec<String>>,
    /// The fencing token of the lease under which the head was last moved.
    pub fence: Option<u64>,
    /// When it was moved (milliseconds since the epoch).
    pub updated_ms: i64,
}

impl Head {
    /// Every snapshot id a kept head reaches.
    pub fn reachable(&self) -> std::collections::BTreeSet<String> {
        self.chain
            .iter()
            .chain(self.history.iter().flatten())
            .cloned()
            .collect()
    }
}

/// The writer's fence: its lease token, and the store-side fence when the backend checks it
/// atomically ([`KvStore::put_fenced`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterFence {
    /// The token of the writer's lease (`None`: a lease without tokens).
    pub token: Option<u64>,
    /// The backend fence, checked in the same atomic step as the write.
    pub kv: Option<KvFence>,
}

impl WriterFence {
    /// A fence carrying `token` only.
    pub fn token(token: u64) -> Self {
        Self {
            token: Some(token),
            kv: None,
        }
    }
}

/// Reads and moves heads.
#[derive(Clone)]
pub struct Heads {
    kv: std::sync::Arc<dyn KvStore>,
}

impl std::fmt::Debug for Heads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heads").field("kv", &self.kv.describe()).finish()
    }
}

fn key(scope: &str) -> String {
    format!("snapshots/{scope}/HEAD")
}

impl Heads {
    /// Heads kept in `kv`.
    pub fn new(kv: std::sync::Arc<dyn KvStore>) -> Self {
        Self { kv }
    }

    /// The head of `scope` and its store version (0 when absent).
    ///
    /// # Errors
    /// [`SnapshotError::Store`], [`SnapshotError::Corrupt`].
    pub async fn get(&self, scope: &str) -> Result<(Option<Head>, u64), SnapshotError> {
        match self.kv.get(&key(scope)).await.map_err(SnapshotError::Store)? {
            None => Ok((None, 0)),
            Some(item) => {
                let head = serde_json::from_slice::<Head>(&item.value).map_err(|err| SnapshotError::Corrupt {
                    path: key(scope),
                    reason: err.to_string(),
                })?;
                Ok((Some(head), item.version))
            }
        }
    }

    /// Refuses a writer older than the head's last writer.
    ///
    /// # Errors
    /// [`SnapshotError::Store`] with [`StoreError::Fenced`].
    pub fn check(scope: &str, head: Option<&Head>, fence: &WriterFence) -> Result<(), SnapshotError> {
        if let (Some(theirs), Some(ours)) = (head.and_then(|head| head.fence), fence.token)
            && theirs > ours
        {
            return Err(SnapshotError::Store(StoreError::Fenced {
                key: key(scope),
                token: FencingToken::new(ours),
                current: FencingToken::new(theirs),
            }));
        }
        Ok(())
    }

    /// Moves the head of `scope` to `chain`, keeping `keep - 1` earlier heads. Retries lost
    /// compare-and-set races; refuses a stale fence.
    ///
    /// # Errors
    /// [`SnapshotError::Store`] (with [`StoreError::Fenced`] for a stale writer).
    pub async fn advance(
        &self,
        scope: &str,
        chain: Vec<String>,
        fence: &WriterFence,
        keep: usize,
        now_ms: i64,
    ) -> Result<Head, SnapshotError> {
        for _ in 0..16 {
            let (current, version) = self.get(scope).await?;
            Self::check(scope, current.as_ref(), fence)?;
            let mut history = Vec::new();
            if let Some(current) = &current {
                history.push(current.chain.clone());
                history.extend(current.history.iter().cloned());
            }
            history.retain(|old| !old.is_empty() && *old != chain);
            history.truncate(keep.saturating_sub(1));
            let head = Head {
                version: 1,
                chain: chain.clone(),
                history,
                fence: fence.token.or(current.as_ref().and_then(|head| head.fence)),
                updated_ms: now_ms,
            };
            let json = serde_json::to_vec(&head).map_err(|err| SnapshotError::Config(err.to_string()))?;
            let written = match &fence.kv {
                Some(kv_fence) => self.kv.put_fenced(&key(scope), &json, Some(version), kv_fence).await,
                None => self.kv.put(&key(scope), &json, Some(version)).await,
            };
            match written {
                Ok(_) => return Ok(head),
                Err(StoreError::Conflict { .. }) => {}
                Err(err) => return Err(SnapshotError::Store(err)),
            }
        }
        Err(SnapshotError::Store(StoreError::Conflict {
            key: key(scope),
            expected: 0,
            found: None,
        }))
    }
}
