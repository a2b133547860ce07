//! What the init applies to itself before it serves, inherited by everything it starts:
//! resource limits, Landlock (reads confined too) and a seccomp filter. Runs inside the
//! sandbox, as the sandbox uid, after bwrap has built the mount view.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The Landlock ABI whose filesystem rights are required (3: read, write, execute, refer,
/// truncate). Scopes (ABI 6: abstract Unix sockets and signals stay inside the sandbox) are
/// required too.
const FS_ABI: ABI = ABI::V3;

/// x32 system calls carry this bit in their number (same audit arch as x86-64).
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// What the init confines itself to. Built by the host, passed to the init as its argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Confinement {
    /// Directories readable and executable (recursively), inside the sandbox's view.
    pub(crate) read: Vec<String>,
    /// Directories with every right (recursively).
    pub(crate) write: Vec<String>,
    /// Single files readable and writable (device nodes such as `/dev/null`).
    pub(crate) files: Vec<String>,
    /// Single files readable and executable (the init binary, for its `unpack` mode: exec
    /// needs both rights).
    #[serde(default)]
    pub(crate) exec: Vec<String>,
    /// Resource limits.
    pub(crate) rlimits: Rlimits,
    /// Directories a read-only process ([`ExecSpec::read_only`](crate::protocol::ExecSpec))
    /// may still write (the private `/tmp`): everything else, the work tree included, is
    /// read-only for it, by a second Landlock layer the init adds before exec.
    #[serde(default)]
    pub(crate) read_only_write: Vec<String>,
    /// With `network = "proxy"`: the relay the init runs from a loopback port to the host's
    /// proxy socket.
    #[serde(default)]
    pub(crate) proxy: Option<ProxyRelay>,
}

/// The in-sandbox end of `network = "proxy"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProxyRelay {
    /// The loopback address the init listens on (`127.0.0.1:3128`).
    pub(crate) listen: String,
    /// The proxy's Unix socket inside the mount view.
    pub(crate) socket: String,
}

/// Hard and soft limits set with `setrlimit` (inherited by every process of the sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rlimits {
    /// `RLIMIT_NPROC`: processes of the sandbox uid (a dedicated uid makes this per sandbox).
    pub(crate) processes: Option<u64>,
    /// `RLIMIT_AS`: address space of each process.
    pub(crate) address_space: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file a process may write.
    pub(crate) file_size: Option<u64>,
    /// `RLIMIT_NOFILE`: open descriptors per process.
    pub(crate) open_files: Option<u64>,
    /// `RLIMIT_CORE` is always 0 (no core dumps in the work tree).
    pub(crate) core: u64,
}

/// What confinement achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Confined {
    pub(crate) landlock_abi: u8,
}

/// Applies limits, Landlock and seccomp to the calling (single-threaded) process.
///
/// # Errors
/// A message naming what could not be enforced; the init then refuses to serve.
pub(crate) fn apply(confinement: &Confinement) -> Result<Confined, String> {
    apply_rlimits(&confinement.rlimits)?;
    let landlock_abi = apply_landlock(confinement)?;
    apply_seccomp()?;
    Ok(Confined { landlock_abi })
}

fn apply_rlimits(limits: &Rlimits) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let set = |resource: Resource, name: &str, value: Option<u64>| -> Result<(), String> {
        let Some(value) = value else { return Ok(()) };
        setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
        .map_err(|err| format!("setrlimit {name} {value}: {err}"))
    };
    set(Resource::Nproc, "RLIMIT_NPROC", limits.processes)?;
    set(Resource::As, "RLIMIT_AS", limits.address_space)?;
    set(Resource::Fsize, "RLIMIT_FSIZE", limits.file_size)?;
    set(Resource::Nofile, "RLIMIT_NOFILE", limits.open_files)?;
    set(Resource::Core, "RLIMIT_CORE", Some(limits.core))
}

fn apply_landlock(confinement: &Confinement) -> Result<u8, String> {
    let fail = |what: &str, err: &dyn std::fmt::Display| format!("landlock {what}: {err}");
    let all = AccessFs::from_all(FS_ABI);
    let read = AccessFs::from_read(FS_ABI);
    let file = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|err| fail("handle filesystem access (needs ABI 3)", &err))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|err| fail("scopes (needs ABI 6)", &err))?
        .create()
        .map_err(|err| fail("create ruleset", &err))?;
    for (paths, access) in [
        (&confinement.read, read),
        (&confinement.write, all),
        (&confinement.files, file),
        (&confinement.exec, AccessFs::ReadFile | AccessFs::Execute),
    ] {
        for path in paths {
            let fd = PathFd::new(path).map_err(|err| fail(&format!("open {path}"), &err))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|err| fail(&format!("rule for {path}"), &err))?;
        }
    }
    let status = ruleset.restrict_self().map_err(|err| fail("restrict_self", &err))?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(format!("landlock not fully enforced: {status:?}"));
    }
    match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => Ok(effective_abi as u8),
        other => Err(format!("landlock unavailable: {other:?}")),
    }
}

