//! Stateless clients: a request without a session header whose messages extend a
//! conversation this deployment answered continues that conversation's session, so one chat
//! is one session (and one memory extraction), whatever the SDK resends.
//!
//! Each answered turn records the fingerprint of the conversation as the client now holds it
//! (its messages and the reply) → the session. A later request is matched on the longest
//! prefix of its messages with a recorded fingerprint; the messages after it are the new
//! ones. Fingerprints are over a normal form that ignores what clients add or drop: `null`
//! fields, `name`, `refusal`, whitespace at the ends of text, the spacing of tool arguments,
//! `developer` for `system`.
//!
//! The records live in the agent's state store (the `[state]` backend: files, Redis or
//! PostgreSQL), so a conversation continues after a restart and on any replica sharing that
//! backend. A record is one small state whose key is a hash of the agent, the user and the
//! fingerprint, and which names its user inside: a user never matches another user's
//! conversation. A record is written before the reply's last byte is sent, so a client's
//! next request finds it on any replica. Only prefixes that end with an assistant message can
//! have been recorded, and at most [`MAX_PROBES`] of them (the latest) are looked up per
//! request.

use harness_core::{AgentId, AgentState, SessionId, StateError, StateKey, StateStore, UserId};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
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

/// Stored records looked up for one request at most: the prefixes that end with one of the
/// last this many assistant messages.
pub(crate) const MAX_PROBES: usize = 8;

/// The state user of every record: the shared namespace's (`harness_fs::SHARED_NAMESPACE_ID`),
/// so no record lands in a user's folder. The user is in the key's hash and in the record.
const RECORD_USER: UserId = UserId::from_static("global");

/// The [`AgentState::extensions`] slot of a record: `{"user": ..., "session": ...}`.
const RECORD_SLOT: &str = "openai_thread";

/// Where the record of `hash` for `user` of `agent` lives.
fn record_key(agent: &AgentId, user: &UserId, hash: &[u8; 32]) -> Option<StateKey> {
    let mut hasher = Sha256::new();
    for part in [
        b"harness-thread-record-v1".as_slice(),
        agent.as_str().as_bytes(),
        user.as_str().as_bytes(),
    ] {
        hasher.update(part);
        hasher.update([0]);
    }
    hasher.update(hash);
    let session = SessionId::parse(format!("thread-{}", hex::encode(hasher.finalize()))).ok()?;
    Some(StateKey {
        agent_id: agent.clone(),
        user_id: RECORD_USER,
        session_id: session,
    })
}

/// The session a stored record names, when it is `user`'s record.
fn recorded(state: &AgentState, user: &UserId) -> Option<SessionId> {
    let slot = state.extensions.get(RECORD_SLOT)?;
    if slot.get("user").and_then(Value::as_str) != Some(user.as_str()) {
        return None;
    }
    SessionId::parse(slot.get("session")?.as_str()?).ok()
}

/// Records that `user`'s conversation with fingerprint `hash` is `session`.
///
/// # Errors
/// What the store returns (a lost race with an identical record is not an error).
pub(crate) async fn remember(
    store: &dyn StateStore,
    agent: &AgentId,
    user: &UserId,
    hash: [u8; 32],
    session: &SessionId,
) -> Result<(), StateError> {
    let Some(key) = record_key(agent, user, &hash) else {
        return Ok(());
    };
    let (mut state, version) = store.load(&key).await?.unwrap_or_default();
    if recorded(&state, user).as_ref() == Some(session) {
        return Ok(());
    }
    if version > 0 && !state.extensions.contains_key(RECORD_SLOT) {
        // A session happens to bear the record's name: leave it alone.
        tracing::warn!(key = %key.display(), "not recording a conversation over a session's state");
        return Ok(());
    }
    state.extensions.insert(
        RECORD_SLOT.to_owned(),
        json!({"user": user.as_str(), "session": session.as_str()}),
    );
    match store.save(&key, &state, version, None).await {
        // Another reply recorded the same conversation meanwhile.
        Ok(_) | Err(StateError::Conflict { .. }) => Ok(()),
        Err(err) => Err(err),
    }
}

