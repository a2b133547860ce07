//! [`NamespaceKey`]: which user's memory a call reads and writes.

use harness_core::RuntimeContext;
use harness_fs::CallScope;
use sha2::{Digest, Sha256};
use std::fmt;

/// Names one workspace namespace (normally one user). It keys everything memory keeps outside
/// the namespace's own files: the index database, the consolidation lease, the throttles.
///
/// A call's key comes from its [`CallScope`] ([`for_scope`](Self::for_scope)), so it
/// identifies the same namespace as the call's
/// [`CallWorkspace::user`](harness_fs::CallWorkspace) filesystem under every isolation scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespaceKey(String);

impl NamespaceKey {
    /// A key from any text (e.g. a user id).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key of a call's namespace, as its [`CallScope`] derives it (the only way a
    /// call's key is formed).
    pub fn for_scope(scope: &CallScope) -> Self {
        Self(scope.memory_key().to_owned())
    }

    /// The key of the call `ctx`, from the [`CallScope`] the harness bound into it; `None`
    /// when no scope is bound.
    pub fn for_call(ctx: &RuntimeContext) -> Option<Self> {
        ctx.get::<CallScope>().map(Self::for_scope)
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A file name stem that is safe on every filesystem and distinct per key: the readable
    /// ASCII part of the key plus a hash of the whole key.
    pub(crate) fn file_stem(&self) -> String {
        let readable: String = self
            .0
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(48)
            .collect();
        let digest = Sha256::digest(self.0.as_bytes());
        let mut hash = String::with_capacity(16);
        for byte in digest.iter().take(8) {
            hash.push_str(&format!("{byte:02x}"));
        }
        format!("{readable}-{hash}")
    }
}

impl fmt::Display for NamespaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_are_safe_and_distinct() {
        let a = NamespaceKey::new("alice@example.com").file_stem();
        let b = NamespaceKey::new("alice_example.com").file_stem();
        assert_ne!(a, b);
        assert!(a.starts_with("alice_example_com-"));
        let cjk = NamespaceKey::new("用户一").file_stem();
        assert!(cjk.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn the_key_follows_the_scope() {
        use harness_fs::IsolationScope;
        let key = |scope, user: &str| {
            let scope = CallScope::parse(scope, "main", user, "s1").ok();
            scope.map(|scope| NamespaceKey::for_scope(&scope).0)
        };
        assert_eq!(key(IsolationScope::User, "u1").as_deref(), Some("u1"));
        assert_eq!(key(IsolationScope::Session, "u1").as_deref(), Some("s1"));
        assert_eq!(
            key(IsolationScope::Global, "u1").as_deref(),
            Some(harness_fs::SHARED_MEMORY_KEY)
        );
        assert!(NamespaceKey::for_call(&RuntimeContext::default()).is_none());
    }
}
