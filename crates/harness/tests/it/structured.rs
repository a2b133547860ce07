//! Structured output (`HarnessAgent::call_structured`): the native path, the
//! `generate_response` tool, repair asks, the native path falling back to the tool, and the
//! typed error when the model never complies. The recorded requests show which way each
//! model call asked.

use crate::support::{builder, collect, ctx};
use harness::structured::{GENERATE_RESPONSE, NATIVE_REFUSED, OutputSchema, StructuredError, StructuredMode};
use harness_core::{Block, EventKind, ResponseFormat, Role, ToolChoice};
use harness_models::{Fallback, Reply, ScriptedError, ScriptedModel, ScriptedToolCall};
use serde_json::json;

fn schema() -> OutputSchema {
    OutputSchema::new(json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": false
    }))
    .unwrap()
}

fn tool_names(request: &harness_core::ChatRequest) -> Vec<String> {
    request.tools.iter().map(|tool| tool.name.clone()).collect()
}

#[tokio::test]
async fn the_tool_path_offers_generate_response_then_forces_it_after_prose() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_text("Paris has about two million people.")
        .reply_tool_call(GENERATE_RESPONSE, json!({"city": "Paris", "population": 2_100_000}));
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    let reply = agent
        .call_structured("Biggest city of France?", &schema(), ctx("u1", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.value, json!({"city": "Paris", "population": 2_100_000}));
    assert_eq!(reply.message.text(), reply.value.to_string());

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    // First call: the tool beside the agent's own, the model chooses; nothing native.
    let first = tool_names(&requests[0]);
    assert!(
        first.contains(&GENERATE_RESPONSE.to_owned()) && first.len() > 1,
        "{first:?}"
    );
    assert_eq!(requests[0].tool_choice, ToolChoice::Auto);
    assert_eq!(requests[0].response_format, None);
    // After prose: a repair ask, and only the tool, forced.
    assert_eq!(tool_names(&requests[1]), [GENERATE_RESPONSE]);
    assert_eq!(requests[1].tool_choice, ToolChoice::Required);
    let ask = requests[1].messages.last().unwrap();
    assert_eq!(ask.role, Role::User);
    assert!(
        ask.text().contains("not valid JSON") && ask.text().contains(GENERATE_RESPONSE),
        "{}",
        ask.text()
    );
    assert!(model.violations().is_empty(), "{:?}", model.violations());

    // One valid turn: user, prose, ask, the call, its result, the answer.
    model.push(Reply::text("Berlin"));
    agent.call("and Germany?", ctx("u1", "s1")).await.unwrap();
    let next = model.last_request().unwrap();
    let roles: Vec<Role> = next.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User
        ]
    );
    assert!(model.violations().is_empty(), "{:?}", model.violations());
}

#[tokio::test]
async fn the_native_path_sends_the_schema_and_still_validates_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .with_native_response_format(true)
        .reply_text("{\"city\": \"Paris\"}")
        .reply_text("{\"city\": \"Paris\", \"population\": 2100000}");
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    let schema = schema().named("city_facts").unwrap().strict(true);
    let reply = agent
        .call_structured("France?", &schema, ctx("u1", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.value["population"], 2_100_000);
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "the first answer missed a required field");
    for request in &requests {
        assert_eq!(
            request.response_format,
            Some(ResponseFormat::JsonSchema {
                name: "city_facts".into(),
                schema: schema.schema().clone(),
                strict: true
            })
        );
        assert!(!tool_names(request).contains(&GENERATE_RESPONSE.to_owned()));
    }
    let ask = requests[1].messages.last().unwrap().text();
    assert!(
        ask.contains("population") && ask.contains("only the JSON value"),
        "{ask}"
    );
}

#[tokio::test]
async fn a_refused_native_field_falls_back_to_the_tool_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .with_native_response_format(true)
        .reply_error(ScriptedError::InvalidRequest)
        .reply_tool_call(GENERATE_RESPONSE, json!({"city": "Lyon", "population": 520_000}));
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    let events = collect(agent.stream_structured("Second city?", &schema(), ctx("u1", "s1"))).await;
    let warnings: Vec<&str> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Warning { code, .. } => Some(code.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(warnings, [NATIVE_REFUSED]);
    let Some(EventKind::Final { message }) = events.last().map(|e| &e.kind) else {
        panic!("{events:?}");
    };
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&message.text()).unwrap(),
        json!({"city": "Lyon", "population": 520_000})
    );
    let requests = model.requests();
    assert!(requests[0].response_format.is_some());
    assert_eq!(requests[1].response_format, None);
    assert!(tool_names(&requests[1]).contains(&GENERATE_RESPONSE.to_owned()));
}

