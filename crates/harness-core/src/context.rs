//! [`RuntimeContext`]: who is calling, for one call. Never persisted.

use crate::id::{SessionId, UserId};
use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Per-call identity and extras, plus the call's cancellation token.
///
/// Cheap to clone: clones share the token and the extras. Capabilities put call-scoped
/// handles (a namespaced workspace, a sandbox) into the typed extras when the call is bound;
/// tools and middlewares read them back with [`get`](Self::get).
#[derive(Clone, Default)]
pub struct RuntimeContext {
    /// The caller. `None` means anonymous; the harness documents its default.
    pub user_id: Option<UserId>,
    /// The conversation. `None` means the agent's default session.
    pub session_id: Option<SessionId>,
    /// String extras (e.g. channel names, trace ids).
    pub attributes: BTreeMap<String, String>,
    typed: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    cancel: CancellationToken,
}

impl fmt::Debug for RuntimeContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeContext")
            .field("user_id", &self.user_id)
            .field("session_id", &self.session_id)
            .field("attributes", &self.attributes)
            .field("typed_extras", &self.typed.len())
            .field("cancelled", &self.cancel.is_cancelled())
            .finish()
    }
}

impl RuntimeContext {
    /// A context for `user` in the default session.
    pub fn for_user(user: impl Into<UserId>) -> Self {
        Self {
            user_id: Some(user.into()),
            ..Self::default()
        }
    }

    /// Sets the session.
    #[must_use]
    pub fn with_session(mut self, session: impl Into<SessionId>) -> Self {
        self.session_id = Some(session.into());
        self
    }

    /// Sets the user.
    #[must_use]
    pub fn with_user(mut self, user: impl Into<UserId>) -> Self {
        self.user_id = Some(user.into());
        self
    }

    /// Sets a string attribute.
    #[must_use]
    pub fn with_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }

    /// Uses `token` for cancellation (e.g. a child of the server's shutdown token).
    #[must_use]
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Stores a typed extra, replacing any earlier value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.typed.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// A typed extra, if present.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.typed
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref::<T>())
    }

    /// The call's cancellation token.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the call was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_extras_are_shared_by_clones() {
        #[derive(Debug, PartialEq)]
        struct Depth(u32);
        let mut ctx = RuntimeContext::for_user(UserId::from_static("u1")).with_session(SessionId::from_static("s1"));
        ctx.insert(Depth(2));
        let clone = ctx.clone();
        assert_eq!(clone.get::<Depth>(), Some(&Depth(2)));
        assert_eq!(clone.get::<String>(), None);
        ctx.cancellation().cancel();
        assert!(clone.is_cancelled());
    }
}
