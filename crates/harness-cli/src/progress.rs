//! What the CLI says on stderr while it waits: a note when the model is slow to answer (on a
//! terminal), each retry as it happens, and Ctrl-C handling (the first cancels, a second
//! always exits).

use harness_models::{FallbackNotice, FallbackObserver, RetryNotice, RetryObserver};
use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How long a turn may go without output before the CLI says it is waiting.
pub(crate) const WAITING_NOTE_AFTER: Duration = Duration::from_secs(3);

/// Prints each model retry on stderr.
pub(crate) fn retry_observer() -> RetryObserver {
    Arc::new(|notice: &RetryNotice| {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "retrying the model ({}/{}) in {:.1}s after: {}",
                notice.retry,
                notice.max_retries,
                notice.wait.as_secs_f64(),
                harness_core::redact::redact(&notice.error.to_string())
            );
        }
    })
}

/// Prints each switch to a `[model] fallback` model on stderr:
/// `model X failed (reason); falling back to Y`.
pub(crate) fn fallback_observer() -> FallbackObserver {
    Arc::new(|notice: &FallbackNotice| {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{}", harness_core::redact::redact(&notice.to_string()));
        }
    })
}

/// The `warning: …` line for a warning event (a child's tagged with its id), or `None` for
/// other events and for the fallback notice the [`fallback_observer`] prints already.
pub(crate) fn warning_line(event: &harness_core::AgentEvent) -> Option<String> {
    let harness_core::EventKind::Warning { code, message } = &event.kind else {
        return None;
    };
    if code == harness_models::FALLBACK_NOTICE {
        return None;
    }
    let message = harness_core::redact::redact(message);
    Some(match &event.source {
        Some(source) => format!("warning: [{}] {message}", source.agent_id),
        None => format!("warning: {message}"),
    })
}

/// Runs `call` with a sink that takes only warnings ([`EventSink::warnings`]: the call stays
/// non-streaming) and prints each on stderr as it comes, one `warning: …` line.
///
/// [`EventSink::warnings`]: harness_core::EventSink::warnings
pub(crate) async fn printing_warnings<T, F>(call: impl FnOnce(harness_core::EventSink) -> F) -> T
where
    F: std::future::Future<Output = T>,
{
    #[allow(clippy::print_stderr)]
    fn print(event: &harness_core::AgentEvent) {
        if let Some(line) = warning_line(event) {
            eprintln!("{line}");
        }
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let call = call(harness_core::EventSink::warnings(tx));
    tokio::pin!(call);
    let result = loop {
        tokio::select! {
            result = &mut call => break result,
            Some(event) = rx.recv() => print(&event),
        }
    };
    // What arrived in the last moment (a background child may still hold a sender, so
    // this does not wait for the channel to close).
    while let Ok(event) = rx.try_recv() {
        print(&event);
    }
    result
}

/// A one-time "waiting for the model" note, printed after [`WAITING_NOTE_AFTER`] when
/// stderr is a terminal; dropping it cancels the note.
pub(crate) struct WaitingNote(Option<tokio::task::JoinHandle<()>>);

impl WaitingNote {
    /// Starts the timer (nothing happens when stderr is not a terminal).
    pub(crate) fn start(what: String) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self(None);
        }
        Self(Some(tokio::spawn(async move {
            tokio::time::sleep(WAITING_NOTE_AFTER).await;
            #[allow(clippy::print_stderr)]
            {
                eprintln!("(waiting for {what}…)");
            }
        })))
    }
}

impl Drop for WaitingNote {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// Counts Ctrl-C presses. While a command handles Ctrl-C itself (a turn, a chat, the wait
/// for background work; see [`handling`](Self::handling)) it reacts to the first (cancel the
/// turn, stop waiting) and a second exits the process at once with status 130; otherwise the
/// first one exits.
#[derive(Debug, Default)]
pub(crate) struct Interrupts {
    count: AtomicU32,
    handlers: AtomicU32,
}

/// While alive, the first Ctrl-C is left to the command.
pub(crate) struct Handling(Arc<Interrupts>);

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.handlers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Interrupts {
    /// Installs the watcher.
    pub(crate) fn install() -> Arc<Self> {
        let interrupts = Arc::new(Self::default());
        let watcher = Arc::clone(&interrupts);
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                let earlier = watcher.count.fetch_add(1, Ordering::SeqCst);
                if earlier >= 1 || watcher.handlers.load(Ordering::SeqCst) == 0 {
                    #[allow(clippy::print_stderr)]
                    {
                        eprintln!("\ninterrupted");
                    }
                    std::process::exit(130);
                }
            }
        });
        interrupts
    }

    /// Marks the first Ctrl-C as handled by the caller until the guard is dropped.
    pub(crate) fn handling(self: &Arc<Self>) -> Handling {
        self.handlers.fetch_add(1, Ordering::SeqCst);
        Handling(Arc::clone(self))
    }

    /// A turn ended: the next Ctrl-C is a first one again.
    pub(crate) fn reset(&self) {
        self.count.store(0, Ordering::SeqCst);
    }
}