#[tokio::test]
async fn a_model_that_never_complies_gets_a_bounded_number_of_asks_then_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_text("I would rather chat.")
        .fallback(Fallback::RepeatLast);
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    let err = agent
        .call_structured("France?", &schema().max_repairs(2), ctx("u1", "s1"))
        .await
        .unwrap_err();
    match &err {
        StructuredError::NotCompliant { attempts, error } => {
            assert_eq!(*attempts, 3);
            assert!(error.contains("not valid JSON"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("the model's answer did not match the output schema after 3 attempts")
    );
    assert_eq!(model.request_count(), 3, "the first answer and two repair asks");
}

#[tokio::test]
async fn invalid_tool_arguments_get_the_validation_error_as_the_calls_result() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call(GENERATE_RESPONSE, json!({"city": "Paris", "population": "many"}))
        .reply_tool_call(GENERATE_RESPONSE, json!({"city": "Paris", "population": 2}));
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    let reply = agent
        .call_structured("France?", &schema(), ctx("u1", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.value["population"], 2);
    let second = &model.requests()[1];
    let last = second.messages.last().unwrap();
    let Block::ToolResult { is_error, content, .. } = &last.content[0] else {
        panic!("{last:?}");
    };
    let text = harness_core::join_text(content);
    assert!(*is_error && text.contains("/population"), "{text}");
    assert_eq!(second.tool_choice, ToolChoice::Required);
}

#[tokio::test]
async fn the_agents_tools_run_first_and_an_answer_mixed_with_them_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // The caller's own layer (isolation per user).
    std::fs::create_dir_all(dir.path().join("u1")).unwrap();
    std::fs::write(dir.path().join("u1/notes.txt"), "Paris: 2100000").unwrap();
    let mixed = Reply {
        tool_calls: vec![
            ScriptedToolCall {
                name: "read_file".into(),
                arguments: json!({"path": "notes.txt"}),
                id: Some("read".into()),
            },
            ScriptedToolCall {
                name: GENERATE_RESPONSE.into(),
                arguments: json!({"city": "Paris", "population": 1}),
                id: Some("early".into()),
            },
        ],
        ..Reply::default()
    };
    let model = ScriptedModel::new()
        .reply(mixed)
        .reply_tool_call(GENERATE_RESPONSE, json!({"city": "Paris", "population": 2_100_000}));
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    let reply = agent
        .call_structured("From notes.txt", &schema(), ctx("u1", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.value["population"], 2_100_000);
    let second = &model.requests()[1];
    let results: Vec<(String, bool, String)> = second
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|block| match block {
            Block::ToolResult {
                tool_use_id,
                is_error,
                content,
            } => Some((tool_use_id.clone(), *is_error, harness_core::join_text(content))),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!((results[0].0.as_str(), results[0].1), ("read", false));
    assert!(results[0].2.contains("2100000"), "{results:?}");
    assert_eq!((results[1].0.as_str(), results[1].1), ("early", true));
    assert!(results[1].2.contains("alone"), "{results:?}");
    assert!(model.violations().is_empty(), "{:?}", model.violations());
}

#[tokio::test]
async fn tool_mode_uses_the_tool_even_on_a_native_model_and_plain_calls_are_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .with_native_response_format(true)
        .reply_tool_call(GENERATE_RESPONSE, json!({"city": "Nice", "population": 340_000}))
        .reply_text("plain");
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    let schema = schema().mode(StructuredMode::Tool);
    let reply = agent
        .call_structured("Riviera?", &schema, ctx("u1", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.value["city"], "Nice");
    assert_eq!(model.requests()[0].response_format, None);
    // A plain call of the same agent is not structured.
    let plain = agent.call("hi", ctx("u1", "s2")).await.unwrap();
    assert_eq!(plain.text(), "plain");
    let last = model.last_request().unwrap();
    assert_eq!(last.response_format, None);
    assert!(!tool_names(&last).contains(&GENERATE_RESPONSE.to_owned()));
}
