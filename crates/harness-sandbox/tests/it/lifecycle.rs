//! The namespace backend's lifecycle: probe, create, exec, background processes, spawn,
//! shutdown, fail-closed refusals, orphans.

use crate::support::{Fixture, Scratch, UID_RANGE, config, processes_of};
use harness_fs::{ShellRequest, WriteMode, WsPath};
use harness_sandbox::{
    CreateRequest, NamespaceConfig, NamespaceProvider, ProbeError, SandboxError, SandboxProvider, SpawnRequest,
};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn probe_proves_every_mechanism() {
    let scratch = Scratch::new();
    let provider = NamespaceProvider::new(config(&scratch));
    let caps = provider
        .probe()
        .await
        .expect("the host must provide the namespace sandbox");
    assert!(caps.landlock_abi >= 6, "{caps:?}");
    assert!(
        caps.seccomp && caps.pid_namespace && caps.unprivileged && caps.per_sandbox_uid,
        "{caps:?}"
    );
    assert!(caps.bwrap_version.starts_with("0."), "{caps:?}");
}

#[tokio::test]
async fn a_command_runs_as_the_sandbox_uid_without_privileges() {
    let fixture = Fixture::new().await;
    let uid = fixture.sandbox.state().uid;
    assert!((UID_RANGE.0..=UID_RANGE.1).contains(&uid));
    let output = fixture
        .ok("id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status; pwd; echo $HOME")
        .await;
    assert_eq!(
        output.stdout,
        format!(
            "{uid}\n{uid}\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n/workspace\n/workspace\n"
        )
    );
    fixture.stop().await;
}

#[tokio::test]
async fn exit_codes_output_and_working_directories() {
    let fixture = Fixture::new().await;
    let shell = fixture.sandbox.shell();
    let output = shell
        .execute(ShellRequest::new("echo out; echo err >&2; exit 7"))
        .await
        .unwrap();
    assert_eq!(
        (output.stdout.as_str(), output.stderr.as_str(), output.exit_code),
        ("out\n", "err\n", Some(7))
    );
    fixture.ok("mkdir -p sub/dir").await;
    let output = shell
        .execute(ShellRequest::new("pwd").cwd(WsPath::parse("sub/dir").unwrap()))
        .await
        .unwrap();
    assert_eq!(output.stdout, "/workspace/sub/dir\n");
    let missing = shell
        .execute(ShellRequest::new("pwd").cwd(WsPath::parse("nope").unwrap()))
        .await;
    assert!(
        matches!(missing, Err(harness_fs::ShellError::WorkingDirectory(_))),
        "{missing:?}"
    );
    let killed = shell.execute(ShellRequest::new("kill -9 $$")).await.unwrap();
    assert_eq!((killed.exit_code, killed.signal), (None, Some(9)));
    fixture.stop().await;
}

