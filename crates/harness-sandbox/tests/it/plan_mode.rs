//! Plan mode: the read-only shell and read-only spawns (a second Landlock layer per process)
//! and a read-only sandbox (the work tree bound read-only and without Landlock write rights).
//! Reads work; every way of writing the work tree fails, and the canary file stays as it was.

use crate::support::{Fixture, Scratch, config};
use harness_fs::{ShellRequest, WsPath};
use harness_sandbox::{CreateRequest, NamespaceProvider, SandboxProvider, SpawnRequest};
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncReadExt;

fn scripts() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plan-mode");
    let mut cases: Vec<(String, String)> = std::fs::read_dir(&root)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&path).unwrap(),
            )
        })
        .collect();
    cases.sort();
    cases
}

/// The canary file and an empty directory, owned by the sandbox uid (so only the read-only
/// layer stands between a command and a write).
fn plant(work: &Path, uid: Option<u32>) {
    std::fs::write(work.join("plan.txt"), "plan\n").unwrap();
    std::fs::create_dir_all(work.join("sub")).unwrap();
    if let Some(uid) = uid {
        for path in ["plan.txt", "sub"] {
            std::os::unix::fs::chown(work.join(path), Some(uid), Some(uid)).unwrap();
        }
    }
}

/// Every script of `tests/plan-mode` against `shell`; returns the failures.
async fn run_scripts(shell: &dyn harness_fs::Shell, work: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, script) in scripts() {
        let output = shell
            .execute(
                ShellRequest::new(script)
                    .env("PLAN_FILE", "/workspace/plan.txt")
                    .timeout(Duration::from_secs(60)),
            )
            .await
            .unwrap();
        let text = format!("{}{}", output.stdout, output.stderr);
        if text.contains("ESCAPED") {
            failures.push(format!("{name}: {text}"));
        }
        if !text.contains("plan") && !text.contains("done") {
            failures.push(format!("{name}: reads failed: {text}"));
        }
        if std::fs::read_to_string(work.join("plan.txt")).unwrap_or_default() != "plan\n" {
            failures.push(format!("{name}: the work tree file changed"));
        }
        for stray in [
            "new-file",
            "new-dir",
            "created",
            "made",
            "late-file",
            "moved",
            "renamed",
        ] {
            if work.join(stray).exists() {
                failures.push(format!("{name}: created {stray}"));
            }
        }
        if !work.join("sub").is_dir() {
            failures.push(format!("{name}: removed sub/"));
        }
    }
    failures
}

#[tokio::test]
async fn the_read_only_shell_reads_but_never_writes_the_work_tree() {
    let fixture = Fixture::new().await;
    let work = fixture.work();
    plant(&work, Some(fixture.sandbox.state().uid));
    let plan = fixture.sandbox.read_only_shell();
    assert!(plan.describe().contains("read-only"));
    let failures = run_scripts(plan.as_ref(), &work).await;
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
    // Reads, the private /tmp and TMPDIR work in plan mode.
    let output = plan
        .execute(ShellRequest::new(
            "cat plan.txt && ls sub && echo t > /tmp/t && cat /tmp/t && mktemp && echo $TMPDIR",
        ))
        .await
        .unwrap();
    assert_eq!(output.exit_code, Some(0), "{output:?}");
    assert!(output.stdout.starts_with("plan\nt\n/tmp/"), "{output:?}");
    // The same sandbox's normal shell still writes.
    fixture.ok("echo changed > plan.txt && touch new-file").await;
    assert_eq!(std::fs::read_to_string(work.join("plan.txt")).unwrap(), "changed\n");
    // A write error names the cause the model can act on.
    let denied = plan.execute(ShellRequest::new("echo x > plan.txt")).await.unwrap();
    assert_ne!(denied.exit_code, Some(0));
    assert!(denied.stderr.contains("Permission denied"), "{denied:?}");
    fixture.stop().await;
}

#[tokio::test]
async fn a_read_only_spawn_cannot_write_and_a_normal_one_can() {
    let fixture = Fixture::new().await;
    let work = fixture.work();
    plant(&work, Some(fixture.sandbox.state().uid));
    let script = "import sys\ntry:\n    open('plan.txt', 'w').write('x')\n    print('wrote')\nexcept OSError as e:\n    print('denied', e.errno)\nprint(open('plan.txt').read().strip())\n";
    for (read_only, expected) in [(true, "denied 13\nplan\n"), (false, "wrote\nx\n")] {
        let mut process = fixture
            .sandbox
            .spawn(
                SpawnRequest::new(["python3", "-c", script])
                    .cwd(WsPath::root())
                    .read_only(read_only),
            )
            .await
            .unwrap();
        let mut stdout = process.take_stdout().unwrap();
        let mut text = String::new();
        stdout.read_to_string(&mut text).await.unwrap();
        assert_eq!(process.wait().await.code, Some(0));
        assert_eq!(text, expected, "read_only = {read_only}");
    }
    fixture.stop().await;
}

#[tokio::test]
async fn a_read_only_sandbox_binds_the_work_tree_read_only() {
    let scratch = Scratch::new();
    let work = scratch.join("work");
    std::fs::create_dir_all(&work).unwrap();
    plant(&work, None);
    let provider = NamespaceProvider::new(config(&scratch));
    let sandbox = provider
        .create(CreateRequest::new(&work, "tests", "test/plan").read_only(true))
        .await
        .unwrap();
    let shell = sandbox.shell();
    let failures = run_scripts(shell.as_ref(), &sandbox.state().work_tree).await;
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
    // The mount itself is read-only (so metadata changes, which Landlock does not cover, fail
    // too).
    let output = shell
        .execute(ShellRequest::new(
            "awk '$5 == \"/workspace\" { print $6 }' /proc/self/mountinfo; chmod 600 plan.txt; echo chmod=$?",
        ))
        .await
        .unwrap();
    assert!(output.stdout.starts_with("ro,"), "{output:?}");
    assert!(output.stdout.contains("chmod=1"), "{output:?}");
    assert!(output.stderr.contains("Read-only file system"), "{output:?}");
    sandbox.shutdown().await.unwrap();
}
