//! The MCP client against real servers: environment scrubbing, restarts, reconnects,
//! timeouts, shutdown, broken and colliding servers.

use crate::servers::{call, everything_server, http_server, http_server_on, live_members, start, time_bin, wait_for};
use harness_core::{Tool, ToolError};
use harness_mcp::{RestartPolicy, ServerPhase};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test]
async fn stdio_server_gets_a_scrubbed_environment_plus_its_own_env() {
    let manager = start(
        &format!(
            "{{\"mcpServers\": {{{}}}}}",
            everything_server("e", r#", "env": {"GREETING": "hello-plain-x"}"#)
        ),
        RestartPolicy::default(),
    )
    .await;
    let output = call(&manager, "mcp__e__get-env", json!({})).await.unwrap();
    let text = output.text_content();
    assert!(text.contains("hello-plain-x"), "configured env is passed: {text}");
    assert!(text.contains("\"PATH\""), "PATH is inherited: {text}");
    assert!(
        !text.contains("sk-must-not-leak") && !text.contains("HARNESS_TEST_API_KEY"),
        "{text}"
    );
    assert!(
        !text.contains("CARGO_"),
        "the host's other variables are dropped: {text}"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn python_time_server_over_stdio() {
    let manager = start(
        &format!(
            r#"{{"mcpServers": {{"time": {{"transport": "stdio", "command": {:?}, "args": ["--local-timezone", "UTC"]}}}}}}"#,
            time_bin()
        ),
        RestartPolicy::default(),
    )
    .await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    let tool = manager
        .mcp_tools()
        .iter()
        .find(|t| t.remote_name() == "get_current_time")
        .unwrap();
    assert_eq!(tool.spec().name, "mcp__time__get_current_time");
    assert_eq!(tool.annotations().read_only, Some(true), "{:?}", tool.annotations());
    let output = call(&manager, "mcp__time__get_current_time", json!({"timezone": "UTC"}))
        .await
        .unwrap();
    assert!(!output.is_error);
    assert!(output.text_content().contains("UTC"), "{}", output.text_content());
    manager.shutdown().await;
}

/// A streamable-HTTP server that goes away and comes back on the same port: a call during
/// the outage is an error result at once (no hang), and the first call after it is back
/// reconnects and works.
#[tokio::test]
async fn a_streamable_http_server_that_comes_back_is_reconnected_on_the_next_call() {
    let (mut server, port) = http_server().await;
    let policy = RestartPolicy {
        backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        ..RestartPolicy::default()
    };
    let manager = start(
        &format!(
            r#"{{"mcpServers": {{"web": {{"transport": "streamableHttp", "url": "http://127.0.0.1:{port}/mcp",
                 "timeout_seconds": 20}}}}}}"#
        ),
        policy,
    )
    .await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    let echo = |text: &'static str| call(&manager, "mcp__web__echo", json!({ "message": text }));
    assert!(echo("before").await.unwrap().text_content().contains("before"));

    server.kill().await.unwrap();
    let _ = server.wait().await;
    let during = tokio::time::timeout(Duration::from_secs(60), echo("during"))
        .await
        .expect("a call during the outage must not hang");
    let err = during.expect_err("the server is gone");
    assert!(err.to_string().contains("web"), "{err}");

    let mut back = http_server_on(port).await;
    let after = tokio::time::timeout(Duration::from_secs(60), echo("after"))
        .await
        .expect("the call after the outage must not hang");
    assert!(after.unwrap().text_content().contains("after"));
    manager.shutdown().await;
    back.kill().await.unwrap();
}

#[tokio::test]
async fn killed_server_is_restarted_and_a_call_during_the_outage_fails_fast() {
    let policy = RestartPolicy {
        backoff: Duration::from_secs(3),
        ..RestartPolicy::default()
    };
    let manager = start(
        &format!("{{\"mcpServers\": {{{}}}}}", everything_server("e", "")),
        policy,
    )
    .await;
    let mut status = manager.status("e").unwrap();
    let first = status.borrow().pid.unwrap();
    std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();

    let down = wait_for(&mut status, |s| matches!(s.phase, ServerPhase::Restarting { .. })).await;
    assert_eq!(down.pid, None);
    let started = std::time::Instant::now();
    let err = call(&manager, "mcp__e__echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("unavailable") && err.to_string().contains("restarted"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the call must not wait for the restart"
    );

    let up = wait_for(&mut status, |s| s.phase == ServerPhase::Ready).await;
    assert_eq!(up.restarts, 1);
    assert_ne!(up.pid, Some(first));
    let output = call(&manager, "mcp__e__echo", json!({"message": "back"}))
        .await
        .unwrap();
    assert!(output.text_content().contains("back"));
    manager.shutdown().await;
    assert!(live_members(&BTreeSet::from([first, up.pid.unwrap()])).is_empty());
}

