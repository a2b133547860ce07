//! The in-sandbox init (`harness-sandbox-init`), pid 1 of the sandbox's pid namespace.
//!
//! It closes every descriptor it inherited above stderr, makes itself non-dumpable (so no
//! sandboxed process can open `/proc/1/fd` and write to the harness's pipes), applies the
//! [`Confinement`](crate::confine::Confinement) to itself, reports what it proved in a hello
//! frame, and then serves: it starts processes on request (each in its own process group),
//! forwards their output, kills groups on request, and reaps every zombie of the namespace.
//! Processes started in one request keep running after it ends; they die with the init when
//! the harness closes the init's stdin or kills the sandbox.
//!
//! One thread polls the harness pipe, the process pipes and a pipe fed by a second thread that
//! blocks in `waitpid(-1)`; the second thread is started after confinement, so it inherits it.

use crate::confine::{self, Confinement, ProxyRelay};
use crate::protocol::{Decoder, ExecSpec, Exited, Failed, Frame, InitReport, Kind, PROTOCOL_VERSION, Started};
use rustix::event::{PollFd, PollFlags, poll};
use rustix::fd::{AsRawFd, OwnedFd};
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;

/// Bytes of one reaper record: pid, exit code (-1 none), signal (-1 none).
const REAP_RECORD: usize = 12;

/// Stack of a proxy relay thread (it only copies bytes).
const RELAY_STACK: usize = 64 * 1024;

/// The entry point of the `harness-sandbox-init` binary (and of the `harness` binary started
/// as `/.harness-init`). Not meant to be called otherwise: it closes descriptors and confines
/// the calling process for good. Started with the argument `unpack` (by the init itself,
/// inside the sandbox, so already confined and as the sandbox uid) it is the snapshot
/// unpacker instead ([`harness_snapshot::unpack_main`]).
pub fn init_main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "unpack") {
        return harness_snapshot::unpack_main();
    }
    close_inherited_descriptors();
    let mut report = InitReport {
        protocol: PROTOCOL_VERSION,
        pid: rustix::process::getpid().as_raw_nonzero().get(),
        uid: rustix::process::getuid().as_raw(),
        no_capabilities: false,
        no_new_privs: false,
        landlock_abi: 0,
        seccomp: false,
        error: None,
    };
    let mut read_only_layer = None;
    match confine_self() {
        Ok((abi, confinement)) => {
            report.landlock_abi = abi;
            report.seccomp = true;
            // Built after confinement: the layer and the relay threads are confined too.
            match confine::read_only_layer(&confinement) {
                Ok(layer) => read_only_layer = Some(layer),
                Err(message) => report.error = Some(message),
            }
            if let Some(relay) = &confinement.proxy
                && let Err(message) = start_relay(relay)
            {
                report.error = Some(message);
            }
        }
        Err(message) => report.error = Some(message),
    }
    report.no_capabilities = capabilities_are_empty();
    report.no_new_privs = rustix::thread::no_new_privs().unwrap_or(false);
    if report.error.is_none() && !(report.no_capabilities && report.no_new_privs) {
        report.error = Some("the init still holds capabilities or may gain privileges".to_owned());
    }
    let refused = report.error.is_some();
    if send(&Frame::json(Kind::Hello, 0, &report)).is_err() || refused {
        return ExitCode::FAILURE;
    }
    let Some(read_only_layer) = read_only_layer else {
        return ExitCode::FAILURE;
    };
    match serve(read_only_layer) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// Makes `command`'s process add the read-only Landlock layer `layer` to itself before exec.
#[allow(unsafe_code)]
fn restrict_before_exec(command: &mut Command, layer: std::os::fd::RawFd) {
    // SAFETY: the hook runs between fork and exec and makes one raw system call
    // (async-signal-safe); it allocates nothing and takes no lock. The descriptor stays open
    // in the init for its whole life.
    unsafe {
        command.pre_exec(move || confine::restrict_self_raw(layer));
    }
}

/// Listens on the relay's loopback address and joins every connection to the host's proxy
/// socket (two copying threads per connection; a thread that cannot start drops the
/// connection).
fn start_relay(relay: &ProxyRelay) -> Result<(), String> {
    let listener =
        std::net::TcpListener::bind(&relay.listen).map_err(|err| format!("proxy relay on {}: {err}", relay.listen))?;
    let socket = std::path::PathBuf::from(&relay.socket);
    std::thread::Builder::new()
        .name("proxy-relay".to_owned())
        .stack_size(RELAY_STACK)
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let socket = socket.clone();
                let _ = std::thread::Builder::new()
                    .stack_size(RELAY_STACK)
                    .spawn(move || relay_one(stream, &socket));
            }
        })
        .map(drop)
        .map_err(|err| format!("proxy relay thread: {err}"))
}

