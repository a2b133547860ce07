//! The bubblewrap command line: namespaces, privileges, and the minimal mount view.

use crate::confine::{Confinement, ProxyRelay, Rlimits};
use crate::process::WORK_TREE_MOUNT;
use crate::provider::{Network, ProbeError};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the init binary is bound inside the sandbox.
const INIT_MOUNT: &str = "/.harness-init";

/// Where the directory holding the proxy's Unix socket is bound (`network = "proxy"`).
pub(crate) const PROXY_MOUNT: &str = "/.harness-proxy";

/// The proxy socket's name in that directory.
pub(crate) const PROXY_SOCKET: &str = "proxy.sock";

/// Host directories of the base system: bound read-only, or re-created as the same symlink
/// (Debian's merged `/usr` makes `/bin`, `/lib*` and `/sbin` symlinks into `/usr`).
const SYSTEM_DIRS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// Host files of `/etc` a normal toolchain needs, bound read-only when they exist. Nothing
/// with secrets (`shadow`, `ssh`, `sudoers`) and no host account list: `passwd` and `group`
/// are the sandbox's own.
const ETC_FILES: &[&str] = &[
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/gitconfig",
    "/etc/papersize",
];

/// Everything one sandbox's command line depends on.
pub(crate) struct Plan<'a> {
    pub(crate) bwrap: &'a Path,
    pub(crate) init: &'a Path,
    pub(crate) work_tree: &'a Path,
    pub(crate) etc: &'a Path,
    pub(crate) read_only: &'a [PathBuf],
    pub(crate) network: Network,
    pub(crate) tmp_bytes: u64,
    pub(crate) confinement: Confinement,
    /// The host directory holding the proxy socket (`network = "proxy"`).
    pub(crate) proxy_dir: Option<&'a Path>,
    /// The work tree is bound read-only (and Landlock grants it no write right).
    pub(crate) read_only_work_tree: bool,
}

/// What the init confines itself to, for this mount view.
pub(crate) fn confinement(
    read_only: &[PathBuf],
    rlimits: &Rlimits,
    read_only_work_tree: bool,
    proxy: bool,
) -> Confinement {
    let mut read = vec![
        "/usr".to_owned(),
        "/etc".to_owned(),
        "/proc".to_owned(),
        "/dev".to_owned(),
    ];
    for dir in SYSTEM_DIRS {
        if Path::new(dir).symlink_metadata().is_ok_and(|meta| meta.is_dir()) {
            read.push((*dir).to_owned());
        }
    }
    read.extend(read_only.iter().map(|path| path.display().to_string()));
    let scratch = vec!["/tmp".to_owned(), "/dev/shm".to_owned()];
    let mut write = scratch.clone();
    if read_only_work_tree {
        read.push(WORK_TREE_MOUNT.to_owned());
    } else {
        write.insert(0, WORK_TREE_MOUNT.to_owned());
    }
    Confinement {
        read,
        write,
        read_only_write: scratch,
        proxy: proxy.then(|| ProxyRelay {
            listen: crate::proxy::PROXY_LISTEN.to_owned(),
            socket: format!("{PROXY_MOUNT}/{PROXY_SOCKET}"),
        }),
        files: ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
            .iter()
            .map(|path| (*path).to_owned())
            .collect(),
        exec: vec![INIT_MOUNT.to_owned()],
        rlimits: *rlimits,
    }
}

