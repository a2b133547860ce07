//! `network = "proxy"`: the host side of a sandbox's only way out, an allow-list HTTP(S)
//! proxy served on a Unix socket that is bound into the sandbox (whose own network namespace
//! has nothing but loopback). Inside, the init relays `127.0.0.1:3128` to that socket and the
//! sandbox's environment points `http(s)_proxy` at it.
//!
//! It speaks `CONNECT host:port` (https and any other TCP) and absolute-form plain HTTP
//! (`GET http://host/path`). The decision, in order: the target names a host on the
//! [`ProxyPolicy`] (matched on the request target, never the `Host` header; case and a
//! trailing dot normalised), else refused; the proxy resolves the name itself and refuses an
//! address that is not public (loopback, private, link-local, CGNAT, multicast, …) unless the
//! policy names that address literally; it then dials the address it checked (no second
//! lookup, so no DNS rebinding). A refusal is a `403` whose status line and body name the host
//! and how to allow it — what the model sees — and is recorded as a [`NetworkDenial`].

use async_trait::async_trait;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

/// Where the init listens for the sandbox's proxy clients (inside the sandbox's own network
/// namespace).
pub const PROXY_LISTEN: &str = "127.0.0.1:3128";

/// Most bytes of a request head (request line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long dialing an allowed target may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Denials kept per sandbox (the oldest are dropped).
const MAX_DENIALS: usize = 256;
/// Connections one sandbox may have open through its proxy at once; more are answered `503`.
const MAX_CONNECTIONS: usize = 128;

/// Which hosts a sandbox with `network = "proxy"` may reach. Plain data; an empty policy
/// refuses everything.
///
/// Entries: `example.com` (that host), `*.example.com` (any host below it, not itself), either
/// with `:port` to allow one port only (otherwise every port), and IP literals (`10.0.0.7`,
/// `127.0.0.1:8080`, `[::1]:8080`). A host name that resolves to a loopback, private or other
/// non-public address is refused unless that address itself is an entry.
///
/// ```
/// let policy = harness_sandbox::ProxyPolicy::new(["pypi.org", "*.pythonhosted.org:443", "127.0.0.1:8080"]).unwrap();
/// assert!(policy.allows_name("PyPI.org.", 443));
/// assert!(policy.allows_name("files.pythonhosted.org", 443));
/// assert!(!policy.allows_name("files.pythonhosted.org", 80));
/// assert!(!policy.allows_name("evil.com", 443));
/// assert!(harness_sandbox::ProxyPolicy::new(["http://x"]).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyPolicy {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// One host name (normalised).
    Exact(String),
    /// Any name ending in `.suffix` (the suffix without its leading dot).
    Below(String),
    /// One address.
    Address(IpAddr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    pattern: Pattern,
    port: Option<u16>,
}

