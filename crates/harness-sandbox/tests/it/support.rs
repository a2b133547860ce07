//! Shared fixtures: a provider on a private state directory, work trees the sandbox uid can
//! reach, and a scratch directory for host-side canaries.

use harness_fs::{ShellOutput, ShellRequest};
use harness_sandbox::{CreateRequest, NamespaceConfig, NamespaceProvider, Network, Sandbox, SandboxProvider};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The uid range of the test sandboxes (unused on the CI machine).
pub const UID_RANGE: (u32, u32) = (231_000, 231_199);

/// A directory that the sandbox uid can traverse (mode 0711), removed at drop.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("hsbx-").tempdir_in("/var/tmp").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

pub fn init_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_harness-sandbox-init"))
}

/// The state directory every provider of this test binary shares: uid locks live there, so
/// two providers on different state directories would hand out the same uid.
pub fn state_dir() -> PathBuf {
    // One fixed directory, reused by every run (instance records are removed at release), so
    // runs do not leave directories behind.
    let dir = PathBuf::from("/var/tmp/harness-sandbox-test-state");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    dir
}

pub fn config(_scratch: &Scratch) -> NamespaceConfig {
    NamespaceConfig::new(init_binary(), state_dir()).uid_range(UID_RANGE.0, UID_RANGE.1)
}

/// A provider and a started sandbox on `scratch/work`.
pub struct Fixture {
    pub scratch: Scratch,
    pub provider: NamespaceProvider,
    pub sandbox: Arc<dyn Sandbox>,
}

impl Fixture {
    pub async fn new() -> Self {
        Self::with(|config| config, Network::Offline).await
    }

    pub async fn with(edit: impl FnOnce(NamespaceConfig) -> NamespaceConfig, network: Network) -> Self {
        let scratch = Scratch::new();
        let provider = NamespaceProvider::new(edit(config(&scratch)));
        let request = CreateRequest::new(scratch.join("work"), "tests", "test/key").network(network);
        let sandbox = provider
            .create(request)
            .await
            .expect("the host must provide the namespace sandbox");
        Self {
            scratch,
            provider,
            sandbox,
        }
    }

    pub fn work(&self) -> PathBuf {
        self.sandbox.state().work_tree
    }

    pub async fn sh(&self, command: &str) -> ShellOutput {
        self.sandbox
            .shell()
            .execute(ShellRequest::new(command).timeout(Duration::from_secs(120)))
            .await
            .unwrap()
    }

    /// Runs `command` and asserts it exits 0, showing its output otherwise.
    pub async fn ok(&self, command: &str) -> ShellOutput {
        let output = self.sh(command).await;
        assert_eq!(
            output.exit_code,
            Some(0),
            "{command}\nstdout: {}\nstderr: {}",
            output.stdout,
            output.stderr
        );
        output
    }

    pub async fn stop(self) {
        self.sandbox.shutdown().await.unwrap();
    }
}

/// How many processes of `uid` are alive (zombies excluded) on the host.
pub fn processes_of(uid: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|entry| {
            std::fs::read_to_string(entry.path().join("status")).is_ok_and(|status| {
                !status
                    .lines()
                    .any(|line| line.starts_with("State:") && line.contains('Z'))
                    && status
                        .lines()
                        .find_map(|line| line.strip_prefix("Uid:"))
                        .and_then(|ids| ids.split_whitespace().next().map(str::to_owned))
                        == Some(uid.to_string())
            })
        })
        .count()
}