#[tokio::test]
async fn a_timeout_kills_the_command_group_and_the_sandbox_serves_on() {
    let fixture = Fixture::new().await;
    let shell = fixture.sandbox.shell();
    let output = shell
        .execute(ShellRequest::new("sleep 60 & sleep 60; echo never").timeout(Duration::from_millis(300)))
        .await
        .unwrap();
    assert!(
        output.timed_out && output.exit_code.is_none() && output.stdout.is_empty(),
        "{output:?}"
    );
    // Both sleeps were in the command's group: none is left.
    let left = fixture.ok("ps -eo comm | grep -c '^sleep' || true").await;
    assert_eq!(left.stdout.trim(), "0");
    let cancel = harness_core::CancellationToken::new();
    let task = {
        let shell = shell.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { shell.execute(ShellRequest::new("sleep 60").cancel_on(cancel)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancel.cancel();
    let output = task.await.unwrap().unwrap();
    assert!(output.cancelled && !output.timed_out, "{output:?}");
    fixture.stop().await;
}

#[tokio::test]
async fn background_processes_live_between_commands_and_die_with_the_sandbox() {
    let fixture = Fixture::new().await;
    let uid = fixture.sandbox.state().uid;
    fixture
        .ok("setsid sh -c 'sleep 300' >/dev/null 2>&1 < /dev/null & echo started")
        .await;
    fixture.ok("(sleep 300 &) ; true").await;
    let running = fixture.ok("ps -eo comm | grep -c '^sleep'").await;
    assert_eq!(running.stdout.trim(), "2");
    assert!(processes_of(uid) >= 3);
    fixture.sandbox.shutdown().await.unwrap();
    assert!(!fixture.sandbox.is_alive());
    assert_eq!(processes_of(uid), 0, "nothing of the sandbox uid survives its release");
    let after = fixture.sandbox.shell().execute(ShellRequest::new("true")).await;
    assert!(after.is_err());
}

#[tokio::test]
async fn output_is_capped_and_a_flood_does_not_block() {
    let fixture = Fixture::with(
        |mut config| {
            config.limits.max_output_bytes = 1000;
            config
        },
        harness_sandbox::Network::Offline,
    )
    .await;
    let output = fixture
        .ok("head -c 20000000 /dev/zero | tr '\\0' x; echo; echo tail-marker")
        .await;
    assert!(output.stdout_truncated);
    assert_eq!(output.stdout_bytes, 20_000_000 + 1 + 12);
    assert!(output.stdout.ends_with("tail-marker\n") && output.stdout.len() < 1200);
    fixture.stop().await;
}

#[tokio::test]
async fn spawned_processes_have_piped_stdio() {
    let fixture = Fixture::new().await;
    let mut process = fixture
        .sandbox
        .spawn(SpawnRequest::new([
            "sh",
            "-c",
            "while read line; do echo \"got $line\"; done; echo bye >&2; exit 4",
        ]))
        .await
        .unwrap();
    let mut stdin = process.take_stdin().unwrap();
    let mut stdout = process.take_stdout().unwrap();
    let mut stderr = process.take_stderr().unwrap();
    stdin.write_all(b"one\ntwo\n").await.unwrap();
    let mut buffer = [0u8; 16];
    let mut seen = Vec::new();
    while seen.len() < 16 {
        let read = stdout.read(&mut buffer).await.unwrap();
        assert_ne!(read, 0);
        seen.extend_from_slice(&buffer[..read]);
    }
    assert_eq!(seen, b"got one\ngot two\n");
    stdin.shutdown().await.unwrap();
    let exit = process.wait().await;
    assert_eq!((exit.code, exit.signal), (Some(4), None));
    let mut err = String::new();
    stderr.read_to_string(&mut err).await.unwrap();
    assert_eq!(err, "bye\n");
    let missing = fixture
        .sandbox
        .spawn(SpawnRequest::new(["no-such-program"]))
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(missing.code, Some(127));
    fixture.stop().await;
}

#[tokio::test]
async fn the_file_tools_and_the_shell_see_one_work_tree() {
    let fixture = Fixture::new().await;
    let fs = fixture.sandbox.filesystem();
    fs.write(
        &WsPath::parse("notes/from-host.txt").unwrap(),
        b"host\n",
        WriteMode::CreateNew,
    )
    .await
    .unwrap();
    // Written as root on the host, yet the sandbox uid may change it.
    fixture
        .ok("echo sandbox >> notes/from-host.txt && echo made > notes/from-sandbox.txt")
        .await;
    assert_eq!(
        fs.read(&WsPath::parse("notes/from-host.txt").unwrap()).await.unwrap(),
        b"host\nsandbox\n"
    );
    assert_eq!(
        fs.read(&WsPath::parse("notes/from-sandbox.txt").unwrap())
            .await
            .unwrap(),
        b"made\n"
    );
    // A symlink planted inside cannot redirect a host-side write (LocalFs refuses it).
    fixture.ok("ln -s /etc planted").await;
    let planted = fs
        .write(&WsPath::parse("planted/x").unwrap(), b"x", WriteMode::Overwrite)
        .await;
    assert!(planted.is_err());
    fixture.stop().await;
}

#[tokio::test]
async fn a_host_without_a_uid_range_is_refused_as_root() {
    let scratch = Scratch::new();
    let mut config = config(&scratch);
    config.uid_range = None;
    let provider = NamespaceProvider::new(config);
    assert_eq!(provider.probe().await.unwrap_err(), ProbeError::UidRangeRequired);
    let created = provider
        .create(CreateRequest::new(scratch.join("work"), "t", "k"))
        .await;
    assert!(
        matches!(created, Err(SandboxError::Probe(ProbeError::UidRangeRequired))),
        "{created:?}"
    );
    assert!(ProbeError::UidRangeRequired.to_string().contains("uid range"));
}

#[tokio::test]
async fn missing_pieces_fail_closed_with_their_cause() {
    let scratch = Scratch::new();
    let mut missing_bwrap = config(&scratch);
    missing_bwrap.bwrap = scratch.join("no-bwrap");
    let error = NamespaceProvider::new(missing_bwrap).probe().await.unwrap_err();
    assert!(matches!(error, ProbeError::BwrapMissing { .. }), "{error:?}");
    assert!(error.to_string().contains("apt-get install bubblewrap"));

    let mut missing_init = config(&scratch);
    missing_init.init = scratch.join("no-init");
    let error = NamespaceProvider::new(missing_init).probe().await.unwrap_err();
    assert!(matches!(error, ProbeError::InitMissing { .. }), "{error:?}");

    // An old bubblewrap (a script that reports 0.4.0).
    let fake = scratch.join("old-bwrap");
    std::fs::write(&fake, "#!/bin/sh\necho bubblewrap 0.4.0\n").unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(&mut std::fs::metadata(&fake).unwrap().permissions(), 0o755);
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut old = config(&scratch);
    old.bwrap = fake;
    let error = NamespaceProvider::new(old).probe().await.unwrap_err();
    assert_eq!(
        error,
        ProbeError::BwrapTooOld {
            found: "0.4.0".to_owned()
        }
    );

    let mut exposed = config(&scratch);
    exposed.read_only = vec!["/root/.rustup".into()];
    let error = NamespaceProvider::new(exposed).probe().await.unwrap_err();
    assert!(matches!(error, ProbeError::ForbiddenReadOnly { .. }), "{error:?}");
}

#[tokio::test]
async fn user_namespaces_denied_is_a_start_error() {
    // Run the provider's bwrap inside an outer bwrap that disables user namespaces: a wrapper
    // script stands in for bwrap.
    let scratch = Scratch::new();
    let wrapper = scratch.join("bwrap-no-userns");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\n[ \"$1\" = --version ] && exec /usr/bin/bwrap --version\nexec /usr/bin/bwrap --unshare-user --disable-userns --dev-bind / / -- /usr/bin/bwrap \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut denied = config(&scratch);
    denied.bwrap = wrapper;
    let error = NamespaceProvider::new(denied).probe().await.unwrap_err();
    assert!(matches!(error, ProbeError::UserNamespaces { .. }), "{error:?}");
}

#[tokio::test]
async fn orphans_of_a_dead_owner_are_listed_and_destroyed() {
    let scratch = Scratch::new();
    let provider = NamespaceProvider::new(config(&scratch));
    // Simulate a harness killed mid-call: an instance record whose lock nobody holds.
    let sandbox = provider
        .create(CreateRequest::new(scratch.join("work"), "orphan-test-a", "k"))
        .await
        .unwrap();
    let state = sandbox.state();
    assert!(
        provider.list_orphans("orphan-test-a").await.unwrap().is_empty(),
        "a live instance is no orphan"
    );
    let record = crate::support::state_dir().join("instances").join(&state.instance);
    let copy = crate::support::state_dir().join("instances/ns-orphan-copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(record.join("state.json"), copy.join("state.json")).unwrap();
    let orphans = provider.list_orphans("orphan-test-a").await.unwrap();
    assert_eq!(orphans.len(), 1);
    assert!(provider.list_orphans("orphan-test-b").await.unwrap().is_empty());
    let mut orphan = orphans[0].clone();
    orphan.instance = "ns-orphan-copy".to_owned();
    provider.destroy(&orphan).await.unwrap();
    assert!(!copy.exists());
    // The live sandbox was not touched (its uid is still locked).
    assert!(sandbox.is_alive());
    provider.destroy(&state).await.unwrap();
    assert!(!sandbox.is_alive() && !record.exists());
    provider.destroy(&state).await.unwrap(); // idempotent
}

#[tokio::test]
async fn two_sandboxes_get_different_uids_and_never_see_each_other() {
    let scratch = Scratch::new();
    let provider = NamespaceProvider::new(NamespaceConfig { ..config(&scratch) });
    let a = provider
        .create(CreateRequest::new(scratch.join("a"), "t", "a"))
        .await
        .unwrap();
    let b = provider
        .create(CreateRequest::new(scratch.join("b"), "t", "b"))
        .await
        .unwrap();
    assert_ne!(a.state().uid, b.state().uid);
    let a_tree = a.state().work_tree;
    let output = b
        .shell()
        .execute(ShellRequest::new(format!(
            "ls {} 2>&1; ls /proc | grep -c '^[0-9]'",
            a_tree.display()
        )))
        .await
        .unwrap();
    assert!(output.stdout.contains("No such file"), "{output:?}");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_uid_not_proven_clean_is_swept_before_reuse() {
    // A uid of its own (outside the shared test range), so no other test takes it.
    const UID: u32 = 233_000;
    let scratch = Scratch::new();
    let provider = NamespaceProvider::new(config(&scratch).uid_range(UID, UID));
    let work = scratch.join("work");
    let sandbox = provider.create(CreateRequest::new(&work, "t", "k")).await.unwrap();
    let output = sandbox.shell().execute(ShellRequest::new("echo ok")).await.unwrap();
    assert_eq!(output.stdout, "ok\n");
    sandbox.shutdown().await.unwrap();
    let lock = crate::support::state_dir().join("uids").join(format!("{UID}.lock"));
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "clean\n",
        "a clean stop marks the uid"
    );
    // What a harness killed mid-sandbox leaves: a process of the uid, and no mark (a uid in
    // use never carries it).
    std::fs::write(&lock, "").unwrap();
    let mut leftover = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            &UID.to_string(),
            "--regid",
            &UID.to_string(),
            "--clear-groups",
            "sleep",
            "300",
        ])
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(processes_of(UID), 1);
    let sandbox = provider.create(CreateRequest::new(&work, "t", "k")).await.unwrap();
    let status = leftover.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "",
        "the mark is cleared while in use"
    );
    sandbox.shutdown().await.unwrap();
    assert_eq!(processes_of(UID), 0);
}
