//! `harness doctor`: one line per check with ok / warn / fail and the fix, the exit status of
//! the worst, and no model call without `--online`.

use super::cli::{harness, script, text};

fn doctor(ws: &std::path::Path, extra: &[&str]) -> (i32, String) {
    let (code, stdout, stderr) = doctor_logged(ws, extra);
    assert!(stderr.is_empty(), "{stderr}");
    (code, stdout)
}

/// [`doctor`], also returning stderr (where a failing MCP server's start is logged).
fn doctor_logged(ws: &std::path::Path, extra: &[&str]) -> (i32, String, String) {
    let output = harness()
        .args(["doctor", "--workspace"])
        .arg(ws)
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    (output.status.code().unwrap(), stdout, stderr)
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
    assert!(
        !out.contains("state schema"),
        "no schema probe of an unreachable store: {out}"
    );

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

/// A workspace under `dir` whose harness.toml is a scripted model (never called) plus
/// `extra`.
fn configured(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let model = script(dir, r#"{"replies": []}"#);
    std::fs::write(
        ws.join("harness.toml"),
        format!("[agent]\nmodel = \"{model}\"\n[memory]\nenabled = false\n{extra}"),
    )
    .unwrap();
    ws
}

/// The `state schema` line on PostgreSQL: read without migrating (doctor creates no table),
/// ok when nothing exists yet or the version is this binary's, warn (with the command that
/// migrates) when older, fail when newer; the exit status follows the worst line.
#[cfg(feature = "postgres")]
#[test]
fn the_state_schema_line_reads_the_postgres_version_without_migrating() {
    let tables = harness_test_support::services::PgPrefix::new("doctor");
    let dir = tempfile::tempdir().unwrap();
    let ws = configured(
        dir.path(),
        &format!(
            "[state]\nkind = \"postgres\"\nurl = \"{}\"\nkey_prefix = \"{}\"\n",
            tables.url(),
            tables.prefix()
        ),
    );
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok    state schema: nothing created under this prefix yet (the first run creates version 2)"),
        "{out}"
    );
    assert!(tables.relations().is_empty(), "doctor created {:?}", tables.relations());

    let version = |v: i32| {
        tables.restore(
            &format!(
                "CREATE TABLE IF NOT EXISTS old_schema_version (version integer NOT NULL); \
                 DELETE FROM old_schema_version; INSERT INTO old_schema_version VALUES ({v});"
            ),
            "old_",
        )
    };
    version(1);
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("warn  state schema: version 1, older than this binary's 2\n      fix: back it up, then run `harness maintenance --dry-run`"),
        "{out}"
    );
    assert_eq!(
        tables.relations(),
        vec![format!("{}schema_version", tables.prefix())],
        "doctor migrated"
    );
    version(2);
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok    state schema: version 2 (current)"), "{out}");
    version(99);
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("fail  state schema: version 99, newer than this binary's 2\n      fix: run the Harness version that wrote it"),
        "{out}"
    );
}

/// The same on Redis: the marker `<prefix>schema` is read, never written by doctor.
#[test]
fn the_state_schema_line_reads_the_redis_marker_without_writing_it() {
    let keys = harness_test_support::services::RedisPrefix::new("doctor");
    let dir = tempfile::tempdir().unwrap();
    let ws = configured(
        dir.path(),
        &format!(
            "[state]\nkind = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}state:\"\n",
            keys.url(),
            keys.prefix()
        ),
    );
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok    state schema: nothing created under this prefix yet (the first run creates version 1)"),
        "{out}"
    );
    assert!(keys.keys().is_empty(), "doctor wrote {:?}", keys.keys());
    let marker = |value: &str| {
        keys.restore(&serde_json::json!({
            "prefix": "old:",
            "keys": [{"key": "old:state:schema", "type": "string", "value": value}]
        }))
    };
    marker("1");
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok    state schema: version 1 (current)"), "{out}");
    marker("7");
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("fail  state schema: version 7, newer than this binary's 1"),
        "{out}"
    );
    // Opening the store (here for a maintenance dry run) writes the marker this binary knows.
    keys.purge();
    let output = harness()
        .args(["maintenance", "--dry-run", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let (code, out) = doctor(&ws, &[]);
    assert!(out.contains("ok    state schema: version 1 (current)"), "{code} {out}");
    keys.purge();
}

/// One line per MCP server: one that starts lists its tools (ok, with the count), one that
/// fails is named with what its stderr said and the fix, a disabled one says so; the exit
/// status is the failure's.
#[test]
fn each_mcp_server_gets_a_line_with_its_tools_or_its_stderr() {
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
    let ws = configured(dir.path(), "");
    std::fs::write(
        ws.join("tools.json"),
        format!(
            r#"{{"mcpServers": {{
                "e": {{"transport": "stdio", "command": "node", "args": [{js:?}, "stdio"]}},
                "broken": {{"transport": "stdio", "command": "sh", "args": ["-c", "echo 'cannot open /srv/db: permission denied' >&2; exit 3"]}},
                "off": {{"transport": "stdio", "command": "/nonexistent", "enabled": false}}
            }}}}"#
        ),
    )
    .unwrap();
    let (code, out, _) = doctor_logged(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    let started = out
        .lines()
        .find_map(|line| line.strip_prefix("ok    mcp e: started, listed "))
        .unwrap_or_else(|| panic!("no line for e:\n{out}"));
    let count: usize = started.split_whitespace().next().unwrap().parse().unwrap();
    assert!(count > 0, "{out}");
    let failed = out
        .lines()
        .find(|line| line.starts_with("fail  mcp broken: "))
        .unwrap_or_else(|| panic!("no line for broken:\n{out}"));
    assert!(failed.contains("cannot open /srv/db: permission denied"), "{out}");
    assert!(
        out.contains("      fix: correct the server's command, args, env or url in tools.json / .mcp.json"),
        "{out}"
    );
    assert!(out.contains("ok    mcp off: skipped (\"enabled\": false)"), "{out}");
}

/// The `harness sandbox check` result as a line: ok with what the host proves, fail with
/// the fix when the tier cannot run (here: no bubblewrap where [sandbox] bwrap points).
#[test]
fn the_sandbox_line_is_the_sandbox_checks_result() {
    use std::os::unix::fs::PermissionsExt;
    // Under /var/tmp and traversable, as the sandbox tests' scratch directories.
    let dir = tempfile::Builder::new()
        .prefix("hcli-sbx-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let sandbox = "[sandbox]\nkind = \"namespace\"\nuid_range = [231200, 231399]\nstate_dir = \"/var/tmp/harness-sandbox-test-state\"\n";
    let ws = configured(dir.path(), sandbox);
    let (code, out) = doctor(&ws, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok    sandbox: namespace tier runs here (bubblewrap "),
        "{out}"
    );

    let ws = configured(dir.path(), &format!("{sandbox}bwrap = \"/nonexistent/bwrap\"\n"));
    let (code, out, _) = doctor_logged(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("fail  sandbox: the configured tier cannot run on this host:")
            && out.contains("/nonexistent/bwrap"),
        "{out}"
    );
    assert!(out.contains("      fix: run `harness sandbox check`"), "{out}");
}
