//! A task this process runs: its child's events run to an end (answer, failure, time
//! limit, cancel, approval), the heartbeat and cross-process cancel requests on the way, and
//! the record of how it ended.

use super::events::EventLog;
use super::records::{TaskRecord, TaskStatus, TaskStore};
use super::runtime::{FINISHED_KEPT, Runtime};
use futures::StreamExt;
use harness_core::{AgentEvent, EventKind, EventSink, EventSource};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often a runner refreshes its tasks' heartbeats in the task file.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(10);

/// A running task whose heartbeat is older than this, from another runner, is `lost`.
pub(crate) const HEARTBEAT_STALE: Duration = Duration::from_secs(30);

/// How often a runner looks in the task file for a cancel request from another process.
pub(crate) const CANCEL_POLL: Duration = Duration::from_secs(1);

/// How a finished task ended, as the waiters see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) status: TaskStatus,
    pub(crate) result: String,
}

/// A task this process runs.
pub(crate) struct LiveTask {
    pub(crate) record: TaskRecord,
    pub(crate) store: TaskStore,
    pub(crate) cancel: CancellationToken,
    /// Set when a forced-sync wait expired: the child is stopped and ends `timeout`.
    pub(crate) expired: std::sync::atomic::AtomicBool,
    pub(crate) done: watch::Receiver<Option<Outcome>>,
    /// The sync waiter's sink while a tool call waits for the task (`None`: background).
    pub(crate) attached: tokio::sync::Mutex<Option<EventSink>>,
    /// The child's recent events and progress.
    pub(crate) log: Arc<EventLog>,
    /// Why the runner stopped the child itself (token budget, a cancel request from another
    /// process); first reason wins.
    pub(crate) stopped: Arc<Mutex<Option<Outcome>>>,
    /// The child's calls waiting for a person when its turn ended awaiting approval.
    pub(crate) asked: Mutex<Vec<harness_core::PendingCall>>,
}

/// Milliseconds since the Unix epoch (heartbeats compare across processes).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

impl LiveTask {
    /// The task's id.
    pub(crate) fn id(&self) -> &str {
        &self.record.task_id
    }

    /// A receiver that turns `Some` when the task ends.
    pub(crate) fn done_signal(&self) -> watch::Receiver<Option<Outcome>> {
        self.done.clone()
    }

    /// The child's calls waiting for a person (when it ended `awaiting_approval`).
    pub(crate) fn asked(&self) -> Vec<harness_core::PendingCall> {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Asks the child to stop at its next tool or chunk boundary.
    pub(crate) fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Stops the child for `outcome` (the first reason given wins).
    fn stop(&self, outcome: Outcome) {
        {
            let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
            if stopped.is_none() {
                *stopped = Some(outcome);
            }
        }
        self.cancel.cancel();
    }

    /// Stops the child because a forced-sync wait expired: it ends `timeout`.
    pub(crate) fn expire(&self) {
        self.expired.store(true, Ordering::SeqCst);
        self.cancel.cancel();
    }
}

impl Runtime {
    /// Records the terminal state, wakes the waiters, forgets the live task.
    pub(crate) async fn finish(&self, task: &LiveTask, outcome: Outcome, done: &watch::Sender<Option<Outcome>>) {
        let attached = task.attached.lock().await;
        let delivered = attached.is_some();
        let task_id = task.record.task_id.clone();
        let runner = &task.record.runner;
        let written = task
            .store
            .update(|file| match file.tasks.get_mut(&task_id) {
                // Fenced: a task another replica took over is that runner's to end.
                Some(record) if !record.status.is_terminal() && record.is_run_by(runner) => {
                    record.status = outcome.status;
                    record.result = Some(outcome.result.clone());
                    record.delivered = delivered;
                    record.progress = Some(task.log.progress());
                    record.pending = if outcome.status == TaskStatus::AwaitingApproval {
                        task.asked()
                    } else {
                        Vec::new()
                    };
                    (true, true)
                }
                _ => (false, false),
            })
            .await;
        match written {
            Ok(true) => self.unindex(&task_id).await,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(task = %task_id, error = %harness_core::error_chain(&err), "task result not recorded");
            }
        }
        done.send_replace(Some(outcome));
        drop(attached);
        {
            let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
            if finished.len() == FINISHED_KEPT {
                finished.pop_front();
            }
            finished.push_back((task_id.clone(), Arc::clone(&task.log)));
        }
        self.live().remove(&task_id);
    }
}

/// Runs the child (a local agent's or a remote turn's events) to its end, forwarding events to the attached waiter, keeping the
/// heartbeat, and stopping it (through its cancellation token, so it saves its session) on
/// cancel and timeout.
pub(crate) async fn run_child(
    mut stream: futures::stream::BoxStream<'static, AgentEvent>,
    cancel: CancellationToken,
    live: &LiveTask,
    source: EventSource,
    limit: Duration,
) -> Outcome {
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    let every = CANCEL_POLL.min(beat(&live.record));
    let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_beat = tokio::time::Instant::now();
    let mut timed_out = false;
    let mut last = None;
    loop {
        tokio::select! {
            event = stream.next() => {
                let Some(event) = event else { break };
                forward(live, &source, &event).await;
                match event.kind {
                    EventKind::Final { message } if event.source.is_none() => last = Some(Ok(message.text())),
                    EventKind::Error { message, .. } if event.source.is_none() => last = Some(Err(message)),
                    EventKind::ApprovalRequired { calls } if event.source.is_none() => {
                        *live.asked.lock().unwrap_or_else(PoisonError::into_inner) = calls;
                    }
                    _ => {}
                }
            }
            () = &mut deadline, if !timed_out => {
                timed_out = true;
                cancel.cancel();
            }
            _ = poll.tick() => poll_record(live, &mut last_beat).await,
        }
    }
    outcome_of(live, last, timed_out, limit)
}