fn relay_one(client: std::net::TcpStream, socket: &std::path::Path) {
    use std::net::Shutdown;
    let Ok(proxy) = std::os::unix::net::UnixStream::connect(socket) else {
        return;
    };
    let (Ok(client_reader), Ok(proxy_writer)) = (client.try_clone(), proxy.try_clone()) else {
        return;
    };
    let upstream = std::thread::Builder::new().stack_size(RELAY_STACK).spawn(move || {
        let _ = std::io::copy(&mut &client_reader, &mut &proxy_writer);
        let _ = proxy_writer.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut &proxy, &mut &client);
    let _ = client.shutdown(Shutdown::Write);
    if let Ok(upstream) = upstream {
        let _ = upstream.join();
    }
}

#[allow(unsafe_code)]
fn close_inherited_descriptors() {
    // SAFETY: close_range takes integers only. It runs first thing in `main`, before this
    // process opened any descriptor of its own above 2, so nothing it closes is in use.
    let _ = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
}

fn confine_self() -> Result<(u8, Confinement), String> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|err| format!("prctl(PR_SET_DUMPABLE): {err}"))?;
    let argument = std::env::args()
        .nth(1)
        .ok_or_else(|| "missing confinement argument".to_owned())?;
    let confinement: Confinement =
        serde_json::from_str(&argument).map_err(|err| format!("bad confinement argument: {err}"))?;
    let confined = confine::apply(&confinement)?;
    Ok((confined.landlock_abi, confinement))
}

fn capabilities_are_empty() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| value.trim().chars().all(|ch| ch == '0'))
    };
    field("CapEff:") == Some(true) && field("CapPrm:") == Some(true) && field("CapAmb:") == Some(true)
}

fn send(frame: &Frame) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(&frame.encode())?;
    out.flush()
}

/// One process started on request.
struct Process {
    pid: i32,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    /// Bytes for the child's stdin not written yet (a queue: writing from its front is
    /// O(written), however much is waiting).
    pending_stdin: std::collections::VecDeque<u8>,
    close_stdin: bool,
}

/// What one poll slot watches.
#[derive(Clone, Copy)]
enum Slot {
    Host,
    Reaper,
    Stdout(u64),
    Stderr(u64),
    Stdin(u64),
    Detached(usize),
}

struct Server {
    processes: HashMap<u64, Process>,
    by_pid: HashMap<i32, u64>,
    /// Pipes of processes whose request ended while something (a background job) still holds
    /// them open: read and discarded, so those writers never block.
    detached: Vec<OwnedFd>,
    decoder: Decoder,
    wake_reaper: mpsc::Sender<()>,
    /// The Landlock layer of read-only processes (close-on-exec).
    read_only_layer: OwnedFd,
}

