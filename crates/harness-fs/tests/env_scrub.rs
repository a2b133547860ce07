//! `OPENAI_API_KEY` in the parent's environment never reaches a command (weak spot 2 of the
//! reference). A separate test binary with a single test, so changing the process environment
//! cannot race with other tests' threads.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use harness_fs::{LocalShell, LocalShellConfig, Shell, ShellRequest};

#[test]
#[allow(unsafe_code)]
fn api_keys_in_the_parent_environment_are_invisible_to_commands() {
    // SAFETY: this binary runs only this test, and no other thread exists yet (the runtime is
    // built below), so nothing reads the environment concurrently.
    unsafe {
        std::env::set_var("OPENAI_API_KEY", "sk-test-must-not-leak");
        std::env::set_var("LC_TIME", "C");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let shell = LocalShell::new(dir.path(), LocalShellConfig::default()).unwrap();
        let output = shell.execute(ShellRequest::new("env")).await.unwrap();
        assert_eq!(output.exit_code, Some(0));
        assert!(!output.stdout.contains("OPENAI_API_KEY"), "{}", output.stdout);
        assert!(!output.stdout.contains("sk-test"), "{}", output.stdout);
        assert!(output.stdout.contains("PATH="), "PATH is kept: {}", output.stdout);
        assert!(output.stdout.contains("LC_TIME=C"), "LC_* is kept: {}", output.stdout);
        // An explicit extra variable is passed.
        let output = shell
            .execute(ShellRequest::new("echo $TOKEN").env("TOKEN", "given"))
            .await
            .unwrap();
        assert_eq!(output.stdout, "given\n");
        // So is a configured one, and a configured allowlist can be emptied.
        let bare = LocalShell::new(
            dir.path(),
            LocalShellConfig {
                inherit_env: Vec::new(),
                env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
                ..LocalShellConfig::default()
            },
        )
        .unwrap();
        let output = bare.execute(ShellRequest::new("env")).await.unwrap();
        let mut names: Vec<&str> = output
            .stdout
            .lines()
            .filter_map(|line| line.split('=').next())
            .collect();
        names.retain(|name| !matches!(*name, "PWD" | "SHLVL" | "_" | "OLDPWD"));
        assert_eq!(names, ["PATH"], "{}", output.stdout);
    });
}
