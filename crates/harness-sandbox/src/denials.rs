//! Denials as evidence: [`explaining`] wraps a sandbox's shell so that a command whose stderr
//! shows the sandbox's policy (a path outside the mount view or the Landlock rules, a host the
//! network policy does not reach, a refused syscall) says so in its result, and
//! [`prompt_line`] states what is enforced, in one line for the system prompt.

use crate::provider::Network;
use crate::section::SandboxSection;
use async_trait::async_trait;
use harness_fs::{Shell, ShellError, ShellOutput, ShellRequest};
use std::sync::Arc;

/// What the model is told about the sandbox, in one short paragraph: exactly what `section`
/// enforces (the writable dirs, the network and its allow-list, the limits, plan mode).
pub fn prompt_line(section: &SandboxSection) -> String {
    let network = match section.network {
        Network::Offline => "offline (no host is reachable, the host's loopback included)".to_owned(),
        Network::Proxy if section.allow_hosts.is_empty() => {
            "through the harness's proxy (http(s)_proxy), whose allow-list is empty: no host is reachable".to_owned()
        }
        Network::Proxy => format!(
            "only {} through the harness's proxy (http(s)_proxy); every other host is refused",
            section.allow_hosts.join(", ")
        ),
        Network::Full => "the host's network, unfiltered".to_owned(),
    };
    let extra = if section.read_only.is_empty() {
        String::new()
    } else {
        format!(", {} host toolchain dir(s) read-only", section.read_only.len())
    };
    let limits = section.namespace_config(std::path::Path::new("")).limits;
    let widen = match (section.network == Network::Proxy, section.allow_unsandboxed) {
        (true, true) => {
            "report it, or ask a person with `sandbox_grant` for one host or one command run outside the sandbox"
        }
        (true, false) => "report it, or ask a person with `sandbox_grant` for one host",
        (false, true) => "report it, or ask a person with `sandbox_grant` to run one command outside the sandbox",
        (false, false) => "report it",
    };
    format!(
        "## Shell\n`execute` runs in a sandbox (an unprivileged user, its own namespaces, Landlock and seccomp): \
         only /workspace (the files the file tools see) and /tmp are writable, and in plan mode /workspace is read-only too; \
         system dirs read-only{extra}; host files, other users' work, the harness's data and secrets are not there; \
         network: {network}; at most {} processes. A denial is the sandbox's policy: do not work around it; {widen}.",
        limits.max_processes
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
    if network == Network::Proxy
        && (has(&["CONNECT tunnel failed, response 403", "403 Forbidden"])
            || has(&["Could not resolve host", "Network is unreachable"]))
    {
        return Some(
            "[sandbox] denied: the sandbox reaches only the hosts on its proxy allow-list ([sandbox] allow_hosts, network = \"proxy\"), through http(s)_proxy. Adding a host is the operator's decision, or a person's: ask with `sandbox_grant` (host), then retry.",
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Network, SandboxSection, denial_note, prompt_line};

    fn section(json: serde_json::Value) -> SandboxSection {
        serde_json::from_value(json).unwrap()
    }

    /// The prompt says what the section enforces, and nothing it does not.
    #[test]
    fn the_prompt_states_what_is_enforced() {
        let offline = prompt_line(&section(serde_json::json!({"kind": "namespace"})));
        assert!(offline.contains("network: offline"), "{offline}");
        assert!(offline.contains("in plan mode /workspace is read-only"), "{offline}");
        assert!(offline.contains("at most 512 processes"), "{offline}");
        assert!(!offline.contains("toolchain"), "{offline}");
        let proxy = prompt_line(&section(serde_json::json!({
            "kind": "namespace", "network": "proxy", "allow_hosts": ["pypi.org", "*.crates.io:443"],
            "read_only": ["/opt/x"], "limits": {"max_processes": 64}
        })));
        assert!(
            proxy.contains("network: only pypi.org, *.crates.io:443 through the harness's proxy"),
            "{proxy}"
        );
        assert!(proxy.contains("1 host toolchain dir(s) read-only"), "{proxy}");
        assert!(proxy.contains("at most 64 processes"), "{proxy}");
        assert!(proxy.contains("`sandbox_grant` for one host"), "{proxy}");
        assert!(!offline.contains("sandbox_grant"), "nothing to ask for: {offline}");
        let unsandboxed = prompt_line(&section(
            serde_json::json!({"kind": "namespace", "allow_unsandboxed": true}),
        ));
        assert!(
            unsandboxed.contains("`sandbox_grant` to run one command outside the sandbox"),
            "{unsandboxed}"
        );
        let empty = prompt_line(&section(serde_json::json!({"kind": "namespace", "network": "proxy"})));
        assert!(empty.contains("allow-list is empty: no host is reachable"), "{empty}");
        let full = prompt_line(&section(serde_json::json!({"kind": "namespace", "network": "full"})));
        assert!(full.contains("the host's network, unfiltered"), "{full}");
        for prompt in [offline, proxy, empty, full] {
            assert!(prompt.len() < 700, "{prompt}");
        }
    }

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
        assert!(
            denial_note("curl: (56) CONNECT tunnel failed, response 403", Network::Proxy)
                .is_some_and(|n| n.contains("[sandbox] allow_hosts"))
        );
        // A server of the sandbox's own loopback that is not up is not the proxy's doing.
        assert!(denial_note("curl: (7) Failed to connect: Connection refused", Network::Proxy).is_none());
        assert!(denial_note("exit 3", Network::Offline).is_none());
        assert!(denial_note("cat: /root/x: No such file or directory", Network::Offline).is_some());
        assert!(denial_note("cat: notes.txt: No such file or directory", Network::Offline).is_none());
    }
}
