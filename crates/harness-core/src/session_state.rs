//! [`SessionState`]: typed, per-session capability state that tools and middlewares read and
//! change during a call and that is saved with the session.
//!
//! A capability declares its state as a [`SessionSlot`]: a serde type with a stable key. The
//! value lives in [`AgentState::extensions`](crate::AgentState::extensions) under that key
//! between calls; during a call it lives in the call's `SessionState` handle, which the
//! kernel creates from the loaded state and writes back before it saves. Nobody touches the
//! JSON by path: `get::<Plan>()` and `update::<Plan, _>(|plan| …)` are the whole API.
//!
//! The handle is cheap to clone and safe to use from the concurrent tool calls of one step:
//! each `update` runs its closure under a lock, so two updates never interleave.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A capability's typed session state, stored under [`KEY`](Self::KEY) in
/// `AgentState::extensions`. A new session starts from `Default`.
///
/// Persisted format: add fields only with `#[serde(default)]`, as with every persisted type.
pub trait SessionSlot: Serialize + DeserializeOwned + Default + Send + Sync + 'static {
    /// The extensions key, unique per capability (e.g. `plan_mode`, `todos`).
    const KEY: &'static str;
}

/// Why session state could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionStateError {
    /// The stored value does not decode as the slot's type (a changed type or a hand-edited
    /// state file).
    #[error("session state `{key}` is corrupt: {message}")]
    Corrupt {
        /// The slot's key.
        key: &'static str,
        /// What the decoder said.
        message: String,
    },
    /// The new value could not be encoded as JSON.
    #[error("session state `{key}` could not be encoded: {message}")]
    Encode {
        /// The slot's key.
        key: &'static str,
        /// What the encoder said.
        message: String,
    },
}

#[derive(Debug, Default)]
struct Slots {
    /// The slot values of the session, as JSON.
    values: Map<String, Value>,
    /// Keys changed during this call; only these are written back.
    changed: BTreeSet<String>,
}

/// The typed session state of one call. See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub struct SessionState {
    inner: Arc<Mutex<Slots>>,
}

impl SessionState {
    /// A handle over the values of `extensions` (a copy: changes reach the state only through
    /// [`write_into`](Self::write_into)).
    pub fn from_extensions(extensions: &Map<String, Value>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Slots {
                values: extensions.clone(),
                changed: BTreeSet::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // A panic inside an update closure leaves the map as it was before the closure ran
        // (the new value is only stored after it returns), so the data is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current value of slot `T` (its default when the session has none).
    ///
    /// # Errors
    /// [`SessionStateError::Corrupt`] when the stored value does not decode as `T`.
    pub fn get<T: SessionSlot + Clone>(&self) -> Result<T, SessionStateError> {
        let slots = self.lock();
        decode::<T>(slots.values.get(T::KEY))
    }

    /// Changes slot `T` with `change` and returns what `change` returns. The closure runs
    /// under the handle's lock, so concurrent updates of one step never interleave; keep it
    /// short and never call back into the same handle from it.
    ///
    /// # Errors
    /// [`SessionStateError::Corrupt`] when the stored value does not decode as `T` (the value
    /// is left as it is and `change` does not run); [`SessionStateError::Encode`] when the new
    /// value cannot be encoded.
    pub fn update<T: SessionSlot, R>(&self, change: impl FnOnce(&mut T) -> R) -> Result<R, SessionStateError> {
        let mut slots = self.lock();
        let mut value = decode::<T>(slots.values.get(T::KEY))?;
        let result = change(&mut value);
        let encoded = serde_json::to_value(&value).map_err(|err| SessionStateError::Encode {
            key: T::KEY,
            message: err.to_string(),
        })?;
        slots.values.insert(T::KEY.to_owned(), encoded);
        slots.changed.insert(T::KEY.to_owned());
        Ok(result)
    }

    /// Writes the slots changed since the last write into `extensions`. The kernel calls
    /// this before it saves the session; returns whether anything changed.
    pub fn write_into(&self, extensions: &mut Map<String, Value>) -> bool {
        let mut slots = self.lock();
        let changed = std::mem::take(&mut slots.changed);
        for key in &changed {
            if let Some(value) = slots.values.get(key) {
                extensions.insert(key.clone(), value.clone());
            }
        }
        !changed.is_empty()
    }
}

fn decode<T: SessionSlot>(stored: Option<&Value>) -> Result<T, SessionStateError> {
    match stored {
        None | Some(Value::Null) => Ok(T::default()),
        Some(value) => T::deserialize(value).map_err(|err| SessionStateError::Corrupt {
            key: T::KEY,
            message: err.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    struct Todos {
        items: Vec<String>,
    }

    impl SessionSlot for Todos {
        const KEY: &'static str = "todos";
    }

    #[test]
    fn a_new_session_starts_from_default_and_changes_are_written_back() {
        let state = SessionState::default();
        assert_eq!(state.get::<Todos>().ok(), Some(Todos::default()));
        let len = state.update::<Todos, _>(|todos| {
            todos.items.push("write tests".into());
            todos.items.len()
        });
        assert_eq!(len.ok(), Some(1));
        let mut extensions = Map::new();
        assert!(state.write_into(&mut extensions));
        assert_eq!(extensions["todos"], serde_json::json!({"items": ["write tests"]}));
        assert!(!state.write_into(&mut extensions), "nothing changed since");
        let reloaded = SessionState::from_extensions(&extensions);
        assert_eq!(
            reloaded.get::<Todos>().ok().map(|t| t.items),
            Some(vec!["write tests".to_owned()])
        );
    }

    #[test]
    fn corrupt_slot_json_is_an_error_not_a_panic() {
        let mut extensions = Map::new();
        extensions.insert("todos".into(), serde_json::json!({"items": "not a list"}));
        let state = SessionState::from_extensions(&extensions);
        assert!(matches!(
            state.get::<Todos>(),
            Err(SessionStateError::Corrupt { key: "todos", .. })
        ));
        let ran = state.update::<Todos, _>(|_| ());
        assert!(matches!(ran, Err(SessionStateError::Corrupt { .. })));
        let mut out = Map::new();
        assert!(!state.write_into(&mut out), "a failed update changes nothing");
        let message = state.get::<Todos>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("session state `todos` is corrupt"), "{message}");
    }

    #[test]
    fn keys_the_call_did_not_change_are_left_alone() {
        let mut extensions = Map::new();
        extensions.insert("compaction".into(), serde_json::json!({"summary": "old"}));
        let state = SessionState::from_extensions(&extensions);
        let mut saved = extensions.clone();
        saved.insert(
            "compaction".into(),
            serde_json::json!({"summary": "new, by a middleware"}),
        );
        let _ = state.update::<Todos, _>(|todos| todos.items.push("x".into()));
        state.write_into(&mut saved);
        assert_eq!(
            saved["compaction"],
            serde_json::json!({"summary": "new, by a middleware"})
        );
        assert_eq!(saved["todos"], serde_json::json!({"items": ["x"]}));
    }
}