/// The session whose recorded conversation is the longest proper prefix of `messages` for
/// `user`, and how many messages it covers.
///
/// # Errors
/// What the store's `load` returns.
pub(crate) async fn find(
    store: &dyn StateStore,
    agent: &AgentId,
    user: &UserId,
    messages: &[Seen],
) -> Result<Option<(SessionId, usize)>, StateError> {
    let hashes = prefixes(messages);
    // Longest first; the whole request is never a prefix of itself (nothing new). A
    // recorded conversation ends with the reply: an assistant message.
    let candidates = (1..messages.len())
        .rev()
        .filter(|covered| messages[covered - 1].role == "assistant")
        .take(MAX_PROBES);
    for covered in candidates {
        let Some(key) = record_key(agent, user, &hashes[covered - 1]) else {
            continue;
        };
        if let Some(session) = store.load(&key).await?.and_then(|(state, _)| recorded(&state, user)) {
            return Ok(Some((session, covered)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_core::InMemoryStateStore;

    fn seen(role: &'static str, text: &str) -> Seen {
        Seen {
            role,
            text: text.to_owned(),
            calls: Vec::new(),
            call_id: None,
            images: Vec::new(),
        }
    }

    fn ids() -> (AgentId, UserId, SessionId) {
        (
            AgentId::parse("a").unwrap_or_else(|e| panic!("{e}")),
            UserId::parse("u1").unwrap_or_else(|e| panic!("{e}")),
            SessionId::parse("s-one").unwrap_or_else(|e| panic!("{e}")),
        )
    }

    async fn found(
        store: &InMemoryStateStore,
        agent: &AgentId,
        user: &UserId,
        messages: &[Seen],
    ) -> Option<(SessionId, usize)> {
        find(store, agent, user, messages)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn the_longest_recorded_prefix_wins_and_whitespace_does_not_matter() {
        let store = InMemoryStateStore::default();
        let (agent, user, one) = ids();
        let first = [seen("user", "hi"), seen("assistant", "hello")];
        remember(&store, &agent, &user, prefixes(&first)[1], &one)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let next = [
            seen("user", " hi\n"),
            seen("assistant", "hello  "),
            seen("user", "more"),
        ];
        assert_eq!(found(&store, &agent, &user, &next).await, Some((one.clone(), 2)));
        // A longer recorded conversation of another session wins over the shorter one.
        let two = SessionId::parse("s-two").unwrap_or_else(|e| panic!("{e}"));
        let longer = [
            next[0].clone(),
            next[1].clone(),
            next[2].clone(),
            seen("assistant", "ok"),
        ];
        remember(&store, &agent, &user, prefixes(&longer)[3], &two)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let after = [longer.to_vec(), vec![seen("user", "again")]].concat();
        assert_eq!(found(&store, &agent, &user, &after).await, Some((two, 4)));
        // Another agent, another user, or another history: no match.
        let other_agent = AgentId::parse("b").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found(&store, &other_agent, &user, &next).await, None);
        let other = UserId::parse("u2").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found(&store, &agent, &other, &next).await, None);
        let changed = [seen("user", "hi"), seen("assistant", "bye"), seen("user", "more")];
        assert_eq!(found(&store, &agent, &user, &changed).await, None);
        // The request itself is never its own prefix.
        assert_eq!(found(&store, &agent, &user, &first).await, None);
    }

    #[tokio::test]
    async fn a_record_names_its_user_and_never_overwrites_a_session() {
        let store = InMemoryStateStore::default();
        let (agent, user, one) = ids();
        let first = [seen("user", "hi"), seen("assistant", "hello")];
        let hash = prefixes(&first)[1];
        let Some(key) = record_key(&agent, &user, &hash) else {
            panic!("no key")
        };
        // A record moved under another user's key (or forged) is not theirs to match.
        let mut forged = AgentState::default();
        forged
            .extensions
            .insert(RECORD_SLOT.to_owned(), json!({"user": "u2", "session": "s-victim"}));
        store
            .save(&key, &forged, 0, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let next = [first[0].clone(), first[1].clone(), seen("user", "more")];
        assert_eq!(found(&store, &agent, &user, &next).await, None);
        // A state without the slot is a session's: recording leaves it alone.
        let other = [seen("user", "x"), seen("assistant", "y")];
        let Some(session_key) = record_key(&agent, &user, &prefixes(&other)[1]) else {
            panic!("no key")
        };
        let session_state = AgentState {
            transcript_offset: 7,
            ..AgentState::default()
        };
        store
            .save(&session_key, &session_state, 0, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        remember(&store, &agent, &user, prefixes(&other)[1], &one)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let kept = store.load(&session_key).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kept.map(|(state, _)| state), Some(session_state));
    }

    #[tokio::test]
    async fn only_the_latest_assistant_messages_are_probed() {
        let store = InMemoryStateStore::default();
        let (agent, user, one) = ids();
        let mut chat = Vec::new();
        for n in 0..=MAX_PROBES {
            chat.push(seen("user", &format!("q{n}")));
            chat.push(seen("assistant", &format!("a{n}")));
        }
        // Only the first reply was recorded; it is one assistant message too far back.
        remember(&store, &agent, &user, prefixes(&chat)[1], &one)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        chat.push(seen("user", "next"));
        assert_eq!(found(&store, &agent, &user, &chat).await, None);
        assert_eq!(found(&store, &agent, &user, &chat[..5]).await, Some((one, 2)));
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
