//! Messages and content blocks. The serde JSON form of [`Msg`] is a persisted format (agent
//! state, transcripts): fields are only ever added, with defaults, and [`MSG_FORMAT`] is
//! bumped when a reader must tell old records from new ones.

use crate::model::FinishReason;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The version written into every serialized [`Msg`] (`"v"`).
pub const MSG_FORMAT: u32 = 1;

/// Who produced a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the application.
    System,
    /// The human (or calling program).
    User,
    /// The model.
    Assistant,
    /// The result of a tool call.
    Tool,
}

/// Where the bytes of an image, audio clip or file live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MediaSource {
    /// Inline, base64-encoded.
    Base64 {
        /// IANA media type, e.g. `image/png`.
        media_type: String,
        /// The base64 payload.
        data: String,
    },
    /// A URL the provider can fetch.
    Url {
        /// The address.
        url: String,
    },
    /// A path in the agent's workspace.
    Path {
        /// Workspace-relative path.
        path: String,
    },
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Model reasoning. The signature, when the provider gives one, must be sent back unchanged.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// Provider signature (Anthropic), round-tripped verbatim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A tool call requested by the model.
    ToolUse {
        /// Provider-assigned call id; pairs the call with its result.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments. When the model sent text that is not JSON, this is that text as a string.
        input: Value,
    },
    /// The result of a tool call.
    ToolResult {
        /// The id of the [`Block::ToolUse`] this answers.
        tool_use_id: String,
        /// The tool's output blocks (text, images).
        content: Vec<Block>,
        /// Whether the tool failed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// An image.
    Image {
        /// Where its bytes are.
        source: MediaSource,
    },
    /// An audio clip.
    Audio {
        /// Where its bytes are.
        source: MediaSource,
    },
    /// Any other file.
    File {
        /// Where its bytes are.
        source: MediaSource,
        /// A display name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of a text block, else `None`.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            _ => None,
        }
    }
}

/// The text blocks of `blocks` joined with newlines (empty when there are none).
pub fn join_text(blocks: &[Block]) -> String {
    let mut out = String::new();
    for text in blocks.iter().filter_map(Block::as_text) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(text);
    }
    out
}

/// Token counts reported by a provider for one model call (or a sum of several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, including cached ones.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Adds `other` to `self`, field by field.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

fn msg_format() -> u32 {
    MSG_FORMAT
}

/// A message: the unit of conversation that is sent to models and persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Msg {
    /// Format version of this record; see [`MSG_FORMAT`].
    #[serde(rename = "v", default = "msg_format")]
    pub format: u32,
    /// Unique id (UUID v7, so ids sort by creation time).
    pub id: String,
    /// Who produced it.
    pub role: Role,
    /// Optional sender name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Ordered content blocks.
    pub content: Vec<Block>,
    /// Free-form metadata. Keys starting with `harness.` are reserved (see [`meta`]).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// When the message was created.
    pub created_at: jiff::Timestamp,
    /// Token usage of the model call that produced it (assistant messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why the model stopped producing it (assistant messages): OpenAI's `finish_reason`,
    /// Anthropic's `stop_reason`, mapped to one vocabulary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
}

/// Reserved metadata keys.
pub mod meta {
    /// `true` on a message that must survive every compaction verbatim.
    pub const PINNED: &str = "harness.pinned";
    /// `true` on a synthetic message the runtime added (repairs, summaries).
    pub const SYNTHETIC: &str = "harness.synthetic";
}

/// A UUIDv7 for a new message: the message's time in milliseconds, then 18 random bits
/// drawn once per process and a 56-bit sequence starting at a random point. Ids are unique
/// within a process by construction and across processes by the random start, sort by
/// creation time (and by creation order within a millisecond), and cost no system call
/// (`Uuid::now_v7` asks the OS for randomness on every id).
fn fresh_id(now: jiff::Timestamp) -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<u128> = OnceLock::new();
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| uuid::Uuid::new_v4().as_u128());
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let sequence = (seed as u64).wrapping_add(n).to_be_bytes();
    let fixed = ((seed >> 64) as u32).to_be_bytes();
    // rand_a takes 12 bits of bytes 0-1 and rand_b 62 bits of bytes 2-9 (the builder
    // overwrites the version and variant bits): the sequence's low 56 bits sit in bytes
    // 3-9, clear of both.
    let mut bytes = [0u8; 10];
    bytes[..3].copy_from_slice(&fixed[..3]);
    bytes[3..].copy_from_slice(&sequence[1..]);
    let millis = u64::try_from(now.as_millisecond()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &bytes)
        .into_uuid()
        .to_string()
}

impl Msg {
    /// A message with the given role and blocks, a fresh id and the current time.
    pub fn new(role: Role, content: Vec<Block>) -> Self {
        let now = jiff::Timestamp::now();
        Self {
            format: MSG_FORMAT,
            id: fresh_id(now),
            role,
            name: None,
            content,
            metadata: Map::new(),
            created_at: now,
            usage: None,
            finish_reason: None,
        }
    }

