//! Denials as evidence: [`explaining`] wraps a sandbox's shell so that a command whose stderr
//! shows the sandbox's policy (a path outside the mount view or the Landlock rules, a host the
//! network policy does not reach, a refused syscall) says so in its result, and
//! [`prompt_line`] states what is enforced, in one line for the system prompt.

use crate::provider::Network;
use async_trait::async_trait;
use harness_fs::{Shell, ShellError, ShellOutput, ShellRequest};
use std::sync::Arc;

/// What the model is told about the sandbox, in one short paragraph.
pub fn prompt_line(network: Network, read_only: usize) -> String {
    let network = match network {
        Network::Offline => "offline (no host is reachable, the host's loopback included)",
        Network::Proxy => "only the allow-listed hosts, through the harness's proxy",
        Network::Full => "the host's network",
    };
    let extra = if read_only == 0 {
        String::new()
    } else {
        format!(", {read_only} host toolchain dir(s) read-only")
    };
    format!(
        "## Shell\n`execute` runs in a sandbox (an unprivileged user, its own namespaces, Landlock and seccomp): \
         only /workspace (the files the file tools see) and /tmp are writable; system dirs read-only{extra}; \
         host files, other users' work, the harness's data and secrets are not there; network: {network}. \
         A denial is the sandbox's policy: report it, do not work around it."
    )
}

/// `shell` with a note appended to the stderr of a command that hit the policy.
pub fn explaining(shell: Arc<dyn Shell>, network: Network) -> Arc<dyn Shell> {
    Arc::new(Explaining { inner: shell, network })
}

struct Explaining {
    inner: Arc<dyn Shell>,
    network: Network,
}

/// The note for a failed command's stderr, if it looks like a denial.
pub(crate) fn denial_note(stderr: &str, network: Network) -> Option<&'static str> {
    let has = |needles: &[&str]| needles.iter().any(|needle| stderr.contains(needle));
    if network == Network::Offline
        && has(&[
            "Network is unreachable",
            "Could not resolve host",
            "Temporary failure in name resolution",
            "Name or service not known",
            "Connection refused",
        ])
    {
        return Some(
            "[sandbox] denied: the sandbox's network is offline (network = \"offline\"); no host is reachable, the host's loopback included. Widening it is the operator's decision ([sandbox] network).",
        );
    }
    let hidden = stderr.lines().any(|line| {
        line.contains("No such file or directory")
            && ["/root", "/home", "/var/", "/run", "/etc/shadow", "/proc/", "/sys/"]
                .iter()
                .any(|dir| line.contains(dir))
    });
    if hidden || has(&["Permission denied", "Operation not permitted", "Read-only file system"]) {
        return Some(
            "[sandbox] denied: this command runs in a sandbox; only /workspace and /tmp are writable, and paths outside the sandbox's view (host files, other users' work, the harness's data) are not readable. Work inside /workspace.",
        );
    }
    None
}

#[async_trait]
impl Shell for Explaining {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn execute(&self, request: ShellRequest) -> Result<ShellOutput, ShellError> {
        let mut output = self.inner.execute(request).await?;
        if let Some(note) = denial_note(&output.stderr, self.network) {
            if !output.stderr.ends_with('\n') && !output.stderr.is_empty() {
                output.stderr.push('\n');
            }
            output.stderr.push_str(note);
        }
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::{Network, denial_note, prompt_line};

    #[test]
    fn denials_are_named() {
        assert!(
            denial_note("cat: /etc/shadow: Permission denied", Network::Offline)
                .is_some_and(|n| n.contains("/workspace"))
        );
        assert!(
            denial_note("curl: (7) Couldn't connect: Network is unreachable", Network::Offline)
                .is_some_and(|n| n.contains("offline"))
        );
        assert!(denial_note("Network is unreachable", Network::Full).is_none());
        assert!(denial_note("exit 3", Network::Offline).is_none());
        assert!(denial_note("cat: /root/x: No such file or directory", Network::Offline).is_some());
        assert!(denial_note("cat: notes.txt: No such file or directory", Network::Offline).is_none());
        assert!(prompt_line(Network::Offline, 0).len() < 600);
    }
}