fn serve(read_only_layer: OwnedFd) -> std::io::Result<()> {
    let (reaped, reaper_pipe) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (wake_reaper, wake) = mpsc::channel();
    std::thread::spawn(move || reap(&reaper_pipe, &wake));
    rustix::io::ioctl_fionbio(rustix::stdio::stdin(), true)?;
    let mut server = Server {
        processes: HashMap::new(),
        by_pid: HashMap::new(),
        detached: Vec::new(),
        decoder: Decoder::default(),
        wake_reaper,
        read_only_layer,
    };
    let mut reap_buffer = Vec::new();
    let host = rustix::stdio::stdin();
    loop {
        let mut slots = vec![Slot::Host, Slot::Reaper];
        let mut fds = vec![PollFd::new(&host, PollFlags::IN), PollFd::new(&reaped, PollFlags::IN)];
        for (id, process) in &server.processes {
            if let Some(fd) = &process.stdout {
                slots.push(Slot::Stdout(*id));
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            if let Some(fd) = &process.stderr {
                slots.push(Slot::Stderr(*id));
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            if let Some(fd) = &process.stdin
                && (!process.pending_stdin.is_empty() || process.close_stdin)
            {
                slots.push(Slot::Stdin(*id));
                fds.push(PollFd::new(fd, PollFlags::OUT));
            }
        }
        for (index, fd) in server.detached.iter().enumerate() {
            slots.push(Slot::Detached(index));
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(err) => return Err(err.into()),
        }
        let ready: Vec<(Slot, PollFlags)> = slots
            .iter()
            .zip(fds.iter())
            .filter(|(_, fd)| !fd.revents().is_empty())
            .map(|(slot, fd)| (*slot, fd.revents()))
            .collect();
        drop(fds);
        let mut closed_detached = Vec::new();
        for (slot, _) in ready {
            match slot {
                Slot::Host => {
                    if !server.read_host()? {
                        return Ok(());
                    }
                }
                Slot::Reaper => server.read_reaper(&reaped, &mut reap_buffer)?,
                Slot::Stdout(id) => server.pump(id, Kind::Stdout)?,
                Slot::Stderr(id) => server.pump(id, Kind::Stderr)?,
                Slot::Stdin(id) => server.feed(id),
                Slot::Detached(index) => {
                    let mut sink = [0u8; 64 * 1024];
                    match rustix::io::read(&server.detached[index], &mut sink) {
                        Ok(0) => closed_detached.push(index),
                        Ok(_) | Err(Errno::AGAIN | Errno::INTR) => {}
                        Err(_) => closed_detached.push(index),
                    }
                }
            }
        }
        closed_detached.sort_unstable();
        for index in closed_detached.into_iter().rev() {
            server.detached.swap_remove(index);
        }
    }
}

/// The reaper thread: collects every child of pid 1 (ours and orphans) and reports each exit.
fn reap(pipe: &OwnedFd, wake: &mpsc::Receiver<()>) {
    loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) => {
                let mut record = [0u8; REAP_RECORD];
                record[..4].copy_from_slice(&pid.as_raw_nonzero().get().to_be_bytes());
                record[4..8].copy_from_slice(&status.exit_status().unwrap_or(-1).to_be_bytes());
                record[8..].copy_from_slice(&status.terminating_signal().unwrap_or(-1).to_be_bytes());
                if rustix::io::write(pipe, &record).is_err() {
                    return;
                }
            }
            Ok(None) | Err(Errno::INTR) => {}
            // No children: wait until one is started.
            Err(Errno::CHILD) => {
                if wake.recv().is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

impl Server {
    /// Reads what the host sent; `false` when the host closed the pipe (time to exit).
    fn read_host(&mut self) -> std::io::Result<bool> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match rustix::io::read(rustix::stdio::stdin(), &mut chunk) {
                Ok(0) => return Ok(false),
                Ok(read) => self.decoder.push(&chunk[..read]),
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => {}
                Err(err) => return Err(err.into()),
            }
        }
        while let Some(frame) = self.decoder.next_frame()? {
            self.handle(frame)?;
        }
        Ok(true)
    }

    fn handle(&mut self, frame: Frame) -> std::io::Result<()> {
        match frame.kind {
            Kind::Exec => {
                let spec: ExecSpec = frame.parse()?;
                match self.start(frame.id, &spec) {
                    Ok(pid) => send(&Frame::json(Kind::Started, frame.id, &Started { pid })),
                    Err(message) => send(&Frame::json(Kind::Failed, frame.id, &Failed { message })),
                }
            }
            Kind::Stdin => {
                if let Some(process) = self.processes.get_mut(&frame.id)
                    && process.stdin.is_some()
                {
                    process.pending_stdin.extend(frame.payload.iter().copied());
                    self.feed(frame.id);
                }
                Ok(())
            }
            Kind::CloseStdin => {
                if let Some(process) = self.processes.get_mut(&frame.id) {
                    process.close_stdin = true;
                    self.feed(frame.id);
                }
                Ok(())
            }
            Kind::Kill => {
                if let Some(process) = self.processes.get(&frame.id)
                    && let Some(pid) = Pid::from_raw(process.pid)
                {
                    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                }
                Ok(())
            }
            Kind::Hello | Kind::Started | Kind::Stdout | Kind::Stderr | Kind::Exited | Kind::Failed => Err(
                std::io::Error::new(std::io::ErrorKind::InvalidData, "the host sent an init-only frame"),
            ),
        }
    }

    fn start(&mut self, id: u64, spec: &ExecSpec) -> Result<i32, String> {
        if self.processes.contains_key(&id) {
            return Err(format!("request id {id} is already running"));
        }
        let Some((program, args)) = spec.argv.split_first() else {
            return Err("empty command".to_owned());
        };
        // A missing working directory is refused here, so spawning never fails after the fork
        // (std would then wait for the child, racing the reaper thread).
        match std::fs::metadata(&spec.cwd) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(format!("working directory {} is not a directory", spec.cwd)),
            Err(err) => return Err(format!("working directory {}: {err}", spec.cwd)),
        }
        // Always exec `/bin/sh` (which exists in every mount view): a missing program becomes
        // sh's exit 127, never an exec failure inside `spawn`. A shell command (`sh -c …`, what
        // `execute` sends) is that exec itself, one exec instead of two.
        let mut command = Command::new("/bin/sh");
        if program == "sh" && args.first().is_some_and(|arg| arg == "-c") {
            command.arg0("sh").args(args);
        } else {
            command
                .arg("-c")
                .arg("exec \"$@\"")
                .arg(program)
                .arg(program)
                .args(args);
        }
        command
            .env_clear()
            .envs(spec.env.iter().map(|(name, value)| (name, value)))
            .current_dir(&spec.cwd)
            .stdin(if spec.stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if spec.read_only {
            restrict_before_exec(&mut command, self.read_only_layer.as_raw_fd());
        }
        let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| command.spawn()));
        let mut child = match spawned {
            Ok(Ok(child)) => child,
            Ok(Err(err)) => return Err(format!("could not start {program}: {err}")),
            Err(_) => return Err(format!("could not start {program}")),
        };
        let _ = self.wake_reaper.send(());
        let pid = i32::try_from(child.id()).map_err(|_| "pid out of range".to_owned())?;
        let nonblocking = |fd: OwnedFd| {
            let _ = rustix::io::ioctl_fionbio(&fd, true);
            fd
        };
        let process = Process {
            pid,
            stdout: child.stdout.take().map(OwnedFd::from).map(nonblocking),
            stderr: child.stderr.take().map(OwnedFd::from).map(nonblocking),
            stdin: child.stdin.take().map(OwnedFd::from).map(nonblocking),
            pending_stdin: std::collections::VecDeque::new(),
            close_stdin: false,
        };
        // The child is reaped by the reaper thread, never through `child`.
        drop(child);
        self.processes.insert(id, process);
        self.by_pid.insert(pid, id);
        Ok(pid)
    }

    /// Forwards what a process's pipe holds now. At EOF the pipe is closed.
    fn pump(&mut self, id: u64, kind: Kind) -> std::io::Result<()> {
        let Some(process) = self.processes.get_mut(&id) else {
            return Ok(());
        };
        let pipe = if kind == Kind::Stdout {
            &mut process.stdout
        } else {
            &mut process.stderr
        };
        let mut chunk = [0u8; 64 * 1024];
        while let Some(fd) = pipe.as_ref() {
            match rustix::io::read(fd, &mut chunk) {
                Ok(0) => *pipe = None,
                Ok(read) => send(&Frame::new(kind, id, chunk[..read].to_vec()))?,
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => {}
                Err(_) => *pipe = None,
            }
        }
        Ok(())
    }

    /// Writes pending stdin bytes without blocking; closes stdin when asked and drained.
    fn feed(&mut self, id: u64) {
        let Some(process) = self.processes.get_mut(&id) else {
            return;
        };
        while let Some(fd) = process.stdin.as_ref() {
            if process.pending_stdin.is_empty() {
                if process.close_stdin {
                    process.stdin = None;
                }
                return;
            }
            match rustix::io::write(fd, process.pending_stdin.as_slices().0) {
                Ok(written) => {
                    process.pending_stdin.drain(..written);
                }
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR) => {}
                Err(_) => {
                    process.stdin = None;
                    process.pending_stdin.clear();
                }
            }
        }
    }

    fn read_reaper(&mut self, reaped: &OwnedFd, buffer: &mut Vec<u8>) -> std::io::Result<()> {
        let mut chunk = [0u8; REAP_RECORD * 64];
        let read = match rustix::io::read(reaped, &mut chunk) {
            Ok(read) => read,
            Err(Errno::INTR | Errno::AGAIN) => return Ok(()),
            Err(err) => return Err(err.into()),
        };
        buffer.extend_from_slice(&chunk[..read]);
        while buffer.len() >= REAP_RECORD {
            let record: Vec<u8> = buffer.drain(..REAP_RECORD).collect();
            let word = |at: usize| i32::from_be_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]]);
            let (pid, code, signal) = (word(0), word(4), word(8));
            let Some(id) = self.by_pid.remove(&pid) else {
                continue; // an orphan re-parented to us: reaped, nothing to report
            };
            // Everything the process wrote before it exited is in its pipes now: forward it,
            // then report the exit. What a background job writes later is discarded.
            self.pump(id, Kind::Stdout)?;
            self.pump(id, Kind::Stderr)?;
            if let Some(process) = self.processes.remove(&id) {
                self.detached.extend(process.stdout);
                self.detached.extend(process.stderr);
            }
            let exited = Exited {
                code: (code >= 0).then_some(code),
                signal: (signal >= 0).then_some(signal),
            };
            send(&Frame::json(Kind::Exited, id, &exited))?;
        }
        Ok(())
    }
}
