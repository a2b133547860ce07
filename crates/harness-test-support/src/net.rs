//! Loopback listeners for tests. A server under test is handed a listener that is already
//! bound (or binds port 0 itself and reports the port it got): a test never picks a free port,
//! closes it and hands the number on, which races with every other process on the machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An `http://` URL on loopback where nothing listens: port 1 is privileged and unused on the
/// test machine, so a connection is refused at once (no port is freed and hoped for).
pub const REFUSED_URL: &str = "http://127.0.0.1:1";

/// A listener bound to `127.0.0.1:0`, for a server that takes a bound listener.
///
/// # Panics
/// When loopback cannot be bound.
pub async fn loopback() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|err| panic!("binding 127.0.0.1:0: {err}"))
}

/// A loopback listener that accepts connections, counts them and answers none: the URL
/// (`http://127.0.0.1:PORT`) and the count. Lives as long as the runtime it was started on.
///
/// # Panics
/// When loopback cannot be bound.
pub async fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = loopback().await;
    let url = match listener.local_addr() {
        Ok(addr) => format!("http://{addr}"),
        Err(err) => panic!("the address of a bound listener: {err}"),
    };
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    tokio::spawn(async move {
        while let Ok((_stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    (url, hits)
}

/// A loopback listener on a thread of its own that accepts connections, holds them open and
/// never answers (a provider that hangs): the URL (`http://127.0.0.1:PORT`) and the count of
/// connections accepted. Works without a runtime; the thread ends with the test process.
///
/// # Panics
/// When loopback cannot be bound.
pub fn holding_listener() -> (String, Arc<AtomicUsize>) {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|err| panic!("binding 127.0.0.1:0: {err}"));
    let url = match listener.local_addr() {
        Ok(addr) => format!("http://{addr}"),
        Err(err) => panic!("the address of a bound listener: {err}"),
    };
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (url, accepted)
}