/// An allow-list entry that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "sandbox proxy allow-list entry {entry:?}: {reason}; write a host (`example.com`), a subdomain wildcard (`*.example.com`), or an IP address, each optionally with `:port`"
)]
pub struct ProxyPolicyError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl ProxyPolicy {
    /// A policy allowing `entries` (see the type's documentation for their form).
    ///
    /// # Errors
    /// [`ProxyPolicyError`] naming the first entry that is not a host, wildcard or address.
    pub fn new<I, S>(entries: I) -> Result<Self, ProxyPolicyError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let rules = entries
            .into_iter()
            .map(|entry| parse_rule(entry.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// Adds `entry` (a grant: one host a person approved) to the list.
    ///
    /// # Errors
    /// [`ProxyPolicyError`] when `entry` is not a host, wildcard or address.
    pub fn allow(&mut self, entry: &str) -> Result<(), ProxyPolicyError> {
        let rule = parse_rule(entry)?;
        if !self.rules.contains(&rule) {
            self.rules.push(rule);
        }
        Ok(())
    }

    /// Whether no entry is allowed.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the request target `host:port` is on the list by name (or literal address).
    /// Before dialing, the proxy also checks the addresses the name resolves to.
    pub fn allows_name(&self, host: &str, port: u16) -> bool {
        let Some(host) = normalise_host(host) else {
            return false;
        };
        let address = host.parse::<IpAddr>().ok().map(canonical_ip);
        self.rules.iter().any(|rule| {
            rule.port.is_none_or(|allowed| allowed == port)
                && match (&rule.pattern, address) {
                    (Pattern::Address(allowed), Some(address)) => *allowed == address,
                    (Pattern::Address(_), None) | (Pattern::Exact(_) | Pattern::Below(_), Some(_)) => false,
                    (Pattern::Exact(name), None) => *name == host,
                    (Pattern::Below(suffix), None) => host
                        .strip_suffix(suffix.as_str())
                        .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                }
        })
    }

    /// Whether `address` is named by an entry (so it may be dialed even when not public).
    fn allows_address(&self, address: IpAddr, port: u16) -> bool {
        let address = canonical_ip(address);
        self.rules
            .iter()
            .any(|rule| rule.port.is_none_or(|allowed| allowed == port) && rule.pattern == Pattern::Address(address))
    }
}

fn parse_rule(entry: &str) -> Result<Rule, ProxyPolicyError> {
    let fail = |reason| ProxyPolicyError {
        entry: entry.to_owned(),
        reason,
    };
    let trimmed = entry.trim();
    if trimmed.is_empty() {
        return Err(fail("it is empty"));
    }
    if trimmed.contains("://") || trimmed.contains('/') {
        return Err(fail("it is a URL or path, not a host"));
    }
    let (host, port) = split_host_port(trimmed).ok_or_else(|| fail("its port is not a number from 1 to 65535"))?;
    if let Ok(address) = host.parse::<IpAddr>() {
        return Ok(Rule {
            pattern: Pattern::Address(canonical_ip(address)),
            port,
        });
    }
    let (below, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    let name = normalise_host(name).ok_or_else(|| fail("it is not a valid ASCII host name"))?;
    if name.contains('*') || name.parse::<IpAddr>().is_ok() {
        return Err(fail("a wildcard may only be a leading `*.` before a host name"));
    }
    Ok(Rule {
        pattern: if below {
            Pattern::Below(name)
        } else {
            Pattern::Exact(name)
        },
        port,
    })
}

/// Splits `host[:port]`, `[v6]` or `[v6]:port`; `None` for a bad port.
fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(parse_port(after.strip_prefix(':')?)?))),
        };
    }
    // A bare IPv6 address has several colons and no port.
    if text.matches(':').count() > 1 {
        return Some((text, None));
    }
    match text.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(parse_port(port)?))),
        None => Some((text, None)),
    }
}

fn parse_port(text: &str) -> Option<u16> {
    text.parse::<u16>().ok().filter(|port| *port != 0)
}

/// Lower case, no trailing dot, no brackets; `None` for an empty or non-ASCII name or one with
/// characters no host name has.
fn normalise_host(host: &str) -> Option<String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_' | b':' | b'*'));
    valid.then_some(host)
}

/// IPv4-mapped IPv6 addresses compare (and are checked) as the IPv4 address they carry.
fn canonical_ip(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    }
}

/// Whether `address` is on the public internet: not loopback, private, link-local (cloud
/// metadata), CGNAT, multicast, broadcast, documentation, benchmarking or reserved.
pub(crate) fn is_public(address: IpAddr) -> bool {
    match canonical_ip(address) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    !(v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240)
}

fn is_public_v6(v6: Ipv6Addr) -> bool {
    let segments = v6.segments();
    // NAT64 (64:ff9b::/96) carries an IPv4 address.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [_, _, _, _, _, _, high, low] = segments;
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00 // unique local
        || (segments[0] & 0xffc0) == 0xfe80 // link-local
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation
        || v6.to_ipv4().is_some()) // IPv4-compatible ::a.b.c.d
}

/// A connection the proxy refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NetworkDenial {
    /// The host the sandbox asked for (as normalised), or the raw target when unreadable.
    pub host: String,
    /// The port it asked for (0 when unreadable).
    pub port: u16,
    /// Why it was refused.
    pub reason: String,
}

/// Why a target is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not on the allow-list.
    NotAllowed,
    /// The name resolves only to addresses that are not public.
    NotPublic(Vec<IpAddr>),
    /// The name does not resolve.
    Unresolved(String),
}

