//! `harness run --json` prints the protocol's events (README "Events"), one JSON object per
//! line; the snapshot keeps the format. Ids and timestamps are replaced before the snapshot.

use super::cli::{harness, script, text};

#[test]
fn run_json_prints_the_protocol_events_of_a_turn_with_a_tool_call() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), "[memory]\nenabled = false\n").unwrap();
    // The default user's own layer (`default/`), where the file tools look.
    std::fs::create_dir_all(ws.join("default")).unwrap();
    std::fs::write(ws.join("default/notes.txt"), "the meeting moved to Tuesday\n").unwrap();
    let model = script(
        dir.path(),
        r#"{"replies": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}, "id": "call_1"}]},
            {"text": "The meeting is on Tuesday."}]}"#,
    );
    let output = harness()
        .args(["run", "--json", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("when is the meeting?")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect();
    // Every line is a protocol event.
    for line in &lines {
        let read: harness_protocol::WireEvent = serde_json::from_value(line.clone()).unwrap();
        assert_eq!(read.name(), line["type"]);
    }
    insta::assert_json_snapshot!("run_json_tool_turn", lines, {
        "[].message.id" => "[msg id]",
        "[].message.created_at" => "[timestamp]",
    });
}
