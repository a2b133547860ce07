//! What the mock answers: a pure function of the request.
//!
//! * Memory extraction requests (the system prompt of `harness-memory`'s extractor): one
//!   fact per `[user]:` line of the conversation, `- The user said: …`; `NO_REPLY` when
//!   there is none.
//! * Consolidation requests (`You maintain MEMORY.md`): the current memory's and the new
//!   entries' `- ` lines, deduplicated, under one heading.
//! * A last user message `/tool NAME {json}` naming an offered tool: that tool call.
//! * A last user message and the preferred tool (`--tool`, default `lookup`) offered: a call
//!   to it with `{"key":"k<N>"}` (the benchmark contract).
//! * Otherwise `done <N>` — after a tool result nothing more; after a user message also
//!   what the user said before, so a demo shows the session's history.
//!
//! `N` is the number of user messages in the request.

use serde_json::{Value, json};

/// A request reduced to what the policy reads.
#[derive(Debug, Default)]
pub(crate) struct Request {
    pub(crate) system: String,
    /// (role, text) of every non-system message.
    pub(crate) messages: Vec<(String, String)>,
    pub(crate) tools: Vec<String>,
}

/// What to send back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Text(String),
    ToolCall { name: String, arguments: String },
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

impl Request {
    /// Reads an OpenAI Chat Completions body.
    pub(crate) fn from_openai(body: &Value) -> Self {
        let mut request = Self::default();
        for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
            let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
            let text = message.get("content").map(text_of).unwrap_or_default();
            if matches!(role, "system" | "developer") {
                if !request.system.is_empty() {
                    request.system.push('\n');
                }
                request.system.push_str(&text);
            } else {
                request.messages.push((role.to_owned(), text));
            }
        }
        for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
            let name = tool
                .pointer("/function/name")
                .or_else(|| tool.get("name"))
                .and_then(Value::as_str);
            request.tools.extend(name.map(str::to_owned));
        }
        request
    }

    pub(crate) fn user_count(&self) -> usize {
        self.messages.iter().filter(|(role, _)| role == "user").count()
    }
}

/// `text` on one line, cut to `max` characters.
fn excerpt(text: &str, max: usize) -> String {
    harness_core::excerpt(&text.split_whitespace().collect::<Vec<_>>().join(" "), max)
}

impl Request {
    /// Whether this is a memory extraction or consolidation request.
    pub(crate) fn is_memory(&self) -> bool {
        self.system.starts_with("You extract durable facts") || self.system.starts_with("You maintain MEMORY.md")
    }
}

/// The reply to `request`; `prefer_tool` is the benchmark's tool.
pub(crate) fn reply(request: &Request, prefer_tool: &str) -> Reply {
    if request.system.starts_with("You extract durable facts") {
        return Reply::Text(extract(request));
    }
    if request.system.starts_with("You maintain MEMORY.md") {
        return Reply::Text(consolidate(request));
    }
    let n = request.user_count();
    let Some((last_role, last_text)) = request.messages.last() else {
        return Reply::Text(format!("done {n}"));
    };
    if last_role != "user" {
        return Reply::Text(format!("done {n}"));
    }
    if let Some(call) = explicit_call(last_text, &request.tools) {
        return call;
    }
    if request.tools.iter().any(|t| t == prefer_tool) {
        return Reply::ToolCall {
            name: prefer_tool.to_owned(),
            arguments: json!({"key": format!("k{n}")}).to_string(),
        };
    }
    let earlier = request.messages.iter().rev().filter(|(role, _)| role == "user").nth(1);
    Reply::Text(match earlier {
        Some((_, text)) => format!("done {n}. Before this you said: \"{}\"", excerpt(text, 200)),
        None => format!("done {n}. You said: \"{}\"", excerpt(last_text, 200)),
    })
}

