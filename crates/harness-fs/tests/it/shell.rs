//! The local shell: process groups, timeouts that kill grandchildren, bounded output without
//! pipe deadlocks, working directories confined to the root (weak spot 18 of the reference).

use super::p;
use harness_core::CancellationToken;
use harness_fs::{
    Filesystem, KvFs, LocalFs, LocalShell, LocalShellConfig, Namespaced, Shell, ShellError, ShellRequest, WriteMode,
};
use harness_store::InMemoryKv;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn shell_in(dir: &tempfile::TempDir) -> Arc<dyn Shell> {
    Arc::new(LocalShell::new(dir.path(), LocalShellConfig::default()).unwrap())
}

/// Whether process `pid` is still running (a zombie waiting to be reaped counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X"))
        }
        Err(_) => false,
    }
}

/// Waits (up to 10 s of real time: these are real processes) until none of `pids` runs.
async fn assert_all_gone(pids: &[u32]) {
    let started = Instant::now();
    while pids.iter().any(|pid| alive(*pid)) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "processes survived: {:?}",
            pids.iter().filter(|pid| alive(**pid)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pids(stdout: &str) -> Vec<u32> {
    stdout.lines().filter_map(|line| line.trim().parse().ok()).collect()
}

#[tokio::test]
async fn runs_commands_in_the_root_with_exit_codes_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let shell = shell_in(&dir);
    let output = shell
        .execute(ShellRequest::new("echo out; echo err >&2; pwd; exit 3"))
        .await
        .unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(output.stdout, format!("out\n{}\n", root.display()));
    assert_eq!(
        (output.stderr.as_str(), output.exit_code, output.success()),
        ("err\n", Some(3), false)
    );
    assert!(!output.timed_out && !output.stdout_truncated);
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    let output = shell
        .execute(
            ShellRequest::new("pwd; echo $GREETING")
                .cwd(p("sub"))
                .env("GREETING", "hi"),
        )
        .await
        .unwrap();
    assert_eq!(output.stdout, format!("{}\nhi\n", root.join("sub").display()));
}

#[tokio::test]
async fn working_directories_must_exist_and_stay_inside() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
    std::fs::write(dir.path().join("file"), "x").unwrap();
    let shell = shell_in(&dir);
    for (cwd, expected) in [
        ("out", "permission denied"),
        ("missing", "not found"),
        ("file", "not a directory"),
    ] {
        match shell.execute(ShellRequest::new("pwd").cwd(p(cwd))).await {
            Err(err @ ShellError::WorkingDirectory(_)) => {
                let text = harness_core::error_chain(&err);
                assert!(text.contains(expected), "{cwd}: {text}");
            }
            other => panic!("{cwd}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let shell = shell_in(&dir);
    let started = Instant::now();
    let output = shell
        .execute(
            ShellRequest::new("sleep 100 & echo $!; sleep 100 & echo $!; sh -c 'sleep 100 & echo $!; wait' & wait")
                .timeout(Duration::from_millis(700)),
        )
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the timeout did not stop the wait"
    );
    assert!(output.timed_out);
    assert_eq!(output.exit_code, None);
    assert_eq!(output.signal, Some(9));
    let spawned = pids(&output.stdout);
    assert_eq!(spawned.len(), 3, "{output:?}");
    assert_all_gone(&spawned).await;
}

#[tokio::test]
async fn background_jobs_do_not_outlive_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let shell = shell_in(&dir);
    // The background sleep keeps stdout open: without killing the group, reading would hang.
    let started = Instant::now();
    let output = shell.execute(ShellRequest::new("sleep 100 & echo $!")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(output.exit_code, Some(0));
    assert_all_gone(&pids(&output.stdout)).await;
}

#[tokio::test]
async fn cancellation_and_dropping_kill_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let shell = shell_in(&dir);
    let token = CancellationToken::new();
    token.cancel();
    let output = shell
        .execute(ShellRequest::new("sleep 100").cancel_on(token))
        .await
        .unwrap();
    assert!(output.cancelled && !output.timed_out);
    // Drop the future while the command runs; its pids are written to a file first.
    let pid_file = dir.path().join("pids");
    let running = shell.execute(ShellRequest::new(
        "sleep 100 & echo $! > pids.tmp; echo $$ >> pids.tmp; mv pids.tmp pids; wait",
    ));
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::pin!(running);
        loop {
            tokio::select! {
                _ = &mut running => panic!("the command ended by itself"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {
                    if pid_file.exists() { return; }
                }
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "the command never started");
    let spawned = pids(&std::fs::read_to_string(&pid_file).unwrap());
    assert_eq!(spawned.len(), 2);
    assert_all_gone(&spawned).await;
}

#[tokio::test]
async fn ten_megabytes_of_output_neither_deadlock_nor_flood() {
    let dir = tempfile::tempdir().unwrap();
    let shell = shell_in(&dir);
    let started = Instant::now();
    let output = shell
        .execute(
            ShellRequest::new(
                "yes 0123456789abcdef | head -c 10485760; (yes err | head -c 5000000) >&2; printf 'THE END'",
            )
            .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(output.exit_code, Some(0));
    assert_eq!(output.stdout_bytes, 10_485_760 + 7);
    assert_eq!(output.stderr_bytes, 5_000_000);
    assert!(output.stdout_truncated && output.stderr_truncated);
    assert!(output.stdout.len() < 101_000, "{}", output.stdout.len());
    assert!(output.stdout.starts_with("0123456789abcdef\n0123456789abcdef\n"));
    assert!(output.stdout.ends_with("THE END"));
    assert!(output.stdout.contains("bytes omitted"));
    assert!(output.stderr.starts_with("err\nerr\n") && output.stderr.len() < 101_000);
}

#[tokio::test]
async fn only_some_backends_have_a_shell() {
    let dir = tempfile::tempdir().unwrap();
    // A host shell is opt-in (weak spot 1 of the reference).
    assert!(LocalFs::new(dir.path()).unwrap().shell().is_none());
    assert!(KvFs::new(Arc::new(InMemoryKv::default()), p("")).shell().is_none());
    // A namespaced view's shell runs inside the namespace.
    let fs: Arc<dyn Filesystem> = Arc::new(
        LocalFs::new(dir.path())
            .unwrap()
            .with_shell(LocalShellConfig::default()),
    );
    let alice = Namespaced::new(fs, p("users/alice"));
    alice
        .write(&p("mine.txt"), b"alice", WriteMode::CreateNew)
        .await
        .unwrap();
    let shell = alice.shell().unwrap();
    let output = shell.execute(ShellRequest::new("cat mine.txt; ls ..")).await.unwrap();
    assert!(output.stdout.starts_with("alice"), "{output:?}");
    // A working directory cannot point into another namespace through a symlink.
    std::fs::create_dir_all(dir.path().join("users/bob")).unwrap();
    std::os::unix::fs::symlink("../bob", dir.path().join("users/alice/bob")).unwrap();
    assert!(matches!(
        shell.execute(ShellRequest::new("pwd").cwd(p("bob"))).await,
        Err(ShellError::WorkingDirectory(_))
    ));
}