/// Name resolution, injectable for tests (which must never dial a private range).
#[async_trait]
pub(crate) trait Resolver: Send + Sync + 'static {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The system resolver (`getaddrinfo`).
pub(crate) struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// The address to dial for `host:port`, or why not.
pub(crate) async fn decide(
    policy: &ProxyPolicy,
    resolver: &dyn Resolver,
    host: &str,
    port: u16,
) -> Result<SocketAddr, Refusal> {
    if !policy.allows_name(host, port) {
        return Err(Refusal::NotAllowed);
    }
    let Some(name) = normalise_host(host) else {
        return Err(Refusal::NotAllowed);
    };
    let addresses = match name.parse::<IpAddr>() {
        Ok(address) => vec![SocketAddr::new(address, port)],
        Err(_) => resolver
            .resolve(&name, port)
            .await
            .map_err(|err| Refusal::Unresolved(err.to_string()))?,
    };
    if addresses.is_empty() {
        return Err(Refusal::Unresolved("no addresses".to_owned()));
    }
    addresses
        .iter()
        .find(|address| is_public(address.ip()) || policy.allows_address(address.ip(), port))
        .copied()
        .ok_or_else(|| Refusal::NotPublic(addresses.iter().map(SocketAddr::ip).collect()))
}

/// The response that refuses `host:port`: a `403` whose reason phrase and body say what was
/// refused and how to allow it.
pub(crate) fn refusal_response(host: &str, port: u16, refusal: &Refusal) -> Vec<u8> {
    let (phrase, body) = match refusal {
        Refusal::NotAllowed => (
            format!("Forbidden: {host} is not on the sandbox network allow-list"),
            format!(
                "The harness sandbox refused a connection to {host}:{port}: the host is not on this sandbox's network allow-list.\nTo allow it, an operator adds \"{host}\" (or \"{host}:{port}\") to the sandbox's proxy allow-list ([sandbox] allow_hosts), or a person approves a grant for this host (the sandbox_grant tool).\n"
            ),
        ),
        Refusal::NotPublic(addresses) => {
            let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
            let first = list.first().cloned().unwrap_or_default();
            (
                format!("Forbidden: {host} resolves to a non-public address"),
                format!(
                    "The harness sandbox refused a connection to {host}:{port}: it resolves to {} (loopback, private or otherwise non-public), which the sandbox may not reach by name.\nTo allow it, an operator adds the address itself (\"{first}:{port}\") to the sandbox's proxy allow-list ([sandbox] allow_hosts).\n",
                    list.join(", ")
                ),
            )
        }
        Refusal::Unresolved(detail) => (
            format!("Bad Gateway: {host} does not resolve"),
            format!("The harness sandbox proxy could not resolve {host}: {detail}.\n"),
        ),
    };
    let status = if matches!(refusal, Refusal::Unresolved(_)) {
        502
    } else {
        403
    };
    response(
        status,
        &phrase,
        &body,
        &[("X-Harness-Denial", format!("host={host}; port={port}"))],
    )
}

fn response(status: u16, phrase: &str, body: &str, headers: &[(&str, String)]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out.into_bytes()
}

fn bad_request(detail: &str) -> Vec<u8> {
    response(
        400,
        "Bad Request",
        &format!(
            "The harness sandbox proxy could not read the request: {detail}.\nSend `CONNECT host:port` (https) or an absolute URL (`GET http://host/path`); http_proxy and https_proxy are already set for this.\n"
        ),
        &[],
    )
}

/// A request head the proxy understood.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    connect: bool,
    host: String,
    port: u16,
    /// For plain HTTP: the head to send upstream (origin-form request line, hop-by-hop proxy
    /// headers removed).
    upstream_head: Vec<u8>,
}