/// The bwrap command. When the harness is root it first drops to `uid` (std clears the
/// supplementary groups); bwrap then runs unprivileged, so its user namespace holds no
/// capability over anything of the host.
pub(crate) fn command(plan: &Plan<'_>, uid: u32, drop_to_uid: bool) -> Command {
    let mut command = Command::new(plan.bwrap);
    if drop_to_uid {
        command.uid(uid).gid(uid);
    }
    command
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let arg = |command: &mut Command, args: &[&str]| {
        command.args(args);
    };
    arg(
        &mut command,
        &[
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--disable-userns",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--hostname",
            "sandbox",
        ],
    );
    if plan.network != Network::Full {
        arg(&mut command, &["--unshare-net"]);
    }
    arg(&mut command, &["--ro-bind", "/usr", "/usr"]);
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        match path.symlink_metadata() {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    command.arg("--symlink").arg(target).arg(dir);
                }
            }
            Ok(meta) if meta.is_dir() => {
                command.args(["--ro-bind", dir, dir]);
            }
            _ => {}
        }
    }
    arg(&mut command, &["--dir", "/etc"]);
    for name in ["passwd", "group", "hosts", "nsswitch.conf", "hostname"] {
        command
            .arg("--ro-bind")
            .arg(plan.etc.join(name))
            .arg(format!("/etc/{name}"));
    }
    if plan.network == Network::Full {
        arg(&mut command, &["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]);
    }
    for path in ETC_FILES {
        command.args(["--ro-bind-try", path, path]);
    }
    arg(&mut command, &["--dev", "/dev", "--proc", "/proc"]);
    command
        .arg("--size")
        .arg(plan.tmp_bytes.to_string())
        .args(["--tmpfs", "/tmp"]);
    command
        .arg(if plan.read_only_work_tree {
            "--ro-bind"
        } else {
            "--bind"
        })
        .arg(plan.work_tree)
        .arg(WORK_TREE_MOUNT);
    if let Some(dir) = plan.proxy_dir {
        command.arg("--ro-bind").arg(dir).arg(PROXY_MOUNT);
    }
    for path in plan.read_only {
        command.arg("--ro-bind").arg(path).arg(path);
    }
    command.arg("--ro-bind").arg(plan.init).arg(INIT_MOUNT);
    command.args(["--chdir", WORK_TREE_MOUNT, INIT_MOUNT]);
    command.arg(serde_json::to_string(&plan.confinement).unwrap_or_default());
    command
}

/// The curated `/etc` files of one sandbox.
pub(crate) fn etc_files(uid: u32) -> Vec<(&'static str, String)> {
    vec![
        (
            "passwd",
            format!(
                "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:{WORK_TREE_MOUNT}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        ("group", format!("root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n")),
        (
            "hosts",
            "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n".to_owned(),
        ),
        (
            "nsswitch.conf",
            "passwd: files\ngroup: files\nhosts: files dns\n".to_owned(),
        ),
        ("hostname", "sandbox\n".to_owned()),
    ]
}

/// `bwrap --version`, checked against the flags we need.
pub(crate) fn version(bwrap: &Path) -> Result<String, ProbeError> {
    let output = Command::new(bwrap)
        .arg("--version")
        .env_clear()
        .output()
        .map_err(|err| ProbeError::Bwrap {
            detail: format!("{}: {err}", bwrap.display()),
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut parts = version.split('.').map(|part| part.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (0, 8) {
        return Err(ProbeError::BwrapTooOld {
            found: if version.is_empty() {
                text.trim().to_owned()
            } else {
                version
            },
        });
    }
    Ok(version)
}

/// Names the cause of a bwrap that exited before the init reported.
pub(crate) fn classify_failure(stderr: &str) -> ProbeError {
    let lower = stderr.to_lowercase();
    if lower.contains("namespace") || lower.contains("uid map") || lower.contains("setting up uid") {
        ProbeError::UserNamespaces {
            detail: stderr.to_owned(),
        }
    } else {
        ProbeError::Bwrap {
            detail: if stderr.is_empty() {
                "bubblewrap exited without a message".to_owned()
            } else {
                stderr.to_owned()
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn userns_failures_are_named() {
        assert!(matches!(
            classify_failure(
                "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces"
            ),
            ProbeError::UserNamespaces { .. }
        ));
        assert!(matches!(
            classify_failure("bwrap: Can't find source path /x"),
            ProbeError::Bwrap { .. }
        ));
    }
}
