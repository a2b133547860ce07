//! The escape corpus (`tests/escape/<group>/<case>.sh`): every script attacks the sandbox as a
//! model's command would, and prints `ESCAPED` when an attack works. Around it the test keeps
//! canaries on the host — a file that must not change, a secret (a file, and the environment of
//! a host process) that must not be read, a pathname socket, an abstract socket, and loopback
//! TCP and UDP listeners that must not be reached, a host process that must not get a signal,
//! another sandbox's work tree and a protected data directory that must not change, and a
//! descriptor leaked into the sandbox on purpose — and checks all of them after the corpus.

use crate::support::{Fixture, Scratch, config, processes_of};
use harness_fs::ShellRequest;
use harness_sandbox::{CreateRequest, Limits, NamespaceProvider, Network, ProxyPolicy, SandboxProvider};
use std::io::{ErrorKind, Read};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn corpus() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/escape");
    let mut cases = Vec::new();
    for group in std::fs::read_dir(&root).unwrap() {
        let group = group.unwrap().path();
        for case in std::fs::read_dir(&group).unwrap() {
            let case = case.unwrap().path();
            let name = case.strip_prefix(&root).unwrap().display().to_string();
            cases.push((name, std::fs::read_to_string(&case).unwrap()));
        }
    }
    cases.sort();
    cases
}

struct Canaries {
    _scratch: Scratch,
    canary: PathBuf,
    secret_file: PathBuf,
    secret: String,
    data: PathBuf,
    tmp_marker: PathBuf,
    unix: UnixListener,
    abstract_socket: UnixListener,
    abstract_name: String,
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    host_process: std::process::Child,
    leaked: rustix::fd::OwnedFd,
}

impl Canaries {
    fn new() -> Self {
        let scratch = Scratch::new();
        let host = scratch.join("host");
        std::fs::create_dir(&host).unwrap();
        let canary = host.join("canary.txt");
        std::fs::write(&canary, "canary\n").unwrap();
        let secret = format!("sk-escape-{}-{}", std::process::id(), rand_suffix());
        let secret_file = host.join("secret.txt");
        std::fs::write(&secret_file, &secret).unwrap();
        let data = scratch.join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("agent_state.json"), "{\"state\":1}\n").unwrap();
        // Unique per run: the offline and the proxy corpus run at once in this process.
        static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = format!(
            "{}-{}",
            std::process::id(),
            RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let tmp_marker = PathBuf::from(format!("/tmp/hsbx-marker-{run}"));
        std::fs::write(&tmp_marker, "host tmp\n").unwrap();
        let unix = UnixListener::bind(host.join("canary.sock")).unwrap();
        unix.set_nonblocking(true).unwrap();
        let abstract_name = format!("harness-canary-{run}");
        let abstract_socket =
            UnixListener::bind_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap()).unwrap();
        abstract_socket.set_nonblocking(true).unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        // The stand-in for the harness process's secrets: a host process with the secret in its
        // environment (what /proc/<pid>/environ shows), which must also never get a signal.
        let host_process = std::process::Command::new("sleep")
            .arg("1000")
            .env("OPENAI_API_KEY", &secret)
            .spawn()
            .unwrap();
        // A descriptor without close-on-exec, open for writing on the canary file: it must not
        // be usable inside the sandbox.
        let leaked = rustix::fs::open(
            &canary,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::APPEND,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        Self {
            _scratch: scratch,
            canary,
            secret_file,
            secret,
            data,
            tmp_marker,
            unix,
            abstract_socket,
            abstract_name,
            tcp,
            udp,
            host_process,
            leaked,
        }
    }

