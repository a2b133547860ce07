//! The accept loop: HTTP/1.1 connections with a header read timeout, an idle keep-alive
//! timeout and a cap on open connections. At the cap, the oldest connection that is not
//! running a request (one still sending its request, or idle between requests) is closed to
//! make room for the new one; a connection whose request is being answered (an SSE stream,
//! a turn) is never closed for another. No per-peer cap: behind a proxy or on loopback
//! every client shares one address.

use axum::Router;
use axum::body::Body;
use futures::StreamExt;
use harness_core::CancellationToken;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

/// The connection limits (from `[serve]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_connections: usize,
}

struct Entry {
    /// Requests of the connection being answered (until their response body ends).
    active: Arc<AtomicUsize>,
    evict: CancellationToken,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Registry {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

impl Registry {
    /// Registers a connection; at `cap` closes the oldest one not answering a request.
    /// `None` when every open connection is answering one (the new one is refused).
    fn admit(&mut self, cap: usize) -> Option<(u64, Arc<AtomicUsize>, CancellationToken)> {
        if self.open.len() >= cap {
            let oldest = self
                .open
                .iter()
                .find(|(_, entry)| entry.active.load(Ordering::SeqCst) == 0)
                .map(|(id, _)| *id)?;
            if let Some(entry) = self.open.remove(&oldest) {
                entry.evict.cancel();
            }
        }
        let id = self.next;
        self.next += 1;
        let active = Arc::new(AtomicUsize::new(0));
        let evict = CancellationToken::new();
        self.open.insert(
            id,
            Entry {
                active: Arc::clone(&active),
                evict: evict.clone(),
            },
        );
        Some((id, active, evict))
    }
}

/// Counts a request as active until dropped (when its response body ends or is dropped).
struct ActiveGuard {
    active: Arc<AtomicUsize>,
    changed: Arc<Notify>,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
        self.changed.notify_one();
    }
}

/// Accepts connections until `stopping` fires, then lets open connections finish their
/// requests (graceful shutdown) and returns.
///
/// # Errors
/// The listener's error when accepting fails for a reason other than running out of
/// descriptors (which is logged and retried).
pub(crate) async fn run(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    stopping: CancellationToken,
) -> std::io::Result<()> {
    let registry = Arc::new(Mutex::new(Registry::default()));
    let tracker = TaskTracker::new();
    let result = loop {
        let accepted = tokio::select! {
            () = stopping.cancelled() => break Ok(()),
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(err) if is_transient(&err) => {
                tracing::warn!(error = %err, "accepting a connection failed; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(err) => break Err(err),
        };
        let admitted = registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(limits.max_connections.max(1));
        let Some((id, active, evict)) = admitted else {
            tracing::warn!(%peer, cap = limits.max_connections, "refused a connection: every open connection is answering a request ([serve] max_connections)");
            drop(stream);
            continue;
        };
        let registry = Arc::clone(&registry);
        let router = router.clone();
        let stopping = stopping.clone();
        tracker.spawn(async move {
            serve_connection(stream, router, limits, active, evict, stopping).await;
            registry.lock().unwrap_or_else(PoisonError::into_inner).open.remove(&id);
        });
    };
    tracker.close();
    tracker.wait().await;
    result
}

/// Errors after which accepting goes on: out of descriptors, a connection reset before it
/// was accepted.
fn is_transient(err: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        err.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted | ErrorKind::WouldBlock
    ) || matches!(err.raw_os_error(), Some(23 | 24 | 105 | 12))
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    router: Router,
    limits: Limits,
    active: Arc<AtomicUsize>,
    evict: CancellationToken,
    stopping: CancellationToken,
) {
    let changed = Arc::new(Notify::new());
    let service = {
        let active = Arc::clone(&active);
        let changed = Arc::clone(&changed);
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            active.fetch_add(1, Ordering::SeqCst);
            changed.notify_one();
            let guard = ActiveGuard {
                active: Arc::clone(&active),
                changed: Arc::clone(&changed),
            };
            let router = router.clone();
            async move {
                let response = tower::ServiceExt::oneshot(router, request).await?;
                // The request stays active until its body (an SSE stream) ends.
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::from_stream(body.into_data_stream().map(move |chunk| {
                        let _ = &guard;
                        chunk
                    }))
                }))
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let mut closing = false;
    loop {
        let idle = active.load(Ordering::SeqCst) == 0;
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "connection ended with an error");
                }
                return;
            }
            () = evict.cancelled() => {
                tracing::debug!("closing the oldest waiting connection for a new one ([serve] max_connections)");
                return;
            }
            () = stopping.cancelled(), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            () = changed.notified() => {}
            () = tokio::time::sleep(limits.idle_timeout), if idle && !closing => {
                // Idle (or still sending a request past its timeouts): close it.
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_waiting_connection_makes_room() {
        let mut registry = Registry::default();
        let (first, first_active, first_evict) = registry.admit(2).unwrap();
        let (_, _, second_evict) = registry.admit(2).unwrap();
        // The first one answers a request: the second (waiting) one goes.
        first_active.store(1, Ordering::SeqCst);
        assert!(registry.admit(2).is_some());
        assert!(second_evict.is_cancelled());
        assert!(!first_evict.is_cancelled());
        assert!(registry.open.contains_key(&first));
        // Once it is waiting too, it is the oldest and goes next.
        first_active.store(0, Ordering::SeqCst);
        assert!(registry.admit(2).is_some());
        assert!(first_evict.is_cancelled());
    }

    #[test]
    fn when_every_connection_answers_a_request_a_new_one_is_refused() {
        let mut registry = Registry::default();
        let (_, active, evict) = registry.admit(1).unwrap();
        active.store(1, Ordering::SeqCst);
        assert!(registry.admit(1).is_none());
        assert!(!evict.is_cancelled());
    }
}
