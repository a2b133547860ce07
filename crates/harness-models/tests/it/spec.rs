//! `ModelSpec::build` end to end: the environment the binary would pass selects the server.

use crate::server::{Mock, Server};
use crate::{request_with_tool, stream};
use harness_core::Msg;
use harness_models::ModelSpec;
use std::collections::HashMap;

fn env(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    move |key| map.get(key).cloned()
}

#[tokio::test]
async fn openai_spec_reaches_the_base_url_from_the_environment() {
    let server = Server::start(vec![
        Mock::sse(
            &[
                "data: {\"choices\":[{\"delta\":{\"content\":\"done 1\"}}]}\n\n".to_owned(),
                "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".to_owned(),
                "data: [DONE]\n\n".to_owned(),
            ],
            16,
        ),
        Mock::status(
            200,
            r#"{"choices":[{"message":{"role":"assistant","content":"done 1"},"finish_reason":"stop"}]}"#,
        ),
    ])
    .await;
    let model = ModelSpec::parse("openai:any")
        .unwrap()
        .build(&env(&[("OPENAI_BASE_URL", format!("{}/v1", server.base))]))
        .unwrap();
    assert_eq!(model.name(), "any");
    let streamed = stream(model.as_ref(), request_with_tool(vec![Msg::user("hi")]))
        .await
        .unwrap();
    let called = model.call(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    assert_eq!(
        (streamed.message.text(), called.message.text()),
        ("done 1".into(), "done 1".into())
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].headers.get("authorization").is_none(), "no key, no header");
    assert_eq!(requests[1].body["stream"], false);
}

#[tokio::test]
async fn anthropic_spec_sends_the_key_from_the_environment() {
    let server = Server::start(vec![Mock::status(
        200,
        r#"{"type":"message","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#,
    )])
    .await;
    let model = ModelSpec::parse("anthropic:claude-test")
        .unwrap()
        .build(&env(&[
            ("ANTHROPIC_BASE_URL", server.base.clone()),
            ("ANTHROPIC_API_KEY", "sk-ant-env".to_owned()),
        ]))
        .unwrap();
    let response = model.call(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    assert_eq!(response.message.text(), "hello");
    assert_eq!(server.only_request().headers["x-api-key"], "sk-ant-env");
}
