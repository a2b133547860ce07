//! [`NamespaceKey`]: which user's memory a call reads and writes.

use harness_core::{DEFAULT_USER, RuntimeContext};
use harness_fs::WsPath;
use sha2::{Digest, Sha256};
use std::fmt;

/// Names one workspace namespace (normally one user). It keys everything memory keeps outside
/// the namespace's own files: the index database, the consolidation lease, the throttles.
///
/// The key must identify the same namespace as the
/// [`CallWorkspace::user`](harness_fs::CallWorkspace) filesystem of the call. When the harness
/// isolates by user (the default) the user id is the key and nothing needs doing; with another
/// isolation scope the harness inserts the key into the call's
/// [`RuntimeContext`] (see [`for_call`](Self::for_call)), usually built with
/// [`from_prefix`](Self::from_prefix) from the namespace prefix it already computed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespaceKey(String);

impl NamespaceKey {
    /// A key from any text (e.g. a user id).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key of a namespace prefix (`WsPath::root()` for the shared namespace).
    pub fn from_prefix(prefix: &WsPath) -> Self {
        if prefix.is_root() {
            Self("_shared".into())
        } else {
            Self(prefix.as_str().to_owned())
        }
    }

    /// The key of a call: a `NamespaceKey` the harness put into the context, else the user
    /// id, else [`DEFAULT_USER`].
    pub fn for_call(ctx: &RuntimeContext) -> Self {
        if let Some(key) = ctx.get::<NamespaceKey>() {
            return key.clone();
        }
        match &ctx.user_id {
            Some(user) => Self(user.as_str().to_owned()),
            None => Self(DEFAULT_USER.to_owned()),
        }
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
    fn context_key_wins_over_user() {
        let mut ctx = RuntimeContext::for_user("u1");
        assert_eq!(NamespaceKey::for_call(&ctx).as_str(), "u1");
        ctx.insert(NamespaceKey::new("tenant/u1"));
        assert_eq!(NamespaceKey::for_call(&ctx).as_str(), "tenant/u1");
        assert_eq!(
            NamespaceKey::for_call(&RuntimeContext::default()).as_str(),
            DEFAULT_USER
        );
    }
}
