//! The built-in file and shell tools, driven through a toolkit with a `ToolContext` whose
//! runtime context holds a `CallWorkspace`, as the harness binds it per call.

use harness::tools::{file_tools, shell_tool};
use harness_core::{EventSink, RuntimeContext, ToolContext, ToolError, ToolOutput, Toolkit};
use harness_fs::{
    CallScope, CallShell, CallWorkspace, Filesystem, IsolationScope, KvFs, LocalFs, LocalShell, LocalShellConfig,
    WriteMode, WsPath,
};
use harness_store::InMemoryKv;
use serde_json::{Value, json};
use std::sync::Arc;

struct Env {
    _dir: tempfile::TempDir,
    root: Arc<dyn Filesystem>,
    toolkit: Toolkit,
    ctx: ToolContext,
}

fn context(runtime: RuntimeContext) -> ToolContext {
    ToolContext {
        runtime,
        call_id: "call-1".to_owned(),
        events: EventSink::disabled(),
        session: harness_core::SessionState::default(),
    }
}

/// A local workspace with a shell, the caller `alice` namespaced by user.
fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root: Arc<dyn Filesystem> = Arc::new(
        LocalFs::new(dir.path())
            .unwrap()
            .with_shell(LocalShellConfig::default()),
    );
    let mut runtime = RuntimeContext::for_user(harness_core::UserId::from_static("alice"));
    let scope = CallScope::new(
        IsolationScope::User,
        harness_core::AgentId::from_static("main"),
        harness_core::UserId::from_static("alice"),
        harness_core::DEFAULT_SESSION_ID,
    )
    .unwrap();
    runtime.insert(CallWorkspace::new(&root, &scope, None));
    runtime.insert(scope);
    let mut tools = file_tools();
    tools.push(shell_tool());
    Env {
        _dir: dir,
        root,
        toolkit: Toolkit::new(tools).unwrap(),
        ctx: context(runtime),
    }
}

impl Env {
    /// Validates like the agent does, then calls.
    async fn call(&self, name: &str, input: Value) -> Result<ToolOutput, ToolError> {
        let tool = self.toolkit.prepare(name, &input)?;
        tool.call(input, &self.ctx).await
    }

    async fn ok(&self, name: &str, input: Value) -> String {
        match self.call(name, input.clone()).await {
            Ok(output) => output.text_content(),
            Err(err) => panic!("{name} {input}: {err}"),
        }
    }

    async fn err(&self, name: &str, input: Value) -> String {
        match self.call(name, input.clone()).await {
            Ok(output) => panic!("{name} {input} should fail, got {}", output.text_content()),
            Err(err) => err.to_string(),
        }
    }