/// Parses a request head (everything up to and including the blank line).
fn parse_head(head: &[u8]) -> Result<Target, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8".to_owned())?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("malformed request line {request_line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("unsupported protocol {version:?}"));
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(target).ok_or_else(|| format!("bad CONNECT target {target:?}"))?;
        let port = port.ok_or_else(|| format!("the CONNECT target {target:?} has no port"))?;
        let host = normalise_host(host).ok_or_else(|| format!("bad host in {target:?}"))?;
        return Ok(Target {
            connect: true,
            host,
            port,
            upstream_head: Vec::new(),
        });
    }
    let rest = target
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
        .ok_or_else(|| format!("{target:?} is not an absolute http:// URL (use CONNECT for https)"))?;
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err("credentials in the URL are not forwarded".to_owned());
    }
    let (host, port) = split_host_port(authority).ok_or_else(|| format!("bad authority {authority:?}"))?;
    let host = normalise_host(host).ok_or_else(|| format!("bad host in {target:?}"))?;
    let path = if path.is_empty() || path.starts_with('#') {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let mut upstream = format!("{method} {path} {version}\r\n");
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("proxy-connection") || name.eq_ignore_ascii_case("proxy-authorization") {
            continue;
        }
        upstream.push_str(line);
        upstream.push_str("\r\n");
    }
    // `lines` ends with the two empty strings after the final CRLF CRLF; keep exactly one
    // blank line.
    while upstream.ends_with("\r\n\r\n\r\n") {
        upstream.truncate(upstream.len() - 2);
    }
    Ok(Target {
        connect: false,
        host,
        port: port.unwrap_or(80),
        upstream_head: upstream.into_bytes(),
    })
}

/// One sandbox's proxy: a task serving its Unix socket.
pub(crate) struct ProxyServer {
    task: tokio::task::JoinHandle<()>,
    denials: Arc<Mutex<Vec<NetworkDenial>>>,
    /// The allow-list, widened by grants while the sandbox lives; each connection decides
    /// on the list as it is when its request head arrives.
    policy: Arc<std::sync::RwLock<ProxyPolicy>>,
}

impl ProxyServer {
    /// Serves `listener` with `policy` until [`stop`](Self::stop) or drop.
    pub(crate) fn start(listener: UnixListener, policy: ProxyPolicy) -> Self {
        Self::start_with(listener, policy, Arc::new(SystemResolver))
    }

