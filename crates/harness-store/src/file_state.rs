//! [`FileStateStore`]: one `agent_state.json` per session, written atomically, with a
//! version for compare-and-set that holds across processes.

use async_trait::async_trait;
use harness_core::{AgentState, StateError, StateKey, StateStore, Version};
use serde::Deserialize;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Maps a session key to its directory, relative to the store's root.
pub type StateLayout = Arc<dyn Fn(&StateKey) -> PathBuf + Send + Sync>;

const STATE_FILE: &str = "agent_state.json";
const LOCK_FILE: &str = ".lock";
/// The version is the first field, so a save can check it by reading a few bytes.
const HEADER_BYTES: usize = 64;

#[derive(Deserialize)]
struct OwnedEnvelope {
    version: Version,
    state: AgentState,
}

/// Agent state as JSON files under a root directory.
///
/// Each session lives in its own directory (by default
/// `<root>/<userId>/agents/<agentId>/context/<sessionId>/agent_state.json`, the workspace
/// layout for the default user isolation scope). A save writes a temporary file in the same
/// directory and renames it over the old one, so a crash never leaves a torn state. The
/// version check and the rename happen under an advisory lock on the directory's `.lock`
/// file, so compare-and-set holds between processes too.
///
/// Every id is checked to be a single safe path segment before it touches the disk.
#[derive(Clone)]
pub struct FileStateStore {
    root: PathBuf,
    layout: StateLayout,
}

impl std::fmt::Debug for FileStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStateStore")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl FileStateStore {
    /// A store under `root` with the default layout.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self::with_layout(
            root,
            Arc::new(|key: &StateKey| {
                PathBuf::from(key.user_id.as_str())
                    .join("agents")
                    .join(key.agent_id.as_str())
                    .join("context")
                    .join(key.session_id.as_str())
            }),
        )
    }

    /// A store under `root` where `layout` places each session's directory.
    pub fn with_layout(root: impl Into<PathBuf>, layout: StateLayout) -> Self {
        Self {
            root: root.into(),
            layout,
        }
    }

    /// The directory of a session, after checking its ids.
    ///
    /// # Errors
    /// [`StateError::Corrupt`] is never returned; an unsafe id gives [`StateError::Backend`].
    pub fn dir_of(&self, key: &StateKey) -> Result<PathBuf, StateError> {
        for check in [
            key.agent_id.validate(),
            key.user_id.validate(),
            key.session_id.validate(),
        ] {
            check.map_err(|err| StateError::Backend(Box::new(err)))?;
        }
        let relative = (self.layout)(key);
        if relative.is_absolute()
            || relative
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(StateError::Backend(
                format!("state layout produced an unsafe path {relative:?}").into(),
            ));
        }
        Ok(self.root.join(relative))
    }

    fn load_blocking(dir: &Path, key: &StateKey) -> Result<Option<(AgentState, Version)>, StateError> {
        let bytes = match fs::read(dir.join(STATE_FILE)) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(StateError::Backend(Box::new(err))),
        };
        let envelope: OwnedEnvelope = serde_json::from_slice(&bytes).map_err(|err| StateError::Corrupt {
            key: key.display(),
            message: err.to_string(),
        })?;
        Ok(Some((envelope.state, envelope.version)))
    }

    fn stored_version(path: &Path, key: &StateKey) -> Result<Version, StateError> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(err) => return Err(StateError::Backend(Box::new(err))),
        };
        let mut header = [0u8; HEADER_BYTES];
        let mut filled = 0;
        while filled < HEADER_BYTES {
            match file.read(&mut header[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(err) => return Err(StateError::Backend(Box::new(err))),
            }
        }
        parse_version(&header[..filled]).ok_or_else(|| StateError::Corrupt {
            key: key.display(),
            message: "no version header".into(),
        })
    }

    fn save_blocking(dir: &Path, key: &StateKey, bytes: &[u8], expected: Version) -> Result<Version, StateError> {
        let backend = |err: std::io::Error| StateError::Backend(Box::new(err));
        let open_lock = || {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(LOCK_FILE))
        };
        // The directory exists after the first save: create it only when the open says so.
        let lock = match open_lock() {
            Ok(lock) => lock,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(backend)?;
                open_lock().map_err(backend)?
            }
            Err(err) => return Err(backend(err)),
        };
        lock.lock().map_err(backend)?;
        let path = dir.join(STATE_FILE);
        let found = Self::stored_version(&path, key)?;
        if found != expected {
            return Err(StateError::Conflict {
                key: key.display(),
                expected,
                found,
            });
        }
        let version = found + 1;
        let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(backend)?;
        write!(temp, "{{\"version\":{version},\"state\":").map_err(backend)?;
        temp.write_all(bytes).map_err(backend)?;
        temp.write_all(b"}\n").map_err(backend)?;
        temp.persist(&path).map_err(|err| backend(err.error))?;
        // The lock is released when `lock` is dropped.
        Ok(version)
    }
}