    fn env(&self, other_work: &Path) -> Vec<(String, String)> {
        [
            ("CANARY_FILE", self.canary.display().to_string()),
            ("SECRET_FILE", self.secret_file.display().to_string()),
            ("DATA_DIR", self.data.display().to_string()),
            (
                "HOST_TMP_MARKER",
                self.tmp_marker.file_name().unwrap().to_string_lossy().into_owned(),
            ),
            (
                "HOST_SOCKET",
                self._scratch.join("host/canary.sock").display().to_string(),
            ),
            ("ABSTRACT_NAME", self.abstract_name.clone()),
            ("TCP_PORT", self.tcp.local_addr().unwrap().port().to_string()),
            ("UDP_PORT", self.udp.local_addr().unwrap().port().to_string()),
            ("HOST_PID", self.host_process.id().to_string()),
            ("HARNESS_PID", std::process::id().to_string()),
            ("OTHER_WORK", other_work.display().to_string()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
    }

    /// Every canary still as it was.
    fn check(&mut self) -> Vec<String> {
        let mut broken = Vec::new();
        if std::fs::read_to_string(&self.canary).unwrap() != "canary\n" {
            broken.push("host canary file changed".to_owned());
        }
        if std::fs::read_to_string(self.data.join("agent_state.json")).unwrap() != "{\"state\":1}\n" {
            broken.push("protected data dir changed".to_owned());
        }
        if !matches!(self.unix.accept(), Err(ref err) if err.kind() == ErrorKind::WouldBlock) {
            broken.push("host unix socket reached".to_owned());
        }
        if !matches!(self.abstract_socket.accept(), Err(ref err) if err.kind() == ErrorKind::WouldBlock) {
            broken.push("host abstract socket reached".to_owned());
        }
        if !matches!(self.tcp.accept(), Err(ref err) if err.kind() == ErrorKind::WouldBlock) {
            broken.push("host loopback TCP listener reached".to_owned());
        }
        let mut buffer = [0u8; 64];
        if !matches!(self.udp.recv(&mut buffer), Err(ref err) if err.kind() == ErrorKind::WouldBlock) {
            broken.push("host loopback UDP socket reached".to_owned());
        }
        if self.host_process.try_wait().unwrap().is_some() {
            broken.push("host process got a signal".to_owned());
        }
        let _ = &self.leaked;
        broken
    }
}

impl Drop for Canaries {
    fn drop(&mut self) {
        let _ = self.host_process.kill();
        let _ = self.host_process.wait();
        let _ = std::fs::remove_file(&self.tmp_marker);
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        .into()
}

/// Names a sandboxed command may find in its environment.
const ALLOWED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "PWD",
    "SHLVL",
    "_",
    "OLDPWD",
    "IFS",
    "PS1",
    "PS2",
    "PS4",
    "PPID",
    "OPTIND",
];

/// Names a proxy-mode sandbox adds (all pointing at its in-sandbox relay).
const PROXY_ENV: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "npm_config_proxy",
    "npm_config_https_proxy",
    "CARGO_HTTP_PROXY",
    "no_proxy",
    "NO_PROXY",
];

#[tokio::test]
async fn the_escape_corpus_breaks_no_canary() {
    run_corpus(Network::Offline).await;
}

/// The same corpus with `network = "proxy"` and an allow-list that names neither the host's
/// loopback canaries nor anything the scripts try.
#[tokio::test]
async fn the_escape_corpus_breaks_no_canary_in_proxy_mode() {
    run_corpus(Network::Proxy).await;
}

async fn run_corpus(network: Network) {
    let mut canaries = Canaries::new();
    let fixture = Fixture::with(
        |mut config| {
            config.limits.tmp_bytes = 32 << 20;
            config.proxy = ProxyPolicy::new(["allowed.test", "*.allowed.test:443"]).unwrap();
            config
        },
        network,
    )
    .await;
    let other = fixture
        .provider
        .create(CreateRequest::new(fixture.scratch.join("other"), "tests", "test/other"))
        .await
        .unwrap();
    std::fs::write(other.state().work_tree.join("private.txt"), "private\n").unwrap();
    let env = canaries.env(&other.state().work_tree);
    let shell = fixture.sandbox.shell();
    let cases = corpus();
    assert!(cases.len() >= 60, "the corpus has {} cases", cases.len());
    let mut failures = Vec::new();
    for (name, script) in &cases {
        let mut request = ShellRequest::new(script.clone()).timeout(Duration::from_secs(60));
        for (key, value) in &env {
            request = request.env(key, value);
        }
        let output = shell.execute(request).await.unwrap();
        let text = format!("{}{}", output.stdout, output.stderr);
        if text.contains("ESCAPED") {
            failures.push(format!("{name}: ESCAPED\n{text}"));
        }
        if text.contains(&canaries.secret) {
            failures.push(format!("{name}: read the secret\n{text}"));
        }
        if output.timed_out {
            failures.push(format!("{name}: timed out"));
        }
        // In proxy mode the proxy scripts must have met the proxy (and its refusal), else they
        // proved nothing.
        if network == Network::Proxy && name.starts_with("network/proxy_") && !text.contains("403") {
            failures.push(format!("{name}: the proxy did not answer\n{text}"));
        }
        if name == "filesystem/environment.sh" {
            for line in output.stdout.lines().filter(|line| !line.starts_with(' ')) {
                let Some((variable, _)) = line.split_once('=') else {
                    continue;
                };
                let passed = env.iter().any(|(key, _)| key == variable);
                let proxy = network == Network::Proxy && PROXY_ENV.contains(&variable);
                if !passed && !proxy && !ALLOWED_ENV.contains(&variable) {
                    failures.push(format!("{name}: unexpected variable {variable} in the sandbox"));
                }
            }
        }
        for broken in canaries.check() {
            failures.push(format!("{name}: {broken}"));
        }
    }
    assert_eq!(
        std::fs::read_to_string(other.state().work_tree.join("private.txt")).unwrap(),
        "private\n"
    );
    // After `kill -9 -1` and the rest, the sandbox still serves.
    assert_eq!(fixture.ok("echo alive").await.stdout, "alive\n");
    other.shutdown().await.unwrap();
    fixture.stop().await;
    assert!(
        failures.is_empty(),
        "{} escapes:\n{}",
        failures.len(),
        failures.join("\n---\n")
    );
}

#[tokio::test]
async fn a_fork_bomb_hits_the_process_limit_and_the_host_is_unaffected() {
    let fixture = Fixture::with(
        |mut config| {
            config.limits.max_processes = 40;
            config
        },
        Network::Offline,
    )
    .await;
    let uid = fixture.sandbox.state().uid;
    let output = fixture
        .sh("python3 -c \"\nimport os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('stopped after', n, e.errno)\n\"")
        .await;
    let count: u32 = output
        .stdout
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{output:?}"));
    assert!(count < 40, "{output:?}");
    assert!(processes_of(uid) <= 40);
    fixture.sandbox.shutdown().await.unwrap();
    assert_eq!(processes_of(uid), 0);
}

#[tokio::test]
async fn memory_and_file_size_limits_hold() {
    let fixture = Fixture::with(
        |mut config| {
            config.limits = Limits {
                max_process_memory: Some(512 << 20),
                max_file_bytes: Some(1 << 20),
                ..Limits::default()
            };
            config
        },
        Network::Offline,
    )
    .await;
    let balloon = fixture
        .sh("python3 -c \"b = bytearray(1 << 30); print('ESCAPED', len(b))\"")
        .await;
    assert!(
        !balloon.stdout.contains("ESCAPED") && balloon.stderr.contains("MemoryError"),
        "{balloon:?}"
    );
    let big = fixture
        .sh("dd if=/dev/zero of=big bs=1M count=4 2>&1; stat -c %s big")
        .await;
    assert!(big.stdout.trim_end().ends_with("1048576"), "{big:?}");
    fixture.stop().await;
}

#[tokio::test]
async fn full_network_is_the_hosts_and_offline_is_not() {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let probe = format!(
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), 2); print('connected')\" 2>&1"
    );
    let full = Fixture::with(|config| config, Network::Full).await;
    assert_eq!(full.sh(&probe).await.stdout.trim(), "connected");
    full.stop().await;
    let offline = Fixture::new().await;
    assert!(offline.sh(&probe).await.stdout.contains("refused"));
    offline.stop().await;
    let mut accepted = 0;
    tcp.set_nonblocking(true).unwrap();
    while tcp.accept().is_ok() {
        accepted += 1;
    }
    assert_eq!(accepted, 1, "only the full-network sandbox reached the host");
    let _ = NamespaceProvider::new(config(&Scratch::new())).name();
    let mut sink = Vec::new();
    let _ = std::io::empty().read_to_end(&mut sink);
}
