//! Stateless clients: a request without a session header whose messages extend a
//! conversation this server answered continues that conversation's session, so one chat is
//! one session (and one memory extraction), whatever the SDK resends.
//!
//! Each answered turn records the fingerprint of the conversation as the client now holds it
//! (its messages and the reply) → the session. A later request is matched on the longest
//! prefix of its messages with a recorded fingerprint; the messages after it are the new
//! ones. Fingerprints are over a normal form that ignores what clients add or drop: `null`
//! fields, `name`, `refusal`, whitespace at the ends of text, the spacing of tool arguments,
//! `developer` for `system`. The index is in memory and bounded
//! ([`MAX_THREADS`] conversations, oldest forgotten first); a conversation it no longer
//! knows (or one from before a restart) starts a new session.

use harness_core::{SessionId, UserId};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// Conversations remembered, at most.
pub(crate) const MAX_THREADS: usize = 16_384;

/// One message as the client sees it, in normal form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    /// `system`, `user`, `assistant` or `tool`.
    pub(crate) role: &'static str,
    /// The text, trimmed at the ends.
    pub(crate) text: String,
    /// An assistant's tool calls: id, name, arguments (parsed when they are JSON).
    pub(crate) calls: Vec<(String, String, Value)>,
    /// A tool result's call id.
    pub(crate) call_id: Option<String>,
    /// The images of a user message (their URLs, `data:` URLs included).
    pub(crate) images: Vec<String>,
}

impl Seen {
    /// The arguments of a tool call as the client sent them (a JSON text), parsed so that
    /// spacing and key order do not matter.
    pub(crate) fn arguments(raw: &str) -> Value {
        serde_json::from_str(raw).map_or_else(|_| Value::String(raw.trim().to_owned()), |value| sorted(&value))
    }

    fn canonical(&self) -> String {
        json!([self.role, self.text.trim(), self.calls, self.call_id, self.images]).to_string()
    }
}

/// `value` with every object's keys in order (whatever the map type keeps).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|key| (key.clone(), sorted(&map[key]))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The fingerprint of every prefix of `messages`: `out[k]` covers the first `k + 1`.
pub(crate) fn prefixes(messages: &[Seen]) -> Vec<[u8; 32]> {
    let mut hash: [u8; 32] = Sha256::digest(b"harness-thread-v1").into();
    messages
        .iter()
        .map(|message| {
            let mut hasher = Sha256::new();
            hasher.update(hash);
            hasher.update(message.canonical().as_bytes());
            hash = hasher.finalize().into();
            hash
        })
        .collect()
}

/// The fingerprint after `base` (a prefix fingerprint, or `None` for the empty
/// conversation) and `next`.
pub(crate) fn extend(base: Option<[u8; 32]>, next: &Seen) -> [u8; 32] {
    let base = base.unwrap_or_else(|| Sha256::digest(b"harness-thread-v1").into());
    let mut hasher = Sha256::new();
    hasher.update(base);
    hasher.update(next.canonical().as_bytes());
    hasher.finalize().into()
}

type Key = (String, UserId, [u8; 32]);

#[derive(Default)]
struct Table {
    sessions: HashMap<Key, SessionId>,
    order: VecDeque<Key>,
}

/// Fingerprint → session, per agent and user.
pub(crate) struct Threads {
    table: Mutex<Table>,
    capacity: usize,
}

impl Default for Threads {
    fn default() -> Self {
        Self::with_capacity(MAX_THREADS)
    }
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads").finish_non_exhaustive()
    }
}

impl Threads {
    /// An index of at most `capacity` conversations.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            table: Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    /// Records that the conversation with fingerprint `hash` is `session`.
    pub(crate) fn remember(&self, agent: &str, user: &UserId, hash: [u8; 32], session: &SessionId) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (agent.to_owned(), user.clone(), hash);
        if table.sessions.insert(key.clone(), session.clone()).is_none() {
            table.order.push_back(key);
        }
        while table.order.len() > self.capacity {
            if let Some(old) = table.order.pop_front() {
                table.sessions.remove(&old);
            }
        }
    }

    /// The session whose recorded conversation is the longest proper prefix of `messages`,
    /// and how many messages it covers.
    pub(crate) fn find(&self, agent: &str, user: &UserId, messages: &[Seen]) -> Option<(SessionId, usize)> {
        let hashes = prefixes(messages);
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        // Longest first; the whole request is never a prefix of itself (nothing new).
        (1..messages.len()).rev().find_map(|covered| {
            let key = (agent.to_owned(), user.clone(), hashes[covered - 1]);
            table.sessions.get(&key).map(|session| (session.clone(), covered))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(role: &'static str, text: &str) -> Seen {
        Seen {
            role,
            text: text.to_owned(),
            calls: Vec::new(),
            call_id: None,
            images: Vec::new(),
        }
    }

    #[test]
    fn the_longest_known_prefix_wins_and_whitespace_does_not_matter() {
        let threads = Threads::default();
        let user = UserId::parse("u1").unwrap_or_else(|e| panic!("{e}"));
        let one = SessionId::parse("s-one").unwrap_or_else(|e| panic!("{e}"));
        let first = [seen("user", "hi"), seen("assistant", "hello")];
        threads.remember("a", &user, prefixes(&first)[1], &one);
        let next = [
            seen("user", " hi\n"),
            seen("assistant", "hello  "),
            seen("user", "more"),
        ];
        assert_eq!(threads.find("a", &user, &next), Some((one.clone(), 2)));
        // Another agent, another user, or another history: no match.
        assert_eq!(threads.find("b", &user, &next), None);
        let other = UserId::parse("u2").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(threads.find("a", &other, &next), None);
        let changed = [seen("user", "hi"), seen("assistant", "bye"), seen("user", "more")];
        assert_eq!(threads.find("a", &user, &changed), None);
        // The request itself is never its own prefix.
        assert_eq!(threads.find("a", &user, &first), None);
    }

    #[test]
    fn the_oldest_conversation_is_forgotten_first() {
        let threads = Threads::with_capacity(2);
        let user = UserId::parse("u1").unwrap_or_else(|e| panic!("{e}"));
        let session = SessionId::parse("s").unwrap_or_else(|e| panic!("{e}"));
        let chats: Vec<[Seen; 2]> = ["a", "b", "c"].map(|t| [seen("user", t), seen("assistant", t)]).into();
        for chat in &chats {
            threads.remember("a", &user, prefixes(chat)[1], &session);
        }
        let next = |chat: &[Seen; 2]| [chat[0].clone(), chat[1].clone(), seen("user", "more")];
        assert_eq!(threads.find("a", &user, &next(&chats[0])), None);
        assert!(threads.find("a", &user, &next(&chats[1])).is_some());
        assert!(threads.find("a", &user, &next(&chats[2])).is_some());
    }

    #[test]
    fn tool_arguments_match_whatever_their_spacing() {
        assert_eq!(
            Seen::arguments("{\"a\": 1, \"b\": 2}"),
            Seen::arguments("{\"b\":2,\"a\":1}")
        );
        assert_eq!(Seen::arguments(" not json "), Value::String("not json".to_owned()));
        let call = |raw: &str| Seen {
            role: "assistant",
            text: String::new(),
            calls: vec![("c1".to_owned(), "f".to_owned(), Seen::arguments(raw))],
            call_id: None,
            images: Vec::new(),
        };
        assert_eq!(prefixes(&[call("{\"x\":1}")]), prefixes(&[call("{ \"x\" : 1 }")]));
        assert_eq!(extend(None, &call("{\"x\":1}")), prefixes(&[call("{\"x\":1}")])[0]);
    }
}