    /// A user message holding one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![Block::text(text)])
    }

    /// An assistant message holding one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![Block::text(text)])
    }

    /// A system message holding one text block.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, vec![Block::text(text)])
    }

    /// A tool-role message carrying one tool result.
    pub fn tool_result(tool_use_id: impl Into<String>, content: Vec<Block>, is_error: bool) -> Self {
        Self::new(
            Role::Tool,
            vec![Block::ToolResult {
                tool_use_id: tool_use_id.into(),
                content,
                is_error,
            }],
        )
    }

    /// All text blocks joined with newlines (empty when there are none).
    pub fn text(&self) -> String {
        join_text(&self.content)
    }

    /// The tool calls in this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = ToolCallRef<'_>> {
        self.content.iter().filter_map(|block| match block {
            Block::ToolUse { id, name, input } => Some(ToolCallRef { id, name, input }),
            _ => None,
        })
    }

    /// Whether the message requests any tool call.
    pub fn has_tool_calls(&self) -> bool {
        self.tool_calls().next().is_some()
    }

    /// The ids of the tool results in this message.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|block| match block {
            Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
    }

    /// Whether metadata marks the message as pinned ([`meta::PINNED`]).
    pub fn is_pinned(&self) -> bool {
        self.metadata.get(meta::PINNED) == Some(&Value::Bool(true))
    }

    /// Marks the message as pinned: compaction keeps it verbatim.
    #[must_use]
    pub fn pinned(mut self) -> Self {
        self.metadata.insert(meta::PINNED.to_owned(), Value::Bool(true));
        self
    }

    /// A rough character count of everything the model would read, for budgets.
    pub fn char_len(&self) -> usize {
        fn block_len(block: &Block) -> usize {
            match block {
                Block::Text { text } => text.len(),
                Block::Thinking { thinking, .. } => thinking.len(),
                Block::ToolUse { name, input, .. } => name.len() + json_len(input),
                Block::ToolResult { content, .. } => content.iter().map(block_len).sum(),
                Block::Image { .. } | Block::Audio { .. } | Block::File { .. } => 64,
            }
        }
        self.content.iter().map(block_len).sum()
    }
}

fn json_len(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len() + 2,
        other => other.to_string().len(),
    }
}

/// A borrowed view of one tool call inside a message.
#[derive(Debug, Clone, Copy)]
pub struct ToolCallRef<'a> {
    /// Call id.
    pub id: &'a str,
    /// Tool name.
    pub name: &'a str,
    /// Arguments.
    pub input: &'a Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_sorted_v7() {
        let ids: Vec<uuid::Uuid> = (0..1000)
            .map(|_| uuid::Uuid::parse_str(&Msg::user("x").id).unwrap_or_default())
            .collect();
        assert!(ids.iter().all(|id| id.get_version_num() == 7));
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]),
            "ids sort by creation order"
        );
    }

    fn round_trip(msg: &Msg) {
        let json = serde_json::to_string(msg).unwrap_or_default();
        let back: Msg = serde_json::from_str(&json).unwrap_or_else(|err| panic!("{err}: {json}"));
        assert_eq!(&back, msg);
    }

    #[test]
    fn every_block_kind_round_trips() {
        let mut msg = Msg::new(
            Role::Assistant,
            vec![
                Block::text("hi"),
                Block::Thinking {
                    thinking: "hmm".into(),
                    signature: Some("sig==".into()),
                },
                Block::ToolUse {
                    id: "c1".into(),
                    name: "lookup".into(),
                    input: serde_json::json!({"key": "k1"}),
                },
                Block::Image {
                    source: MediaSource::Url {
                        url: "https://x/y.png".into(),
                    },
                },
                Block::Audio {
                    source: MediaSource::Base64 {
                        media_type: "audio/wav".into(),
                        data: "AAAA".into(),
                    },
                },
                Block::File {
                    source: MediaSource::Path { path: "a/b.pdf".into() },
                    name: Some("b.pdf".into()),
                },
            ],
        );
        msg.usage = Some(Usage {
            input_tokens: 10,
            output_tokens: 2,
            cache_read_tokens: 4,
            cache_write_tokens: 0,
        });
        round_trip(&msg);
        round_trip(&Msg::tool_result("c1", vec![Block::text("out")], true).pinned());
    }

    #[test]
    fn persisted_form_is_stable() {
        let json = r#"{"v":1,"id":"0190","role":"tool","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"ok"}],"is_error":true}],"created_at":"2026-11-29T00:00:00Z"}"#;
        let msg: Msg = serde_json::from_str(json).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(msg.role, Role::Tool);
        assert_eq!(msg.tool_result_ids().collect::<Vec<_>>(), ["c1"]);
        assert_eq!(serde_json::to_string(&msg).unwrap_or_default(), json);
    }

    #[test]
    fn records_without_version_read_as_version_one() {
        let json =
            r#"{"id":"x","role":"user","content":[{"type":"text","text":"a"}],"created_at":"2026-11-29T00:00:00Z"}"#;
        let msg: Msg = serde_json::from_str(json).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!((msg.format, msg.text().as_str()), (1, "a"));
    }
}