    pub(crate) fn start_with(listener: UnixListener, policy: ProxyPolicy, resolver: Arc<dyn Resolver>) -> Self {
        let denials: Arc<Mutex<Vec<NetworkDenial>>> = Arc::default();
        let policy = Arc::new(std::sync::RwLock::new(policy));
        let shared_policy = policy.clone();
        let record = denials.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut stream, _)) = accepted else { continue };
                        let Ok(permit) = permits.clone().try_acquire_owned() else {
                            let body = format!("The harness sandbox proxy allows {MAX_CONNECTIONS} open connections per sandbox; close some and retry.\n");
                            connections.spawn(async move {
                                let _ = stream.write_all(&response(503, "Too Many Connections", &body, &[])).await;
                            });
                            continue;
                        };
                        let (policy, resolver, record) = (policy.clone(), resolver.clone(), record.clone());
                        connections.spawn(async move {
                            serve(stream, policy, resolver, record).await;
                            drop(permit);
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Self {
            task,
            denials,
            policy: shared_policy,
        }
    }

    /// Adds `entry` to this proxy's allow-list until the sandbox ends (a grant).
    ///
    /// # Errors
    /// [`ProxyPolicyError`] when `entry` is not a host, wildcard or address.
    pub(crate) fn allow(&self, entry: &str) -> Result<(), ProxyPolicyError> {
        self.policy
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .allow(entry)
    }

    /// The connections refused so far (the newest last).
    pub(crate) fn denials(&self) -> Vec<NetworkDenial> {
        self.denials.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Stops serving; open tunnels are cut (the task owns them).
    pub(crate) fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads the request head; returns it and any bytes read after it.
async fn read_head(stream: &mut UnixStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buffer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return Ok((buffer, rest));
        }
        if buffer.len() > MAX_HEAD {
            return Err(format!("the request head is longer than {MAX_HEAD} bytes"));
        }
        let read = stream.read(&mut chunk).await.map_err(|err| err.to_string())?;
        if read == 0 {
            return Err("the connection closed before the request head ended".to_owned());
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

async fn serve(
    mut stream: UnixStream,
    policy: Arc<std::sync::RwLock<ProxyPolicy>>,
    resolver: Arc<dyn Resolver>,
    denials: Arc<Mutex<Vec<NetworkDenial>>>,
) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        Ok(Err(detail)) => {
            let _ = stream.write_all(&bad_request(&detail)).await;
            return;
        }
        Err(_) => return,
    };
    let (head, early) = head;
    let target = match parse_head(&head) {
        Ok(target) => target,
        Err(detail) => {
            let _ = stream.write_all(&bad_request(&detail)).await;
            return;
        }
    };
    // A snapshot of the list (a grant made meanwhile applies to the next connection).
    let policy = policy.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let address = match decide(&policy, resolver.as_ref(), &target.host, target.port).await {
        Ok(address) => address,
        Err(refusal) => {
            let reason = match &refusal {
                Refusal::NotAllowed => "not on the allow-list".to_owned(),
                Refusal::NotPublic(addresses) => format!("resolves to non-public {addresses:?}"),
                Refusal::Unresolved(detail) => format!("does not resolve: {detail}"),
            };
            tracing::info!(host = %target.host, port = target.port, %reason, "sandbox proxy refused a connection");
            {
                let mut denials = denials.lock().unwrap_or_else(PoisonError::into_inner);
                if denials.len() >= MAX_DENIALS {
                    denials.remove(0);
                }
                denials.push(NetworkDenial {
                    host: target.host.clone(),
                    port: target.port,
                    reason,
                });
            }
            let _ = stream
                .write_all(&refusal_response(&target.host, target.port, &refusal))
                .await;
            return;
        }
    };
    let mut upstream = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(address)).await {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(err)) => {
            let body = format!(
                "The harness sandbox proxy could not connect to {}:{} ({address}): {err}.\n",
                target.host, target.port
            );
            let _ = stream.write_all(&response(502, "Bad Gateway", &body, &[])).await;
            return;
        }
        Err(_) => {
            let body = format!(
                "The harness sandbox proxy timed out connecting to {}:{} ({address}).\n",
                target.host, target.port
            );
            let _ = stream.write_all(&response(504, "Gateway Timeout", &body, &[])).await;
            return;
        }
    };
    if target.connect {
        if stream
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
    } else if upstream.write_all(&target.upstream_head).await.is_err() {
        return;
    }
    if !early.is_empty() && upstream.write_all(&early).await.is_err() {
        return;
    }
    // Whatever the client sends next goes to the host it was allowed to reach, and nowhere
    // else (a second request for another host on this connection reaches the same host).
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A resolver from a table; the tests never dial what it returns.
    struct Table(HashMap<&'static str, Vec<IpAddr>>);

    #[async_trait]
    impl Resolver for Table {
        async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
            self.0
                .get(host)
                .map(|addresses| addresses.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
                .ok_or_else(|| std::io::Error::other("unknown host"))
        }
    }

    fn table() -> Table {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        Table(HashMap::from([
            ("pypi.org", vec![ip("151.101.0.223")]),
            ("rebind.example", vec![ip("127.0.0.1")]),
            ("metadata.example", vec![ip("169.254.169.254")]),
            ("mixed.example", vec![ip("10.0.0.1"), ip("151.101.0.1")]),
            ("mapped.example", vec![ip("::ffff:192.168.1.1")]),
            ("localhost", vec![ip("127.0.0.1")]),
        ]))
    }

    #[tokio::test]
    async fn names_on_the_list_resolve_to_public_addresses_only() {
        let policy = ProxyPolicy::new([
            "pypi.org",
            "rebind.example",
            "metadata.example",
            "mixed.example",
            "mapped.example",
            "localhost",
        ])
        .unwrap();
        let resolver = table();
        assert_eq!(
            decide(&policy, &resolver, "PYPI.ORG.", 443).await,
            Ok("151.101.0.223:443".parse().unwrap())
        );
        for host in ["rebind.example", "metadata.example", "mapped.example", "localhost"] {
            assert!(
                matches!(decide(&policy, &resolver, host, 443).await, Err(Refusal::NotPublic(_))),
                "{host}"
            );
        }
        // The public address of a mixed answer is the one dialed.
        assert_eq!(
            decide(&policy, &resolver, "mixed.example", 80).await,
            Ok("151.101.0.1:80".parse().unwrap())
        );
        assert_eq!(
            decide(&policy, &resolver, "evil.example", 443).await,
            Err(Refusal::NotAllowed)
        );
    }

    #[tokio::test]
    async fn ip_literals_need_their_own_entry() {
        let resolver = table();
        let none = ProxyPolicy::new(["pypi.org"]).unwrap();
        for host in [
            "127.0.0.1",
            "[::1]",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "2130706433",
            "0x7f.1",
        ] {
            assert_eq!(
                decide(&none, &resolver, host, 8080).await,
                Err(Refusal::NotAllowed),
                "{host}"
            );
        }
        let loopback = ProxyPolicy::new(["127.0.0.1:8080"]).unwrap();
        assert_eq!(
            decide(&loopback, &resolver, "127.0.0.1", 8080).await,
            Ok("127.0.0.1:8080".parse().unwrap())
        );
        assert!(decide(&loopback, &resolver, "::ffff:127.0.0.1", 8080).await.is_ok());
        assert_eq!(
            decide(&loopback, &resolver, "127.0.0.1", 8081).await,
            Err(Refusal::NotAllowed)
        );
        // A name that resolves to the allowed address is still refused by name.
        assert_eq!(
            decide(&loopback, &resolver, "localhost", 8080).await,
            Err(Refusal::NotAllowed)
        );
        let both = ProxyPolicy::new(["localhost", "127.0.0.1"]).unwrap();
        assert!(decide(&both, &resolver, "localhost", 9).await.is_ok());
    }

    #[test]
    fn wildcards_match_below_the_name_only() {
        let policy = ProxyPolicy::new(["*.example.com"]).unwrap();
        assert!(policy.allows_name("a.example.com", 1));
        assert!(policy.allows_name("a.b.EXAMPLE.com.", 1));
        assert!(!policy.allows_name("example.com", 1));
        assert!(!policy.allows_name("badexample.com", 1));
        assert!(!policy.allows_name("example.com.evil", 1));
        let exact = ProxyPolicy::new(["example.com"]).unwrap();
        assert!(!exact.allows_name("example.com.evil.net", 443));
        assert!(!exact.allows_name("sub.example.com", 443));
        assert!(!exact.allows_name("exämple.com", 443));
    }

    #[test]
    fn bad_entries_are_named() {
        for bad in [
            "",
            "http://x.com",
            "x.com/path",
            "x.com:0",
            "x.com:99999",
            "*x.com",
            "a.*.com",
            "exämple.com",
        ] {
            let err = ProxyPolicy::new([bad]).unwrap_err();
            assert_eq!(err.entry, bad);
            assert!(err.to_string().contains("optionally with `:port`"), "{err}");
        }
    }

    #[test]
    fn public_addresses() {
        for public in ["151.101.0.223", "8.8.8.8", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "::127.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
    }

    #[test]
    fn request_heads() {
        let connect = parse_head(b"CONNECT Pypi.org.:443 HTTP/1.1\r\nHost: evil.com:443\r\n\r\n").unwrap();
        assert_eq!(
            (connect.connect, connect.host.as_str(), connect.port),
            (true, "pypi.org", 443)
        );
        let get = parse_head(
            b"GET http://example.com:8080/a?b HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: x\r\n\r\n",
        )
        .unwrap();
        assert_eq!((get.host.as_str(), get.port), ("example.com", 8080));
        assert_eq!(
            String::from_utf8(get.upstream_head).unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\n\r\n"
        );
        let bare = parse_head(b"GET http://example.com HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(
            (bare.port, String::from_utf8(bare.upstream_head).unwrap().as_str()),
            (80, "GET / HTTP/1.0\r\n\r\n")
        );
        for bad in [
            &b"GET /local HTTP/1.1\r\n\r\n"[..],
            b"GET https://x.com/ HTTP/1.1\r\n\r\n",
            b"CONNECT x.com HTTP/1.1\r\n\r\n",
            b"GET http://user:pw@x.com/ HTTP/1.1\r\n\r\n",
            b"GET http://x.com/ SPDY/3\r\n\r\n",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn refusals_name_the_host_and_the_fix() {
        let text = String::from_utf8(refusal_response("evil.example", 443, &Refusal::NotAllowed)).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 Forbidden: evil.example is not on the sandbox network allow-list\r\n"));
        assert!(text.contains("adds \"evil.example\""), "{text}");
        let text = String::from_utf8(refusal_response(
            "rebind.example",
            80,
            &Refusal::NotPublic(vec!["127.0.0.1".parse().unwrap()]),
        ))
        .unwrap();
        assert!(text.contains("\"127.0.0.1:80\""), "{text}");
    }
}
