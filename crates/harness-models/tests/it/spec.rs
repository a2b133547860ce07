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

fn ok_completion() -> Mock {
    Mock::status(
        200,
        r#"{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#,
    )
}

/// Problem 1 of the trust boundary: a spec the operator did not write (`untrusted`) that
/// names its own base URL gets no key there; the operator's own `@URL`, the base variable's
/// URL and the default base keep the key.
#[tokio::test]
async fn a_key_goes_only_to_a_base_url_the_operator_wrote() {
    let key = ("OPENAI_API_KEY", "sk-secret".to_owned());
    // The model's own `@URL`: built without the key, the request carries no Authorization.
    let foreign = Server::start(vec![ok_completion()]).await;
    let spec = format!("openai:gpt-4o@{}/v1", foreign.base);
    let model = ModelSpec::parse(&spec)
        .unwrap()
        .untrusted()
        .build(&env(std::slice::from_ref(&key)))
        .unwrap();
    model.call(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    let request = foreign.only_request();
    assert!(request.headers.get("authorization").is_none(), "{:?}", request.headers);
    // Nor for `openai-compatible:` (which reads OPENAI_API_KEY too).
    let foreign = Server::start(vec![ok_completion()]).await;
    let spec = format!("openai-compatible:qwen@{}/v1", foreign.base);
    let model = ModelSpec::parse(&spec)
        .unwrap()
        .untrusted()
        .build(&env(std::slice::from_ref(&key)))
        .unwrap();
    model.call(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    assert!(foreign.only_request().headers.get("authorization").is_none());
    // The same URL in the preset's base variable: the operator sent the key there.
    let operator = Server::start(vec![ok_completion()]).await;
    let spec = format!("openai:gpt-4o@{}/v1", operator.base);
    let model = ModelSpec::parse(&spec)
        .unwrap()
        .untrusted()
        .build(&env(&[
            key.clone(),
            ("OPENAI_BASE_URL", format!("{}/v1", operator.base)),
        ]))
        .unwrap();
    model.call(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    assert_eq!(operator.only_request().headers["authorization"], "Bearer sk-secret");
    // The operator's own `@URL` (harness.toml, --model, a root subagents/ file): keyed, as
    // the README's `openai-compatible:…@URL` form promises.
    let operator = Server::start(vec![ok_completion()]).await;
    let spec = format!("openai-compatible:qwen@{}/v1", operator.base);
    let model = ModelSpec::parse(&spec).unwrap().build(&env(&[key])).unwrap();
    model.call(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    assert_eq!(operator.only_request().headers["authorization"], "Bearer sk-secret");
}
