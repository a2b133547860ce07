//! The harness's end of the init's pipes: one writer task (frames to the init's stdin) and one
//! reader task (frames from its stdout, routed to the process they belong to).

use crate::protocol::{Decoder, ExecSpec, Exited, Failed, Frame, Kind, Started};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Frames queued for one process before the reader waits for its consumer.
const PROCESS_QUEUE: usize = 256;
/// Frames queued for the init before a sender waits.
const WRITE_QUEUE: usize = 256;

/// What the init reported about one process.
#[derive(Debug)]
pub(crate) enum Event {
    Started(Started),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exited(Exited),
    Failed(Failed),
}

type Routes = Arc<Mutex<HashMap<u64, mpsc::Sender<Event>>>>;

/// A live connection to an init.
pub(crate) struct Connection {
    writer: mpsc::Sender<Vec<u8>>,
    routes: Routes,
    next_id: AtomicU64,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Cancelled when the init's stdout closed (the sandbox is gone).
    closed: tokio_util::sync::CancellationToken,
}

impl Connection {
    /// Takes over the init's pipes; `first` is the decoder holding anything read after the
    /// hello frame.
    pub(crate) fn new(stdin: ChildStdin, stdout: ChildStdout, decoder: Decoder) -> Self {
        let (writer, mut queue) = mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
        let routes: Routes = Arc::default();
        let closed = tokio_util::sync::CancellationToken::new();
        let write_task = tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(bytes) = queue.recv().await {
                if stdin.write_all(&bytes).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            // Dropping stdin closes the init's command pipe: the init exits.
        });
        let read_task = tokio::spawn(read_loop(stdout, decoder, routes.clone(), closed.clone()));
        Self {
            writer,
            routes,
            next_id: AtomicU64::new(1),
            tasks: Mutex::new(vec![write_task, read_task]),
            closed,
        }
    }

    /// Whether the init is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.writer.is_closed()
    }

    /// Starts a process; its events arrive on the returned receiver.
    pub(crate) async fn exec(&self, spec: &ExecSpec) -> Option<(u64, mpsc::Receiver<Event>)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, receiver) = mpsc::channel(PROCESS_QUEUE);
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, events);
        if self.is_closed() || !self.send(Frame::json(Kind::Exec, id, spec)).await {
            self.routes.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
            return None;
        }
        Some((id, receiver))
    }

    /// Sends a frame; `false` when the init is gone.
    pub(crate) async fn send(&self, frame: Frame) -> bool {
        self.writer.send(frame.encode()).await.is_ok()
    }

    /// A sender for stdin frames of a process.
    pub(crate) fn writer(&self) -> mpsc::Sender<Vec<u8>> {
        self.writer.clone()
    }

    /// Stops both tasks (the init's stdin closes with the writer).
    pub(crate) fn close(&self) {
        for task in self.tasks.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            task.abort();
        }
        self.closed.cancel();
        self.routes.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    pub(crate) fn forget(&self, id: u64) {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

async fn read_loop(
    mut stdout: ChildStdout,
    mut decoder: Decoder,
    routes: Routes,
    closed: tokio_util::sync::CancellationToken,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    'outer: loop {
        loop {
            let frame = match decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "sandbox init sent a malformed frame; closing the sandbox connection");
                    break 'outer;
                }
            };
            let event = match frame.kind {
                Kind::Started => frame.parse().map(Event::Started),
                Kind::Stdout => Ok(Event::Stdout(frame.payload)),
                Kind::Stderr => Ok(Event::Stderr(frame.payload)),
                Kind::Exited => frame.parse().map(Event::Exited),
                Kind::Failed => frame.parse().map(Event::Failed),
                Kind::Hello | Kind::Exec | Kind::Stdin | Kind::CloseStdin | Kind::Kill => {
                    tracing::warn!(kind = ?frame.kind, "unexpected frame from the sandbox init");
                    continue;
                }
            };
            let Ok(event) = event else {
                tracing::warn!("sandbox init sent an unreadable control frame");
                continue;
            };
            let last = matches!(event, Event::Exited(_) | Event::Failed(_));
            let route = {
                let mut routes = routes.lock().unwrap_or_else(PoisonError::into_inner);
                if last {
                    routes.remove(&frame.id)
                } else {
                    routes.get(&frame.id).cloned()
                }
            };
            if let Some(route) = route {
                // A consumer that went away (its request was dropped) just loses its events.
                let _ = route.send(event).await;
            }
        }
        match stdout.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => decoder.push(&chunk[..read]),
        }
    }
    closed.cancel();
    // Every waiting consumer learns that the sandbox is gone: its channel closes.
    routes.lock().unwrap_or_else(PoisonError::into_inner).clear();
}
