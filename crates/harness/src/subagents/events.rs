//! The recent events of one task and its progress, kept in this process: what
//! `task_output` shows and [`HarnessAgent::watch_task`](crate::HarnessAgent::watch_task)
//! streams.

use super::records::TaskProgress;
use harness_core::{AgentEvent, EventKind};
use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// Events of one task kept in memory (the oldest are dropped first).
pub(crate) const EVENT_BUFFER: usize = 256;

/// The recent events of one task, and its progress, in this process.
pub(crate) struct EventLog {
    inner: Mutex<LogInner>,
    tx: tokio::sync::broadcast::Sender<AgentEvent>,
}

#[derive(Default)]
struct LogInner {
    recent: VecDeque<AgentEvent>,
    dropped: u64,
    progress: TaskProgress,
}

impl EventLog {
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new(LogInner::default()),
            tx: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        // Every critical section is a few field updates; a panic cannot leave it half-done.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `event` (already tagged with its source) and returns the progress so far.
    pub(crate) fn push(&self, event: &AgentEvent, own: bool) -> TaskProgress {
        let mut inner = self.lock();
        let progress = &mut inner.progress;
        progress.events += 1;
        if own {
            match &event.kind {
                EventKind::StepEnd { usage, .. } => {
                    progress.steps += 1;
                    if let Some(usage) = usage {
                        progress.tokens += usage.input_tokens + usage.output_tokens;
                    }
                }
                EventKind::ToolCallEnd { name, .. } => {
                    progress.tool_calls += 1;
                    progress.last_tool = Some(name.clone());
                }
                _ => {}
            }
        }
        let progress = progress.clone();
        if inner.recent.len() == EVENT_BUFFER {
            inner.recent.pop_front();
            inner.dropped += 1;
        }
        inner.recent.push_back(event.clone());
        // Sent under the lock, so a subscriber's snapshot and its live events never overlap.
        let _no_subscriber = self.tx.send(event.clone());
        progress
    }

    pub(crate) fn progress(&self) -> TaskProgress {
        self.lock().progress.clone()
    }

    /// The buffered events and how many older ones were dropped.
    pub(crate) fn snapshot(&self) -> (Vec<AgentEvent>, u64) {
        let inner = self.lock();
        (inner.recent.iter().cloned().collect(), inner.dropped)
    }

    /// The buffered events and a receiver of every later one.
    pub(crate) fn subscribe(&self) -> (Vec<AgentEvent>, tokio::sync::broadcast::Receiver<AgentEvent>) {
        let inner = self.lock();
        (inner.recent.iter().cloned().collect(), self.tx.subscribe())
    }
}
