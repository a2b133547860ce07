//! `network = "proxy"`: the sandbox reaches allowed hosts through the harness's proxy only.
//! The allowed host here is a loopback test server on the host (named by address, which is the
//! only way to allow a non-public address); every other destination is refused with a 403 the
//! model can read, and recorded.

use crate::support::Fixture;
use harness_sandbox::{Network, ProxyPolicy};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A tiny HTTP server on host loopback: answers every request with `hello from the host`.
struct HostServer {
    port: u16,
    served: Arc<AtomicUsize>,
}

impl HostServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                let _ = reader.read_line(&mut request_line);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let body = format!("hello from the host: {}", request_line.trim());
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { port, served }
    }
}

async fn proxy_fixture(allow: &[String]) -> Fixture {
    let policy = ProxyPolicy::new(allow).unwrap();
    Fixture::with(
        move |mut config| {
            config.proxy = policy;
            config
        },
        Network::Proxy,
    )
    .await
}

#[tokio::test]
async fn an_allowed_loopback_server_is_reached_through_the_proxy_only() {
    let allowed = HostServer::start();
    let other = HostServer::start();
    let fixture = proxy_fixture(&[format!("127.0.0.1:{}", allowed.port), "allowed.test".to_owned()]).await;
    // curl through the configured proxy variables (--noproxy '' overrides NO_PROXY, which
    // keeps the sandbox's own loopback direct).
    let via_proxy = fixture
        .ok(&format!(
            "echo $https_proxy; curl -sS -m 10 --noproxy '' http://127.0.0.1:{}/plain",
            allowed.port
        ))
        .await;
    assert_eq!(
        via_proxy.stdout,
        "http://127.0.0.1:3128\nhello from the host: GET /plain HTTP/1.1"
    );
    // A CONNECT tunnel to the same server.
    let tunnel = fixture
        .ok(&format!(
            "python3 -c \"\nimport socket\ns = socket.create_connection(('127.0.0.1', 3128), 5)\ns.sendall(b'CONNECT 127.0.0.1:{0} HTTP/1.1\\r\\n\\r\\n')\nprint(s.recv(100).decode().splitlines()[0])\ns.sendall(b'GET /tunnel HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\nd = b''\nwhile True:\n    c = s.recv(4096)\n    if not c: break\n    d += c\nprint(d.decode().split('\\r\\n\\r\\n', 1)[1])\n\"",
            allowed.port
        ))
        .await;
    assert_eq!(
        tunnel.stdout,
        "HTTP/1.1 200 Connection established\nhello from the host: GET /tunnel HTTP/1.1\n"
    );
    assert_eq!(allowed.served.load(Ordering::SeqCst), 2);
    // Direct TCP to host loopback still fails: the sandbox has its own network namespace.
    let direct = fixture
        .sh(&format!(
            "curl -sS -m 5 --noproxy '*' http://127.0.0.1:{}/direct 2>&1; echo exit=$?",
            allowed.port
        ))
        .await;
    assert!(!direct.stdout.contains("hello"), "{direct:?}");
    assert!(direct.stdout.contains("exit=7"), "{direct:?}");
    // Another loopback port, localhost by name, and a host off the list: refused with a body
    // naming the host and the fix; nothing reached the other server.
    let refused = fixture
        .sh(&format!(
            "curl -sS -m 10 --noproxy '' http://127.0.0.1:{}/; echo; curl -sS -m 10 --noproxy '' http://localhost:{}/; echo; curl -sS -m 10 https://example.com/ 2>&1; echo exit=$?",
            other.port, allowed.port
        ))
        .await;
    assert!(
        refused
            .stdout
            .contains(&format!("refused a connection to 127.0.0.1:{}", other.port)),
        "{refused:?}"
    );
    assert!(
        refused
            .stdout
            .contains(&format!("adds \"127.0.0.1\" (or \"127.0.0.1:{}\")", other.port)),
        "{refused:?}"
    );
    assert!(
        refused
            .stdout
            .contains(&format!("refused a connection to localhost:{}", allowed.port)),
        "{refused:?}"
    );
    assert!(
        refused.stdout.contains("CONNECT tunnel failed, response 403"),
        "{refused:?}"
    );
    assert_eq!(other.served.load(Ordering::SeqCst), 0);
    assert_eq!(allowed.served.load(Ordering::SeqCst), 2);
    let denials = fixture.sandbox.network_denials();
    let hosts: Vec<(String, u16)> = denials
        .iter()
        .map(|denial| (denial.host.clone(), denial.port))
        .collect();
    assert_eq!(
        hosts,
        vec![
            ("127.0.0.1".to_owned(), other.port),
            ("localhost".to_owned(), allowed.port),
            ("example.com".to_owned(), 443),
        ]
    );
    fixture.stop().await;
}

#[tokio::test]
async fn an_allowed_name_that_resolves_to_loopback_is_refused() {
    let server = HostServer::start();
    // `localhost` is on the list by name, but it resolves to 127.0.0.1, which is not.
    let fixture = proxy_fixture(&["localhost".to_owned()]).await;
    let output = fixture
        .sh(&format!(
            "curl -sS -m 10 --noproxy '' http://localhost:{}/",
            server.port
        ))
        .await;
    assert!(output.stdout.contains("resolves to 127.0.0.1"), "{output:?}");
    assert!(
        output.stdout.contains(&format!("\"127.0.0.1:{}\"", server.port)),
        "{output:?}"
    );
    assert_eq!(server.served.load(Ordering::SeqCst), 0);
    fixture.stop().await;
}

#[tokio::test]
async fn an_empty_allow_list_refuses_everything_and_offline_has_no_proxy() {
    let fixture = proxy_fixture(&[]).await;
    let output = fixture.sh("curl -sS -m 10 http://pypi.org/simple/ 2>&1").await;
    assert!(
        output
            .stdout
            .contains("refused a connection to pypi.org:80: the host is not on this sandbox's network allow-list"),
        "{output:?}"
    );
    fixture.stop().await;
    let offline = Fixture::new().await;
    let output = offline
        .sh("echo proxy=$https_proxy; ls /.harness-proxy 2>&1; curl -sS -m 5 --noproxy '' -x http://127.0.0.1:3128 http://pypi.org/ 2>&1")
        .await;
    assert!(output.stdout.starts_with("proxy=\n"), "{output:?}");
    assert!(output.stdout.contains("No such file"), "{output:?}");
    assert!(
        output.stdout.contains("Failed to connect") || output.stdout.contains("Couldn't connect"),
        "{output:?}"
    );
    offline.stop().await;
}
