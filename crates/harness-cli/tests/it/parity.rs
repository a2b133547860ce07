//! `HarnessAgent::from_workspace` gives the same agent as the CLI for every harness.toml
//! section: the requests both send to an OpenAI-compatible server (model, tools, system
//! prompt, messages) are compared, section by section.

use crate::cli::openai_server;
use crate::cli::{harness, text};
use harness_core::RuntimeContext;
use serde_json::Value;
use std::path::Path;

const SECTIONS: &[(&str, &str)] = &[
    (
        "agent",
        "[agent]\nname = \"parity\"\nsys_prompt = \"You are P.\"\nmax_iters = 2\nmax_context_tokens = 500\n\
         additional_context_files = [\"docs/api.md\"]\nisolation = \"session\"\n",
    ),
    ("filesystem", "[filesystem]\nkind = \"local_shell\"\n"),
    ("memory", "[memory]\nmodel = \"openai:memory-model\"\n"),
    ("memory-off", "[memory]\nenabled = false\n"),
    (
        "compaction",
        "[compaction]\ntrigger_messages = 4\nkeep_messages = 2\nmodel = \"openai:summary-model\"\n",
    ),
    ("tool_result_eviction", "[tool_result_eviction]\nenabled = false\n"),
    (
        "model",
        "[model]\nmax_retries = 0\nidle_timeout = \"5s\"\ncontext_window = 64000\n",
    ),
];

fn workspace(root: &Path, name: &str, section: &str) -> std::path::PathBuf {
    let ws = root.join(name);
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(ws.join("AGENTS.md"), "You are Parity, a test persona.").unwrap();
    std::fs::write(ws.join("docs/api.md"), "The API has one endpoint.").unwrap();
    // `[agent] model` names the main model in every case (the agent section adds its keys).
    let config = if section.starts_with("[agent]") {
        section.replacen("[agent]\n", "[agent]\nmodel = \"openai:parity-model\"\n", 1)
    } else {
        format!("[agent]\nmodel = \"openai:parity-model\"\n{section}")
    };
    std::fs::write(ws.join("harness.toml"), config).unwrap();
    ws
}

/// The requests, with the workspace path replaced, as (model, the rest) pairs; the agent's
/// turns (requests offering tools) in full, background requests by model only.
fn normalise(requests: Vec<Value>, ws: &Path) -> (Vec<Value>, Vec<String>) {
    let mut turns = Vec::new();
    let mut background = Vec::new();
    for request in requests {
        let text = request.to_string().replace(&ws.display().to_string(), "<ws>");
        let request: Value = serde_json::from_str(&text).unwrap();
        if request["tools"].as_array().is_some_and(|tools| !tools.is_empty()) {
            turns.push(request);
        } else {
            background.push(request["model"].as_str().unwrap_or_default().to_owned());
        }
    }
    background.sort();
    (turns, background)
}

#[test]
fn the_library_builder_and_the_cli_send_the_same_requests_for_every_section() {
    let (base, seen, _server) = openai_server::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let env_base = base.clone();
    let env = move |key: &str| match key {
        "OPENAI_BASE_URL" => Some(env_base.clone()),
        "OPENAI_API_KEY" => Some("sk-test".to_owned()),
        _ => None,
    };
    for (name, section) in SECTIONS {
        let dir = tempfile::tempdir().unwrap();
        let cli_ws = workspace(dir.path(), "cli", section);
        let lib_ws = workspace(dir.path(), "lib", section);

        seen.lock().unwrap().clear();
        let output = harness()
            .env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "sk-test")
            .args(["run", "--user", "u", "--session", "p", "--workspace"])
            .arg(&cli_ws)
            .arg("hi")
            .output()
            .unwrap();
        assert!(output.status.success(), "{name}: {:?}", text(&output));
        let from_cli = std::mem::take(&mut *seen.lock().unwrap());

        runtime.block_on(async {
            let agent = harness::HarnessAgent::from_workspace(&lib_ws, &env)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .build()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let reply = agent
                .call(
                    "hi",
                    RuntimeContext::for_user(harness_core::UserId::from_static("u"))
                        .with_session(harness_core::SessionId::from_static("p")),
                )
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(reply.text(), "hello from fake");
            agent.shutdown(std::time::Duration::from_secs(30)).await;
        });
        let from_library = std::mem::take(&mut *seen.lock().unwrap());

        let (cli_turns, cli_background) = normalise(from_cli, &cli_ws);
        let (lib_turns, lib_background) = normalise(from_library, &lib_ws);
        assert_eq!(cli_turns.len(), 1, "{name}");
        assert_eq!(cli_turns, lib_turns, "{name}: the agent's requests differ");
        assert_eq!(cli_background, lib_background, "{name}: background models differ");
        // The section had an effect where one can be seen in a request.
        let turn = &cli_turns[0];
        let tools: Vec<&str> = turn["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        match *name {
            "agent" => {
                let system = turn["messages"][0]["content"].to_string();
                assert!(
                    system.contains("You are P.") && system.contains("one endpoint"),
                    "{system}"
                );
            }
            "filesystem" => assert!(tools.contains(&"execute"), "{tools:?}"),
            "memory-off" => assert!(!tools.contains(&"memory_search"), "{tools:?}"),
            "memory" => assert!(cli_background.iter().any(|m| m == "memory-model"), "{cli_background:?}"),
            _ => {}
        }
        assert_eq!(turn["model"], "parity-model", "{name}");
    }
}
