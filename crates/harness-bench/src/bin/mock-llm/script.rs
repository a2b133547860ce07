//! `--script FILE`: ordered rules that answer before the default policy. The file is JSON,
//! `{"rules": [RULE, ...]}` or a bare array (the format of the measuring server in
//! `shared/bench/mockllm`, so one file drives both). The first rule whose `when` conditions
//! all hold decides the reply; no rule matches → the default policy.
//!
//! ```json
//! {"rules": [
//!   {"when": {"last_text_contains": "weather"},
//!    "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
//!   {"when": {"last_role": "tool"}, "reply": {"text": "It is sunny."}},
//!   {"when": {"nth": 3}, "reply": {"error": {"status": 503}}, "delay_ms": 200}
//! ]}
//! ```
//!
//! `when` (all optional): `last_role` (user | tool | assistant), `last_text_contains`,
//! `any_text_contains`, `system_contains`, `tool_offered`, `n_user` (the number of user
//! messages), `nth` (only the Nth request that meets the other conditions, 1-based).
//! `reply`: `text`, or `tool_calls` (`name` and `arguments`, an object or a JSON text), or
//! `error` (`status`, optional `body`). `delay_ms` delays this reply. Memory extraction and
//! consolidation requests keep the default policy unless a rule names them with
//! `system_contains`.

use crate::policy::{Reply, Request};
use serde::Deserialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct When {
    last_role: Option<String>,
    last_text_contains: Option<String>,
    any_text_contains: Option<String>,
    system_contains: Option<String>,
    tool_offered: Option<String>,
    n_user: Option<usize>,
    nth: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Failure {
    #[serde(default = "bad_request")]
    status: u16,
    #[serde(default)]
    body: Option<Value>,
}

fn bad_request() -> u16 {
    400
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<Call>>,
    #[serde(default)]
    error: Option<Failure>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    #[serde(default)]
    when: When,
    reply: Answer,
    #[serde(default)]
    delay_ms: Option<u64>,
    /// Requests that met `when` apart from `nth`.
    #[serde(skip)]
    seen: AtomicU64,
}

/// What a rule decided.
pub(crate) enum Scripted {
    /// A reply (the first tool call when the rule lists several: the mock sends one per step).
    Reply(Reply, Option<Duration>),
    /// An HTTP error with its body.
    Error(u16, Value, Option<Duration>),
}

/// The loaded rules.
pub(crate) struct Script {
    rules: Vec<Rule>,
}

impl Script {
    /// Reads and checks `path`.
    ///
    /// # Errors
    /// A sentence naming the file and, for a bad rule, its index.
    pub(crate) fn load(path: &std::path::Path) -> Result<Self, String> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|err| format!("--script {shown}: {err}"))?;
        let value: Value = serde_json::from_str(&text).map_err(|err| format!("--script {shown}: {err}"))?;
        let list = match value {
            Value::Array(list) => list,
            Value::Object(mut object) if object.len() == 1 && object.get("rules").is_some_and(Value::is_array) => {
                match object.remove("rules") {
                    Some(Value::Array(list)) => list,
                    _ => Vec::new(),
                }
            }
            _ => {
                return Err(format!(
                    "--script {shown}: expected {{\"rules\": [...]}} or an array of rules"
                ));
            }
        };
        let mut rules = Vec::with_capacity(list.len());
        for (i, rule) in list.into_iter().enumerate() {
            let rule: Rule =
                serde_json::from_value(rule).map_err(|err| format!("--script {shown}: rule {i}: {err}"))?;
            let answers = [
                rule.reply.text.is_some(),
                rule.reply.tool_calls.as_ref().is_some_and(|calls| !calls.is_empty()),
                rule.reply.error.is_some(),
            ];
            if answers.iter().filter(|set| **set).count() != 1 {
                return Err(format!(
                    "--script {shown}: rule {i}: reply needs exactly one of text, tool_calls (not empty) or error"
                ));
            }
            if rule.when.nth == Some(0) {
                return Err(format!("--script {shown}: rule {i}: nth counts from 1"));
            }
            rules.push(rule);
        }
        Ok(Self { rules })
    }

    /// The first rule's answer to `request`, if a rule matches.
    pub(crate) fn answer(&self, request: &Request) -> Option<Scripted> {
        let mut decided = None;
        for rule in &self.rules {
            if !rule.when.holds(request) {
                continue;
            }
            // Every rule with `nth` counts its matching requests, also after another decided.
            let seen = rule.seen.fetch_add(1, Ordering::Relaxed) + 1;
            if decided.is_none() && rule.when.nth.is_none_or(|nth| nth == seen) {
                decided = Some(rule);
            }
        }
        let rule = decided?;
        let delay = rule.delay_ms.map(Duration::from_millis);
        let answer = &rule.reply;
        if let Some(failure) = &answer.error {
            let body = failure.body.clone().unwrap_or_else(
                || serde_json::json!({"error": {"message": "mock-llm: scripted error", "type": "server_error"}}),
            );
            return Some(Scripted::Error(failure.status, body, delay));
        }
        if let Some(call) = answer.tool_calls.as_ref().and_then(|calls| calls.first()) {
            let arguments = match &call.arguments {
                None => "{}".to_owned(),
                Some(Value::String(text)) => text.clone(),
                Some(value) => value.to_string(),
            };
            return Some(Scripted::Reply(
                Reply::ToolCall {
                    name: call.name.clone(),
                    arguments,
                },
                delay,
            ));
        }
        let text = answer.text.clone().unwrap_or_default();
        Some(Scripted::Reply(Reply::Text(text), delay))
    }
}

impl When {
    fn holds(&self, request: &Request) -> bool {
        // Memory extraction and consolidation keep the default policy unless a rule asks for
        // them by their system prompt, so background memory work never eats scripted replies.
        if request.is_memory() && self.system_contains.is_none() {
            return false;
        }
        let last = request.messages.last();
        let last_role = last.map_or("", |(role, _)| role.as_str());
        let last_text = last.map_or("", |(_, text)| text.as_str());
        self.last_role.as_deref().is_none_or(|role| role == last_role)
            && self
                .last_text_contains
                .as_deref()
                .is_none_or(|needle| last_text.contains(needle))
            && self.any_text_contains.as_deref().is_none_or(|needle| {
                request.system.contains(needle) || request.messages.iter().any(|(_, text)| text.contains(needle))
            })
            && self
                .system_contains
                .as_deref()
                .is_none_or(|needle| request.system.contains(needle))
            && self
                .tool_offered
                .as_deref()
                .is_none_or(|name| request.tools.iter().any(|tool| tool == name))
            && self.n_user.is_none_or(|n| n == request.user_count())
    }
}