/// Reads `{"version":N` from the start of a state file.
fn parse_version(header: &[u8]) -> Option<Version> {
    let text = std::str::from_utf8(header).ok().or_else(|| {
        // The header may end inside a multi-byte character; the version is before it.
        let valid = std::str::from_utf8(header).err()?.valid_up_to();
        std::str::from_utf8(&header[..valid]).ok()
    })?;
    let rest = text.trim_start().strip_prefix("{\"version\":")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StateError> + Send + 'static,
) -> Result<T, StateError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| StateError::Backend(Box::new(err)))?
}

#[async_trait]
impl StateStore for FileStateStore {
    async fn load(&self, key: &StateKey) -> Result<Option<(AgentState, Version)>, StateError> {
        let dir = self.dir_of(key)?;
        let key = key.clone();
        blocking(move || Self::load_blocking(&dir, &key)).await
    }

    async fn save(&self, key: &StateKey, state: &AgentState, expected: Version) -> Result<Version, StateError> {
        let dir = self.dir_of(key)?;
        // Serialize on the caller's thread (the state is borrowed); the envelope around it is
        // written under the lock, with the version found there.
        let state_bytes = serde_json::to_vec(state).map_err(|err| StateError::Backend(Box::new(err)))?;
        let key = key.clone();
        blocking(move || Self::save_blocking(&dir, &key, &state_bytes, expected)).await
    }

    async fn delete(&self, key: &StateKey) -> Result<(), StateError> {
        let dir = self.dir_of(key)?;
        blocking(move || match fs::remove_file(dir.join(STATE_FILE)) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(StateError::Backend(Box::new(err))),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use harness_core::{AgentId, Msg, SessionId, UserId};

    fn key(user: &str, session: &str) -> StateKey {
        StateKey {
            agent_id: AgentId::new("a"),
            user_id: UserId::new(user),
            session_id: SessionId::new(session),
        }
    }

    #[tokio::test]
    async fn round_trip_with_versions_and_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path());
        let k = key("u1", "s1");
        assert!(store.load(&k).await.unwrap().is_none());
        let mut state = AgentState::default();
        state.messages.push(Arc::new(Msg::user("héllo")));
        assert_eq!(store.save(&k, &state, 0).await.unwrap(), 1);
        assert_eq!(store.save(&k, &state, 1).await.unwrap(), 2);
        let (loaded, version) = store.load(&k).await.unwrap().unwrap();
        assert_eq!((loaded, version), (state.clone(), 2));
        match store.save(&k, &state, 1).await {
            Err(StateError::Conflict {
                expected: 1, found: 2, ..
            }) => {}
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert!(dir.path().join("u1/agents/a/context/s1/agent_state.json").exists());
    }

    #[tokio::test]
    async fn unsafe_ids_never_touch_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path().join("root"));
        for (user, session) in [("..", "s"), ("u", ".."), ("u/../../x", "s"), ("u", "a/b")] {
            assert!(
                store
                    .save(&key(user, session), &AgentState::default(), 0)
                    .await
                    .is_err()
            );
        }
        assert!(!dir.path().join("root").exists());
    }

    #[tokio::test]
    async fn concurrent_savers_with_the_same_version_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path());
        let k = key("u", "s");
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (store, k) = (store.clone(), k.clone());
                tokio::spawn(async move { store.save(&k, &AgentState::default(), 0).await })
            })
            .collect();
        let mut wins = 0;
        for task in tasks {
            if task.await.unwrap().is_ok() {
                wins += 1;
            }
        }
        assert_eq!(wins, 1);
    }

    #[test]
    fn version_header_parses() {
        assert_eq!(parse_version(b"{\"version\":42,\"state\":{"), Some(42));
        assert_eq!(parse_version(b"garbage"), None);
    }
}