/// `/tool NAME {json}` for an offered tool.
fn explicit_call(text: &str, tools: &[String]) -> Option<Reply> {
    let rest = text.trim().strip_prefix("/tool ")?;
    let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, "{}"));
    if !tools.iter().any(|t| t == name) {
        return None;
    }
    let arguments = arguments.trim();
    let valid = serde_json::from_str::<Value>(arguments).is_ok_and(|v| v.is_object());
    Some(Reply::ToolCall {
        name: name.to_owned(),
        arguments: if valid { arguments.to_owned() } else { "{}".to_owned() },
    })
}

fn extract(request: &Request) -> String {
    let conversation = request
        .messages
        .iter()
        .rev()
        .find(|(role, _)| role == "user")
        .map(|(_, text)| text.as_str())
        .unwrap_or_default();
    let facts: Vec<String> = conversation
        .lines()
        .filter_map(|line| line.trim().strip_prefix("[user]:"))
        .map(|said| format!("- The user said: {}", excerpt(said.trim(), 200)))
        .collect();
    if facts.is_empty() {
        "NO_REPLY".to_owned()
    } else {
        facts.join("\n")
    }
}

fn consolidate(request: &Request) -> String {
    let input = request
        .messages
        .iter()
        .rev()
        .find(|(role, _)| role == "user")
        .map(|(_, text)| text.as_str())
        .unwrap_or_default();
    let mut facts: Vec<String> = Vec::new();
    for line in input.lines() {
        let Some(fact) = line.trim().strip_prefix("- ") else {
            continue;
        };
        let fact = match fact.find("<!--") {
            Some(at) => fact[..at].trim(),
            None => fact.trim(),
        };
        if !fact.is_empty() && !facts.iter().any(|known| known == fact) {
            facts.push(fact.to_owned());
        }
    }
    let mut out = String::from("## Facts\n");
    for fact in facts {
        out.push_str("- ");
        out.push_str(&fact);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(messages: &[(&str, &str)], tools: &[&str]) -> Request {
        Request {
            system: String::new(),
            messages: messages
                .iter()
                .map(|(r, t)| ((*r).to_owned(), (*t).to_owned()))
                .collect(),
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    #[test]
    fn the_benchmark_contract_holds() {
        let first = request(&[("user", "hi")], &["read_file", "lookup"]);
        assert_eq!(
            reply(&first, "lookup"),
            Reply::ToolCall {
                name: "lookup".into(),
                arguments: r#"{"key":"k1"}"#.into()
            }
        );
        let after_tool = request(&[("user", "hi"), ("assistant", ""), ("tool", "v")], &["lookup"]);
        assert_eq!(reply(&after_tool, "lookup"), Reply::Text("done 1".into()));
    }

    #[test]
    fn replies_show_history_and_explicit_calls_work() {
        let second = request(
            &[("user", "hello"), ("assistant", "x"), ("user", "what?")],
            &["read_file"],
        );
        assert_eq!(
            reply(&second, "lookup"),
            Reply::Text("done 2. Before this you said: \"hello\"".into())
        );
        let call = request(&[("user", "/tool read_file {\"path\":\"AGENTS.md\"}")], &["read_file"]);
        assert_eq!(
            reply(&call, "lookup"),
            Reply::ToolCall {
                name: "read_file".into(),
                arguments: "{\"path\":\"AGENTS.md\"}".into()
            }
        );
    }

    #[test]
    fn memory_requests_get_facts() {
        let mut extraction = request(
            &[("user", "Conversation:\n[user]: I like green tea\n[assistant]: ok")],
            &[],
        );
        extraction.system = "You extract durable facts for a long-term memory ledger.".into();
        assert_eq!(
            reply(&extraction, "lookup"),
            Reply::Text("- The user said: I like green tea".into())
        );
        let mut consolidation = request(
            &[(
                "user",
                "<current_memory>\n- a\n</current_memory>\n<new_entries>\n- b <!-- s -->\n- a\n</new_entries>",
            )],
            &[],
        );
        consolidation.system = "You maintain MEMORY.md, a curated memory".into();
        assert_eq!(
            reply(&consolidation, "lookup"),
            Reply::Text("## Facts\n- a\n- b\n".into())
        );
    }
}
