//! `harness doctor`: one line per check with ok / warn / fail and the fix, the exit status of
//! the worst, and no model call without `--online`.

use super::cli::{harness, script, text};

fn doctor(ws: &std::path::Path, extra: &[&str]) -> (i32, String) {
    let output = harness()
        .args(["doctor", "--workspace"])
        .arg(ws)
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(stderr.is_empty(), "{stderr}");
    (output.status.code().unwrap(), stdout)
}

#[test]
fn a_fit_workspace_is_all_ok_and_no_model_is_called() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // A script with no replies: any model call would fail the run.
    let model = script(dir.path(), r#"{"replies": []}"#);
    std::fs::write(
        ws.join("harness.toml"),
        format!("[agent]\nmodel = \"{model}\"\n[state]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n"),
    )
    .unwrap();
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 0, "{out}");
    for line in [
        "ok    workspace:",
        "ok    harness.toml: parsed",
        "ok    state: Redis at 127.0.0.1:6379 answers",
    ] {
        assert!(out.contains(line), "{line} in\n{out}");
    }
    assert!(out.contains("ok    model: scripted:"), "{out}");
    assert!(out.contains("ok    mcp: no MCP servers configured"), "{out}");
    assert!(out.contains("ok    sandbox: no sandbox configured"), "{out}");
    assert!(out.contains("ok    telemetry: export off"), "{out}");
    assert!(out.contains("ok    disk: "), "{out}");
    assert!(!out.contains("model call"), "{out}");
    // --online makes the call: the empty script fails it.
    let (code, out) = doctor(&ws, &["--online"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("fail  model call:"), "{out}");
}

#[test]
fn failures_name_the_fix_and_set_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // Port 9 (discard) on loopback: nothing listens there.
    std::fs::write(
        ws.join("harness.toml"),
        "[state]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:9\"\n",
    )
    .unwrap();
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("fail  state: cannot connect to 127.0.0.1:9"), "{out}");
    assert!(out.contains("fix: start the service, or correct [state] url"), "{out}");
    assert!(out.contains("fail  agent:"), "{out}");

    std::fs::write(ws.join("harness.toml"), "[memory]\nenabled = false\n").unwrap();
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("fail  model: no model configured"), "{out}");
    assert!(out.contains("fix: pass --model provider:model"), "{out}");

    std::fs::write(ws.join("harness.toml"), "[agent]\nmodle = \"x\"\n").unwrap();
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("fail  harness.toml:") && out.contains("modle"), "{out}");

    let (code, out) = doctor(&dir.path().join("missing"), &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("fail  workspace:") && out.contains("harness init"),
        "{out}"
    );
}