    async fn put(&self, path: &str, content: &str) {
        self.root
            .write(&WsPath::parse(path).unwrap(), content.as_bytes(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
}

#[test]
fn names_and_parameters_match_the_reference_catalogue() {
    let env = env();
    assert_eq!(
        env.toolkit.names(),
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_files",
            "glob_files",
            "grep_files",
            "execute"
        ]
    );
    let required = |name: &str| -> Vec<String> {
        let spec = env
            .toolkit
            .specs()
            .iter()
            .find(|spec| spec.name == name)
            .unwrap()
            .clone();
        let mut required: Vec<String> = spec.input_schema["required"]
            .as_array()
            .map(|names| names.iter().map(|name| name.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        required.sort();
        required
    };
    assert_eq!(required("read_file"), ["path"]);
    assert_eq!(required("write_file"), ["content", "path"]);
    assert_eq!(required("edit_file"), ["new_string", "old_string", "path"]);
    assert_eq!(required("list_files"), ["path"]);
    assert_eq!(required("glob_files"), ["pattern"]);
    assert_eq!(required("grep_files"), ["pattern"]);
    assert_eq!(required("execute"), ["command"]);
    let execute = env
        .toolkit
        .specs()
        .iter()
        .find(|spec| spec.name == "execute")
        .unwrap()
        .clone();
    for param in ["working_directory", "timeout"] {
        assert!(execute.input_schema["properties"].get(param).is_some(), "{param}");
    }
}

#[tokio::test]
async fn read_file_numbers_lines_and_pages() {
    let env = env();
    let text: String = (1..=2500).map(|i| format!("line {i}\n")).collect();
    env.put("alice/big.txt", &text).await;
    let first = env.ok("read_file", json!({"path": "big.txt"})).await;
    assert!(
        first.starts_with("     1\tline 1\n     2\tline 2\n"),
        "{}",
        &first[..40]
    );
    assert!(first.contains("  2000\tline 2000\n"));
    assert!(!first.contains("line 2001"));
    assert!(first.ends_with("[showing lines 1-2000 of 2500; call read_file with offset=2000 to continue]"));
    let page = env
        .ok("read_file", json!({"path": "big.txt", "offset": 2498, "limit": 10}))
        .await;
    assert_eq!(page, "  2499\tline 2499\n  2500\tline 2500");
    let err = env.err("read_file", json!({"path": "big.txt", "offset": 9000})).await;
    assert!(err.contains("past the end of big.txt (2500 lines)"), "{err}");
    // Long lines are cut with a marker; the result stays bounded.
    env.put("alice/wide.txt", &"x".repeat(100_000)).await;
    let wide = env.ok("read_file", json!({"path": "wide.txt"})).await;
    assert!(
        wide.len() < 3000 && wide.contains("[98000 more characters]"),
        "{}",
        wide.len()
    );
    env.put("alice/empty.txt", "").await;
    assert_eq!(
        env.ok("read_file", json!({"path": "empty.txt"})).await,
        "empty.txt is empty"
    );
}

#[tokio::test]
async fn read_file_errors_are_clear() {
    let env = env();
    env.put("alice/dir/x.txt", "x").await;
    env.root
        .write(
            &WsPath::parse("alice/blob.bin").unwrap(),
            b"\x00\x01\x02",
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    assert_eq!(
        env.err("read_file", json!({"path": "nope.txt"})).await,
        "nope.txt: not found"
    );
    assert_eq!(
        env.err("read_file", json!({"path": "dir"})).await,
        "dir: is a directory"
    );
    assert!(
        env.err("read_file", json!({"path": "blob.bin"}))
            .await
            .contains("binary file")
    );
    assert!(
        env.err("read_file", json!({"path": "../bob/x"}))
            .await
            .contains("'..' is not allowed")
    );
    assert!(env.err("read_file", json!({"path": "a\u{0}b"})).await.contains("NUL"));
    assert!(
        env.err("read_file", json!({"path": 7}))
            .await
            .contains("invalid arguments")
    );
}

#[tokio::test]
async fn write_file_creates_and_overwrites_only_when_asked() {
    let env = env();
    assert_eq!(
        env.ok("write_file", json!({"path": "notes/a.md", "content": "hello"}))
            .await,
        "Written to notes/a.md (5 bytes)"
    );
    let err = env
        .err("write_file", json!({"path": "notes/a.md", "content": "again"}))
        .await;
    assert!(
        err.contains("already exists") && err.contains("overwrite=true"),
        "{err}"
    );
    env.ok(
        "write_file",
        json!({"path": "notes/a.md", "content": "replaced", "overwrite": true}),
    )
    .await;
    let stored = env
        .root
        .read(&WsPath::parse("alice/notes/a.md").unwrap())
        .await
        .unwrap();
    assert_eq!(stored, b"replaced");
}

#[tokio::test]
async fn edit_file_replaces_reports_ambiguity_and_fuzzy_matches() {
    let env = env();
    env.put("alice/app.py", "def f():\n    return 1\n\ndef g():\n    return 1\n")
        .await;
    let err = env
        .err(
            "edit_file",
            json!({"path": "app.py", "old_string": "return 1", "new_string": "return 2"}),
        )
        .await;
    assert!(err.contains("occurs 2 times (at lines [2, 5])"), "{err}");
    let done = env
        .ok(
            "edit_file",
            json!({"path": "app.py", "old_string": "return 1", "new_string": "return 2", "replace_all": true}),
        )
        .await;
    assert_eq!(done, "Edited app.py (2 replacements, first at line 2)");
    let fuzzy = env
        .ok(
            "edit_file",
            json!({"path": "app.py", "old_string": "def g():\n  return 2", "new_string": "def g():\n  return 3"}),
        )
        .await;
    assert!(fuzzy.contains("Note: old_string did not match exactly"), "{fuzzy}");
    let text = env.root.read(&WsPath::parse("alice/app.py").unwrap()).await.unwrap();
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "def f():\n    return 2\n\ndef g():\n    return 3\n"
    );
    let missing = env
        .err(
            "edit_file",
            json!({"path": "app.py", "old_string": "nothing", "new_string": "x"}),
        )
        .await;
    assert!(missing.contains("old_string not found"), "{missing}");
}

#[tokio::test]
async fn list_glob_and_grep_format_like_the_reference() {
    let env = env();
    env.put("alice/README.md", "# Title\nsee a.b(c)\n").await;
    env.put("alice/docs/guide.md", "step one\nstep two\nstep three\n").await;
    env.put("alice/src/main.rs", "fn main() {}\n").await;
    assert_eq!(
        env.ok("list_files", json!({"path": "/"})).await,
        "[FILE] README.md (19 bytes)\n[DIR]  docs/\n[DIR]  src/"
    );
    assert_eq!(
        env.ok("list_files", json!({"path": "nope"})).await,
        "Directory not found: nope"
    );
    assert_eq!(
        env.ok("glob_files", json!({"pattern": "*.md"})).await,
        "README.md (19 bytes)\ndocs/guide.md (29 bytes)"
    );
    assert_eq!(
        env.ok("glob_files", json!({"pattern": "*.py"})).await,
        "No matching files found"
    );
    // Literal by default: `a.b(` is not a regex.
    assert_eq!(
        env.ok("grep_files", json!({"pattern": "a.b("})).await,
        "README.md:2:see a.b(c)"
    );
    assert_eq!(
        env.ok(
            "grep_files",
            json!({"pattern": "^step t", "regex": true, "glob": "*.md"})
        )
        .await,
        "docs/guide.md:2:step two\ndocs/guide.md:3:step three"
    );
    assert_eq!(
        env.ok("grep_files", json!({"pattern": "two", "context": 1, "path": "docs"}))
            .await,
        "docs/guide.md-1-step one\ndocs/guide.md:2:step two\ndocs/guide.md-3-step three"
    );
    assert_eq!(
        env.ok("grep_files", json!({"pattern": "zzz"})).await,
        "No matches found"
    );
    let capped = env.ok("grep_files", json!({"pattern": "step", "max_results": 2})).await;
    assert!(capped.ends_with("[results capped at 2 matches; narrow the pattern, path or glob to see the rest]"));
    assert!(
        env.err("grep_files", json!({"pattern": "(", "regex": true}))
            .await
            .contains("invalid regular expression")
    );
}

#[tokio::test]
async fn tools_stay_inside_the_callers_namespace() {
    let env = env();
    env.put("bob/secret.txt", "bob's secret").await;
    for path in [
        "/bob/secret.txt",
        "bob/secret.txt",
        "../bob/secret.txt",
        "/../bob/secret.txt",
    ] {
        let err = env.err("read_file", json!({ "path": path })).await;
        assert!(!err.contains("bob's secret"), "{path}: {err}");
    }
    env.ok("write_file", json!({"path": "/bob/secret.txt", "content": "alice"}))
        .await;
    let bob = env.root.read(&WsPath::parse("bob/secret.txt").unwrap()).await.unwrap();
    assert_eq!(bob, b"bob's secret");
    assert_eq!(
        env.ok("grep_files", json!({"pattern": "secret"})).await,
        "No matches found"
    );
    // The shell starts in alice's directory and refuses to leave it as a working directory.
    env.put("alice/mine.txt", "mine").await;
    let output = env.ok("execute", json!({"command": "cat mine.txt"})).await;
    assert_eq!(output, "Exit code: 0\n\nmine");
    let err = env
        .err("execute", json!({"command": "ls", "working_directory": "../bob"}))
        .await;
    assert!(err.contains("working_directory must be a relative path"), "{err}");
}

#[tokio::test]
async fn execute_reports_exit_codes_stderr_and_timeouts() {
    let env = env();
    let output = env
        .ok("execute", json!({"command": "echo hi; echo oops >&2; exit 2"}))
        .await;
    assert_eq!(output, "Exit code: 2\n\nhi\n\n\n[stderr]\noops\n");
    assert_eq!(
        env.ok("execute", json!({"command": "true"})).await,
        "Exit code: 0\n\n<no output>"
    );
    let timed_out = env.ok("execute", json!({"command": "sleep 30", "timeout": 1})).await;
    assert!(
        timed_out.starts_with("Exit code: 124 (timed out after 1s"),
        "{timed_out}"
    );
    let flood = env.ok("execute", json!({"command": "yes | head -c 3000000"})).await;
    assert!(flood.len() < 70_000, "{}", flood.len());
    assert!(flood.contains("omitted") && flood.contains("(output was truncated"));
    env.root.mkdir(&WsPath::parse("alice/sub").unwrap()).await.unwrap();
    let pwd = env
        .ok(
            "execute",
            json!({"command": "basename $(pwd)", "working_directory": "sub"}),
        )
        .await;
    assert_eq!(pwd, "Exit code: 0\n\nsub\n");
    let missing = env
        .err("execute", json!({"command": "ls", "working_directory": "nope"}))
        .await;
    assert!(missing.contains("not found"), "{missing}");
}

#[tokio::test]
async fn execute_needs_a_shell() {
    // A KV workspace has no shell: the tool explains instead of running on the host.
    let kv: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), WsPath::root()));
    let mut runtime = RuntimeContext::for_user(harness_core::UserId::from_static("alice"));
    runtime.insert(CallWorkspace {
        user: Arc::clone(&kv),
        layered: Arc::clone(&kv),
        unfenced: Arc::clone(&kv),
        shared: kv,
    });
    let ctx = context(runtime);
    let tool = shell_tool();
    let err = tool.call(json!({"command": "echo hi"}), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("no shell is available"), "{err}");
    // A call-scoped shell (e.g. a sandbox's) is used when bound.
    let dir = tempfile::tempdir().unwrap();
    let mut runtime = ctx.runtime.clone();
    runtime.insert(CallShell(Arc::new(
        LocalShell::new(dir.path(), LocalShellConfig::default()).unwrap(),
    )));
    let output = tool
        .call(json!({"command": "echo hi"}), &context(runtime))
        .await
        .unwrap();
    assert_eq!(output.text_content(), "Exit code: 0\n\nhi\n");
    // Without any workspace the file tools say so.
    let bare = context(RuntimeContext::for_user(harness_core::UserId::from_static("alice")));
    let err = file_tools()[0].call(json!({"path": "x"}), &bare).await.unwrap_err();
    assert!(err.to_string().contains("no workspace is bound"), "{err}");
}

/// The built-in tools declare what they do: readers are read-only and closed-world (so they
/// run concurrently), writers are closed-world but run one at a time, `execute` reaches the
/// open world and may destroy data.
#[test]
fn built_in_tools_declare_their_annotations() {
    let mut tools = file_tools();
    tools.push(shell_tool());
    let hints = |name: &str| {
        tools
            .iter()
            .find(|tool| tool.spec().name == name)
            .map(|tool| tool.spec().annotations)
            .unwrap_or_else(|| panic!("no tool {name}"))
    };
    for reader in ["read_file", "list_files", "glob_files", "grep_files"] {
        let h = hints(reader);
        assert!(
            h.is_read_only() && !h.is_open_world() && h.is_concurrency_safe(),
            "{reader}: {h:?}"
        );
    }
    for writer in ["write_file", "edit_file"] {
        let h = hints(writer);
        assert!(
            !h.is_read_only() && !h.is_open_world() && !h.is_concurrency_safe(),
            "{writer}: {h:?}"
        );
        assert!(h.is_destructive(), "{writer}");
    }
    assert!(hints("write_file").is_idempotent() && !hints("edit_file").is_idempotent());
    let execute = hints("execute");
    assert!(execute.is_open_world() && execute.is_destructive() && !execute.is_concurrency_safe());
}