/// The second Landlock layer of read-only processes, built once by the init: every write right
/// is handled, and granted only beneath `confinement.read_only_write` and on the device files.
/// Returned as the ruleset's descriptor (close-on-exec), for [`restrict_self_raw`] after fork.
///
/// # Errors
/// A message naming what could not be built.
pub(crate) fn read_only_layer(confinement: &Confinement) -> Result<rustix::fd::OwnedFd, String> {
    let fail = |what: &str, err: &dyn std::fmt::Display| format!("landlock read-only layer {what}: {err}");
    let write = AccessFs::from_write(FS_ABI);
    let file = AccessFs::WriteFile | AccessFs::Truncate;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(write)
        .map_err(|err| fail("handle write access", &err))?
        .create()
        .map_err(|err| fail("create", &err))?;
    for (paths, access) in [(&confinement.read_only_write, write), (&confinement.files, file)] {
        for path in paths {
            let fd = PathFd::new(path).map_err(|err| fail(&format!("open {path}"), &err))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|err| fail(&format!("rule for {path}"), &err))?;
        }
    }
    let fd: Option<rustix::fd::OwnedFd> = ruleset.into();
    fd.ok_or_else(|| "landlock read-only layer: no ruleset descriptor".to_owned())
}

/// `landlock_restrict_self(ruleset, 0)`: one raw system call, async-signal-safe, for a child
/// between fork and exec (`NoNewPrivs` is inherited from the init).
#[allow(unsafe_code)]
pub(crate) fn restrict_self_raw(ruleset: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: the call takes an integer descriptor and flags; it touches no memory of ours.
    let result = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// System calls no sandboxed process needs and every escape likes: debugging other processes,
/// mounts and namespaces, kernel keyrings, BPF, io_uring (which bypasses seccomp), perf, kernel
/// modules and kexec, and a few more. They fail with `EPERM`.
fn denied_syscalls() -> Vec<i64> {
    vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_bpf,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_perf_event_open,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_syslog,
        libc::SYS_lookup_dcookie,
        libc::SYS_vhangup,
    ]
}

fn condition(arg: u8, operator: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, operator, value).map_err(|err| format!("seccomp: {err}"))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|err| format!("seccomp: {err}"))
}

/// The `socket` rules: no packet, vsock or key sockets, no raw IP sockets, and netlink only for
/// routing (which sees the sandbox's own network namespace).
fn socket_rules() -> Result<Vec<SeccompRule>, String> {
    let family = |af: i32| condition(0, SeccompCmpOp::Eq, af as u64);
    let mut rules = Vec::new();
    for af in [libc::AF_PACKET, libc::AF_VSOCK, libc::AF_KEY] {
        rules.push(rule(vec![family(af)?])?);
    }
    rules.push(rule(vec![
        family(libc::AF_NETLINK)?,
        condition(2, SeccompCmpOp::Ne, libc::NETLINK_ROUTE as u64)?,
    ])?);
    for af in [libc::AF_INET, libc::AF_INET6] {
        rules.push(rule(vec![
            family(af)?,
            condition(1, SeccompCmpOp::MaskedEq(0xf), libc::SOCK_RAW as u64)?,
        ])?);
        // SOCK_PACKET (10), the obsolete packet interface on an IP socket.
        rules.push(rule(vec![family(af)?, condition(1, SeccompCmpOp::MaskedEq(0xf), 10)?])?);
    }
    Ok(rules)
}

/// Builds the two filters: the deny list (`EPERM`), and `clone3` → `ENOSYS` (its flags sit in
/// a struct BPF cannot read, so libc falls back to `clone`, whose flags the kernel checks
/// against the user namespace bwrap disabled).
pub(crate) fn seccomp_programs() -> Result<Vec<BpfProgram>, String> {
    let arch = TargetArch::x86_64;
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in denied_syscalls() {
        deny.insert(nr, Vec::new());
        // The same calls through the x32 ABI (absent on most kernels; denied in case).
        deny.insert(nr | X32_SYSCALL_BIT, Vec::new());
    }
    deny.insert(libc::SYS_socket, socket_rules()?);
    let deny = SeccompFilter::new(
        deny,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|err| format!("seccomp: {err}"))?;
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, Vec::new());
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|err| format!("seccomp: {err}"))?;
    [deny, clone3]
        .into_iter()
        .map(|filter| BpfProgram::try_from(filter).map_err(|err| format!("seccomp: {err}")))
        .collect()
}

fn apply_seccomp() -> Result<(), String> {
    for program in seccomp_programs()? {
        seccompiler::apply_filter(&program).map_err(|err| format!("seccomp install: {err}"))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_seccomp_filters_compile() {
        let programs = seccomp_programs().unwrap();
        assert_eq!(programs.len(), 2);
        assert!(programs.iter().all(|program| !program.is_empty()));
    }
}