/// How often `record`'s runner beats: every [`HEARTBEAT`], with a lease at least three times
/// per lease period.
fn beat(record: &TaskRecord) -> Duration {
    record
        .lease_ms
        .map_or(HEARTBEAT, |lease| HEARTBEAT.min(Duration::from_millis(lease / 3)))
}

/// The heartbeat (every [`beat`]) and a look for a cancel request from another process
/// (every [`CANCEL_POLL`]) of the running task `live`.
async fn poll_record(live: &LiveTask, last_beat: &mut tokio::time::Instant) {
    let task_id = live.record.task_id.clone();
    let runner = &live.record.runner;
    let beat = beat(&live.record);
    // What the record says: (a cancel was requested, another runner took the task over).
    let seen = if last_beat.elapsed() >= beat {
        *last_beat = tokio::time::Instant::now();
        let progress = live.log.progress();
        live.store
            .update(|file| match file.tasks.get_mut(&task_id) {
                Some(record) if record.status == TaskStatus::Running && record.is_run_by(runner) => {
                    record.heartbeat_ms = now_ms();
                    record.progress = Some(progress.clone());
                    (true, (record.cancel_requested, false))
                }
                Some(record) => (false, (false, !record.is_run_by(runner))),
                None => (false, (false, false)),
            })
            .await
    } else {
        live.store.load().await.map(|file| {
            file.tasks.get(&task_id).map_or((false, false), |record| {
                (record.cancel_requested, !record.is_run_by(runner))
            })
        })
    };
    match seen {
        Ok((_, true)) => live.stop(Outcome {
            status: TaskStatus::Lost,
            result: "taken over by another replica after this runner's lease expired".to_owned(),
        }),
        Ok((true, false)) => live.stop(Outcome {
            status: TaskStatus::Cancelled,
            result: "cancelled by task_cancel (requested from another process)".to_owned(),
        }),
        Ok((false, false)) => {}
        Err(err) => {
            tracing::warn!(task = %task_id, error = %harness_core::error_chain(&err), "task record not read or written");
        }
    }
}

/// How the task ended, from the child's last answer or error, the time limit, a stop the
/// runner made itself and a cancel.
fn outcome_of(live: &LiveTask, last: Option<Result<String, String>>, timed_out: bool, limit: Duration) -> Outcome {
    let stopped = live.stopped.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(outcome) = stopped.filter(|_| !timed_out) {
        return outcome;
    }
    let asked = live.asked();
    match last {
        Some(Ok(_)) if !asked.is_empty() && !timed_out && !live.cancel.is_cancelled() => Outcome {
            status: TaskStatus::AwaitingApproval,
            result: describe_asked(&asked),
        },
        Some(Ok(text)) if !timed_out && !live.cancel.is_cancelled() => Outcome {
            status: TaskStatus::Completed,
            result: text,
        },
        _ if timed_out => Outcome {
            status: TaskStatus::Timeout,
            result: format!("stopped after the task time limit of {} s", limit.as_secs()),
        },
        _ if live.expired.load(Ordering::SeqCst) => Outcome {
            status: TaskStatus::Timeout,
            result: "stopped: the forced-sync wait expired before the subagent answered".to_owned(),
        },
        _ if live.cancel.is_cancelled() => Outcome {
            status: TaskStatus::Cancelled,
            result:
                "cancelled before the task finished (task_cancel, or the parent's call was cancelled while it waited)"
                    .to_owned(),
        },
        Some(Err(message)) => Outcome {
            status: TaskStatus::Failed,
            result: message,
        },
        Some(Ok(text)) => Outcome {
            status: TaskStatus::Completed,
            result: text,
        },
        None => Outcome {
            status: TaskStatus::Failed,
            result: "the subagent ended without an answer".to_owned(),
        },
    }
}

/// What a child that waits for a person asked, one line per call.
pub(crate) fn describe_asked(asked: &[harness_core::PendingCall]) -> String {
    let mut text = String::from("waiting for a person's approval of:");
    for call in asked {
        text.push_str(&format!("\n- {} {} ({})", call.tool, call.input, call.reason));
        if let Some(rule) = &call.suggestion {
            text.push_str(&format!(" [rule to allow it: {rule}]"));
        }
    }
    text
}

/// Sends `event` to the sync waiter, if one is attached, tagged with the child's source
/// (a grandchild's event keeps its own).
async fn forward(live: &LiveTask, source: &EventSource, event: &AgentEvent) {
    let own = event.source.is_none();
    let mut event = event.clone();
    if own {
        event.source = Some(source.clone());
    }
    live.log.push(&event, own);
    let attached = live.attached.lock().await;
    if let Some(sink) = attached.as_ref() {
        sink.forward(event).await;
    }
}
