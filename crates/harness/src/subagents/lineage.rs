//! Where a child sits in the delegation tree: its depth, the path of agent ids from the root,
//! and its session id.
//!
//! A child's session id is `sub.<declaration id>.<32 hex>`, the hex being a digest of the
//! parent's session, the declaration id and the instance (a label, or the task id). It is at
//! most 101 bytes at any depth (a declaration id holds at most 64), well inside the 128 bytes
//! a [`SessionId`] may hold, while the readable path (parent session, depth, agent path) is
//! kept in the task record ([`TaskRecord`](super::TaskRecord)). The same label in the same
//! parent session always gives the same id, so an instance keeps its conversation.
//!
//! Task records written before this shape name their child's session
//! `sub.<parent>.<id>.<instance>`; a resume or a follow-up to such an instance reuses the
//! recorded id ([`recorded_session`]), so old sessions continue where they were.

use super::records::{TaskFile, TaskRecord};
use harness_core::SessionId;
use sha2::{Digest, Sha256};

/// Where a child sits in the delegation tree; in the context of every child call.
#[derive(Debug, Clone)]
pub(crate) struct Lineage {
    /// The child's depth (a direct child is 1).
    pub(crate) depth: u32,
    /// Slash-separated agent ids from the root.
    pub(crate) path: String,
}

/// Hex digits of the digest kept in a child's session id (128 bits).
const DIGEST_HEX: usize = 32;

/// The session id of the instance `instance` of `declaration_id` spawned from the session
/// `parent`: bounded whatever the parent's length (see the module docs).
///
/// # Errors
/// The declaration id cannot be part of a session id (ids are checked when declarations are
/// loaded, so this names a declaration that bypassed that check).
pub(crate) fn child_session(
    parent: &SessionId,
    declaration_id: &str,
    instance: &str,
) -> Result<SessionId, harness_core::IdError> {
    let mut digest = Sha256::new();
    // Each part is followed by a byte no id may hold, so `a.b` + `c` and `a` + `b.c` differ.
    for part in [parent.as_str(), declaration_id, instance] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    let hex = hex::encode(digest.finalize());
    let short = hex.get(..DIGEST_HEX).unwrap_or(&hex);
    SessionId::parse(format!("sub.{declaration_id}.{short}"))
}

/// The session an earlier task of this parent session recorded for the instance `instance` of
/// `declaration_id` (the same label, or the task id of an unlabelled spawn), if any: reusing it
/// keeps the conversation of an instance whose record predates the current id shape.
pub(crate) fn recorded_session(file: &TaskFile, declaration_id: &str, instance: &str) -> Option<String> {
    file.tasks
        .values()
        .filter(|record| record.agent_id == declaration_id)
        .find(|record| is_instance(record, instance))
        .map(|record| record.child_session.clone())
}

fn is_instance(record: &TaskRecord, instance: &str) -> bool {
    match &record.label {
        Some(label) => label == instance,
        None => record.task_id == instance,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(text: &str) -> SessionId {
        SessionId::parse(text).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn a_child_session_is_bounded_at_any_depth() {
        // A 41-byte OpenAI-route session, then three levels of children with the longest ids.
        let mut parent = session("chatcmpl-0123456789abcdef0123456789abcdef");
        assert_eq!(parent.as_str().len(), 41);
        let long_id = "a".repeat(64);
        for _ in 0..3 {
            let child = child_session(&parent, &long_id, &format!("task-{}", "f".repeat(32)))
                .unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(child.as_str().len(), 4 + 64 + 1 + DIGEST_HEX);
            assert!(child.as_str().starts_with(&format!("sub.{long_id}.")));
            parent = child;
        }
    }

    #[test]
    fn the_same_instance_gives_the_same_session_and_others_differ() {
        let parent = session("s1");
        let one = child_session(&parent, "researcher", "notes").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            one,
            child_session(&parent, "researcher", "notes").unwrap_or_else(|err| panic!("{err}"))
        );
        for (parent, id, instance) in [
            ("s2", "researcher", "notes"),
            ("s1", "writer", "notes"),
            ("s1", "researcher", "other"),
        ] {
            let other = child_session(&session(parent), id, instance).unwrap_or_else(|err| panic!("{err}"));
            assert_ne!(one, other, "{parent} {id} {instance}");
        }
        // The separator keeps shifted boundaries apart.
        let left = child_session(&session("a.b"), "c", "d").unwrap_or_else(|err| panic!("{err}"));
        let right = child_session(&session("a"), "b.c", "d").unwrap_or_else(|err| panic!("{err}"));
        assert_ne!(left, right);
    }
}