#[tokio::test]
async fn a_hanging_call_times_out_and_the_server_stays_usable() {
    let manager = start(
        &format!(
            "{{\"mcpServers\": {{{}}}}}",
            everything_server("e", r#", "timeout_seconds": 2"#)
        ),
        RestartPolicy::default(),
    )
    .await;
    let err = call(
        &manager,
        "mcp__e__trigger-long-running-operation",
        json!({"duration": 60, "steps": 1}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ToolError::Timeout { after, .. } if after == Duration::from_secs(2)),
        "{err}"
    );
    let output = call(&manager, "mcp__e__echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert!(output.text_content().contains("still here"));
    manager.shutdown().await;
}

#[tokio::test]
async fn a_call_that_reports_progress_runs_past_its_timeout() {
    // server-everything's long-running operation reports progress once a second for six
    // seconds; the server's timeout is two: each notification restarts the timer.
    let manager = start(
        &format!(
            "{{\"mcpServers\": {{{}}}}}",
            everything_server("e", r#", "timeout_seconds": 2"#)
        ),
        RestartPolicy::default(),
    )
    .await;
    let output = call(
        &manager,
        "mcp__e__trigger-long-running-operation",
        json!({"duration": 6, "steps": 6}),
    )
    .await
    .unwrap();
    assert!(
        output.text_content().contains("Long running operation completed"),
        "{}",
        output.text_content()
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn shutdown_leaves_no_server_process_behind() {
    let manager = start(
        &format!(
            r#"{{"mcpServers": {{{}, "time": {{"transport": "stdio", "command": {:?}}}}}}}"#,
            everything_server("e", ""),
            time_bin()
        ),
        RestartPolicy::default(),
    )
    .await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    let groups: BTreeSet<u32> = ["e", "time"]
        .iter()
        .map(|name| manager.status(name).unwrap().borrow().pid.unwrap())
        .collect();
    assert_eq!(
        live_members(&groups).len(),
        2,
        "both servers run, each leading its own group"
    );
    manager.shutdown().await;
    assert_eq!(live_members(&groups), Vec::<(u32, String)>::new());
    for name in ["e", "time"] {
        assert_eq!(manager.status(name).unwrap().borrow().phase, ServerPhase::Stopped);
    }
}

#[tokio::test]
async fn a_broken_server_is_a_warning_and_the_others_start() {
    let manager = start(
        &format!(
            r#"{{"mcpServers": {{{}, "broken": {{"transport": "stdio", "command": "/nonexistent/mcp-server"}},
                 "off": {{"transport": "stdio", "command": "/nonexistent/other", "enabled": false}},
                 "crashes": {{"transport": "stdio", "command": "sh", "args": ["-c", "echo no-such-config >&2; exit 3"]}}}}}}"#,
            everything_server("good", "")
        ),
        RestartPolicy {
            connect_timeout: Duration::from_secs(20),
            ..RestartPolicy::default()
        },
    )
    .await;
    assert_eq!(manager.servers(), ["good"]);
    let failures = manager.failures();
    assert_eq!(
        failures.iter().map(|f| f.server.as_str()).collect::<Vec<_>>(),
        ["broken", "crashes", "off"]
    );
    assert!(
        failures[0].reason.contains("/nonexistent/mcp-server") && !failures[0].disabled,
        "{failures:?}"
    );
    assert!(
        failures[1].reason.contains("no-such-config"),
        "stderr is quoted: {failures:?}"
    );
    assert!(failures[2].disabled);
    assert!(manager.tools().iter().all(|t| t.spec().name.starts_with("mcp__good__")));
    manager.shutdown().await;
}

#[tokio::test]
async fn server_names_that_collide_after_sanitising_are_refused_loudly() {
    let manager = start(
        &format!(
            "{{\"mcpServers\": {{{}, {}}}}}",
            everything_server("a.b", ""),
            everything_server("a_b", "")
        ),
        RestartPolicy::default(),
    )
    .await;
    assert_eq!(manager.servers(), ["a.b"], "the first (in name order) keeps its tools");
    let failure = &manager.failures()[0];
    assert_eq!(failure.server, "a_b");
    assert!(
        failure.reason.contains("`a.b`") && failure.reason.contains("rename"),
        "{failure:?}"
    );
    assert!(manager.tools().iter().all(|t| t.spec().name.starts_with("mcp__a_b__")));
    assert_eq!(
        manager.tools().len(),
        manager.mcp_tools().iter().filter(|t| t.server() == "a.b").count(),
        "no tool of the refused server"
    );
    manager.shutdown().await;
}

/// A number sent as a string (`{"a": "2"}`, common from small models) passes the argument
/// check, reaches server-everything's `get-sum` as a number, and the result says it was
/// converted; a string that is no number is still refused before the server sees it.
#[tokio::test]
async fn numbers_sent_as_strings_are_converted_and_noted() {
    let manager = start(
        &format!("{{\"mcpServers\": {{{}}}}}", everything_server("e", "")),
        RestartPolicy::default(),
    )
    .await;
    let toolkit = harness_core::Toolkit::new(vec![crate::servers::find(&manager, "mcp__e__get-sum")]).unwrap();
    let run = |input: serde_json::Value| {
        let toolkit = &toolkit;
        async move {
            let tool = toolkit.prepare("mcp__e__get-sum", &input)?;
            tool.call(input, &crate::servers::tool_ctx()).await
        }
    };
    let output = run(json!({"a": "2", "b": 3.5})).await.unwrap();
    let text = output.text_content();
    assert!(!output.is_error, "{text}");
    assert!(text.contains("5.5"), "the server added numbers: {text}");
    assert!(
        text.contains("`a` was sent as the string \"2\" and passed as the number 2"),
        "{text}"
    );
    // Nothing to convert: no note.
    let plain = run(json!({"a": 1, "b": 2})).await.unwrap().text_content();
    assert!(plain.contains('3') && !plain.contains("note:"), "{plain}");
    let err = run(json!({"a": "two", "b": 3})).await.unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { message, .. } if message.contains("\"two\" is not one")),
        "{err}"
    );
    manager.shutdown().await;
}
