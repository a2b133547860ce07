//! `harness tools`: the tool list after tools.json, failed servers, configuration errors.

use std::process::{Command, Output};

fn harness_tools(workspace: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .env_remove("HARNESS_WORKSPACE")
        .env_remove("HARNESS_TEST_UNSET_VAR")
        .args(["tools", "--workspace"])
        .arg(workspace)
        .output()
        .unwrap()
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn lists_builtins_after_deny_and_says_why_a_server_failed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tools.json"),
        r#"{
          // a comment
          "deny": ["write_file"],
          "mcpServers": {
            "broken": {"transport": "stdio", "command": "/nonexistent/mcp-server"},
            "off": {"transport": "stdio", "command": "/nonexistent", "enabled": false}
          }
        }"#,
    )
    .unwrap();
    let output = harness_tools(dir.path());
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("read_file") && l.contains("built-in")),
        "{stdout}"
    );
    assert!(!stdout.contains("write_file"), "{stdout}");
    assert!(stdout.contains("load_skill_through_path"), "{stdout}");
    // The built-in on-demand groups are shown as such.
    for (tool, group) in [("session_search", "sessions"), ("task_output", "tasks")] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(tool) && l.contains(&format!("on demand ({group})"))),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("server broken: FAILED: cannot start `/nonexistent/mcp-server`"),
        "{stdout}"
    );
    assert!(stdout.contains("server off: skipped"), "{stdout}");
}

#[test]
fn a_missing_variable_exits_2_naming_it_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tools.json"),
        r#"{"mcpServers": {"x": {"transport": "streamableHttp", "url": "${HARNESS_TEST_UNSET_VAR}"}}}"#,
    )
    .unwrap();
    let output = harness_tools(dir.path());
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("HARNESS_TEST_UNSET_VAR") && stderr.contains("tools.json"),
        "{stderr}"
    );
}

#[test]
fn sse_exits_2_pointing_to_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tools.json"),
        r#"{"mcpServers": {"old": {"transport": "sse", "url": "http://127.0.0.1:9/sse"}}}"#,
    )
    .unwrap();
    let output = harness_tools(dir.path());
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`old`") && stderr.contains("streamableHttp"),
        "{stderr}"
    );
}

#[test]
fn a_malformed_file_exits_2_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tools.json"), "{\n  \"allow\": [\n  \"deny\": 1}\n").unwrap();
    let output = harness_tools(dir.path());
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tools.json: line 3"), "{stderr}");
}

/// `harness run` connects tools.json's servers, calls one, and leaves no server behind.
#[test]
fn run_calls_an_mcp_tool_and_leaves_no_server_behind() {
    let mcp = std::env::var("HARNESS_TEST_MCP_DIR").unwrap_or_else(|_| {
        panic!(
            "HARNESS_TEST_MCP_DIR is not set: run `bash scripts/mcp-servers.sh` and export it (scripts/test.sh does)"
        )
    });
    let js = format!("{mcp}/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        std::path::Path::new(&js).is_file(),
        "{js} missing: run scripts/mcp-servers.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    // A marker argument the server ignores, so its process can be found afterwards.
    let marker = format!("marker-{}", std::process::id());
    std::fs::write(
        dir.path().join("tools.json"),
        // The operator trusts the server's annotations: its read-only `echo` runs without asking.
        format!(r#"{{"mcpServers": {{"e": {{"transport": "stdio", "command": "node", "args": [{js:?}, "stdio", {marker:?}], "trust_annotations": true}}}}}}"#),
    )
    .unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"replies": [{"tool_calls": [{"id": "c1", "name": "mcp__e__echo", "arguments": {"message": "via mcp"}}]},
                        {"text": "done"}]}"#,
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .env_remove("HARNESS_WORKSPACE")
        .args([
            "run",
            "--json",
            "--model",
            &format!("scripted:{}", script.display()),
            "--workspace",
        ])
        .arg(dir.path())
        .arg("echo something")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Echo: via mcp"), "{stdout}");
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(&marker))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// `harness tools --user alice` shows the workspace's set narrowed by `alice/tools.json`;
/// bob (no file of his own) gets the workspace's set; `mcpServers` in a user file is an
/// error naming the key and the file.
#[test]
fn a_users_tools_json_narrows_only_that_users_list() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tools.json"), r#"{"deny": ["write_file"]}"#).unwrap();
    std::fs::create_dir_all(dir.path().join("alice")).unwrap();
    std::fs::write(
        dir.path().join("alice/tools.json"),
        r#"{ "allow": ["read_file", "write_file", "grep_files"], "deny": ["grep_files"] }"#,
    )
    .unwrap();
    let list = |user: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
        command
            .env_remove("HARNESS_WORKSPACE")
            .args(["tools", "--workspace"])
            .arg(dir.path());
        if let Some(user) = user {
            command.args(["--user", user]);
        }
        command.output().unwrap()
    };
    let names = |output: &Output| -> Vec<String> {
        let (stdout, stderr) = text(output);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        stdout
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    };
    let alice = names(&list(Some("alice")));
    assert_eq!(alice, ["read_file"], "allow ∩ root, deny ∪ root");
    let bob = names(&list(Some("bob")));
    let all = names(&list(None));
    assert_eq!(bob, all);
    assert!(bob.len() > 3 && bob.iter().any(|name| name == "grep_files"), "{bob:?}");
    assert!(!bob.iter().any(|name| name == "write_file"), "{bob:?}");

    std::fs::write(
        dir.path().join("alice/tools.json"),
        r#"{"mcpServers": {"x": {"transport": "stdio", "command": "x"}}}"#,
    )
    .unwrap();
    let output = list(Some("alice"));
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("alice/tools.json") && stderr.contains("`mcpServers` is not allowed"),
        "{stderr}"
    );
}

/// Skills are listed for people, a `disable-model-invocation` one marked so, and a
/// `SKILL.md` that does not load is named with its reason.
#[test]
fn lists_skills_for_people_and_the_skipped_ones() {
    let dir = tempfile::tempdir().unwrap();
    for (folder, text) in [
        ("pdf", "---\nname: pdf\ndescription: Use for PDFs\n---\nSteps.\n"),
        (
            "team/commit-all",
            "---\nname: commit-all\ndescription: Commit and push\ndisable-model-invocation: true\n---\nRun git.\n",
        ),
        ("broken", "no front matter here\n"),
    ] {
        let skill = dir.path().join("skills").join(folder);
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(skill.join("SKILL.md"), text).unwrap();
    }
    let output = harness_tools(dir.path());
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let line = |prefix: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix}: {stdout}"))
            .to_owned()
    };
    assert!(!line("skill pdf ").contains("for people only"), "{stdout}");
    assert!(line("skill commit-all ").contains("for people only"), "{stdout}");
    assert!(
        line("skill file skills/broken/SKILL.md").contains("skipped: no YAML front matter"),
        "{stdout}"
    );
}
