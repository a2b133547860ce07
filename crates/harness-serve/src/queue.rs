//! [`Queues`]: one bounded FIFO per session in front of the agent. Messages to a session run
//! one after another in arrival order on one worker task; a full queue is refused (429), never
//! dropped silently. The worker owns the turn: a client that goes away does not stop it, and
//! its events go to the turn's [`TurnFeed`], which never makes the worker wait.

use crate::error::ApiError;
use crate::feed::TurnFeed;
use futures::StreamExt;
use harness::HarnessAgent;
use harness_core::{AgentInput, ApprovalDecision, CancellationToken, RuntimeContext, SessionId, UserId};
use harness_protocol::{WireEvent, WireKind};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// Idle sessions whose last turn is kept for `/events` replay; older idle ones are dropped.
const IDLE_SESSIONS_KEPT: usize = 4096;

/// The `Retry-After` of a full queue.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Which session: agent name, user, session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey {
    pub(crate) agent: String,
    pub(crate) user: UserId,
    pub(crate) session: SessionId,
}

/// What a queued turn does: answer a message, or resume a turn that waits for approval.
pub(crate) enum TurnInput {
    /// A new message.
    Message(AgentInput),
    /// Decisions on the session's pending calls.
    Resume(Vec<ApprovalDecision>),
}

impl From<AgentInput> for TurnInput {
    fn from(input: AgentInput) -> Self {
        Self::Message(input)
    }
}

/// What a remote parent said about the turn it started: its delegation depth
/// (`X-Harness-Depth`) and what the child keeps of it (`inherit`). Default: not a remote
/// child.
#[derive(Debug, Clone, Default)]
pub(crate) struct Delegation {
    /// The child's depth in the delegation tree.
    pub(crate) depth: Option<u32>,
    /// The parent's plan mode, mode and deny/ask rules.
    pub(crate) inherit: Option<harness::permissions::Inheritance>,
    /// The parent's `traceparent`: the turn's spans join its trace.
    pub(crate) traceparent: Option<String>,
}

/// What an OpenAI-compatible caller asks of the turn: tools it runs itself (and the results
/// of the ones it ran), and the shape of the answer. Default: nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asks {
    /// The caller's tools and results.
    pub(crate) client: Option<harness::structured::client_tools::ClientTools>,
    /// `response_format`: the answer's schema.
    pub(crate) schema: Option<harness::structured::OutputSchema>,
}

struct Job {
    input: TurnInput,
    /// What a remote parent passed down.
    delegation: Delegation,
    /// What the caller asks of the turn.
    asks: Asks,
    cancel: CancellationToken,
    feed: Arc<TurnFeed>,
}

#[derive(Default)]
struct Slot {
    waiting: VecDeque<Job>,
    /// The running turn's cancellation, while a worker runs one.
    running: Option<CancellationToken>,
    /// Whether a worker task serves this slot.
    worker: bool,
    /// The running or most recent turn's events.
    last: Option<Arc<TurnFeed>>,
    /// When the slot went idle (for pruning), as a counter of idle transitions.
    idle_since: u64,
}

#[derive(Default)]
struct Table {
    slots: HashMap<SessionKey, Slot>,
    closed: bool,
    idle_clock: u64,
}

/// How many turns may run or wait at once: on the whole server, and for one user.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnCaps {
    pub(crate) server: usize,
    pub(crate) per_user: usize,
}

/// The per-session queues of one server.
pub(crate) struct Queues {
    table: Mutex<Table>,
    max_queued: usize,
    caps: TurnCaps,
    replay: usize,
    tracker: TaskTracker,
    /// Fired when the shutdown grace period is over: a turn cancelled then is flagged as
    /// cut by the shutdown.
    stopping: CancellationToken,
    /// Sessions whose last turn here ended waiting for a person, and how many calls wait.
    pending: Mutex<HashMap<SessionKey, usize>>,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues")
            .field("max_queued", &self.max_queued)
            .finish_non_exhaustive()
    }
}

impl Queues {
    pub(crate) fn new(max_queued: usize, replay: usize, caps: TurnCaps) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::default(),
            max_queued: max_queued.max(1),
            caps,
            replay,
            tracker: TaskTracker::new(),
            stopping: CancellationToken::new(),
            pending: Mutex::default(),
        })
    }

    /// Tool calls waiting for a person in the sessions whose last turn on this server ended
    /// asking (a later turn or resume of the session that ends otherwise clears them).
    pub(crate) fn pending_approvals(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .sum()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `input` for the session behind the messages already there and returns the
    /// turn's feed.
    ///
    /// # Errors
    /// 429 (with `Retry-After`) when `max_queued` messages are already waiting for the
    /// session, or the server or the caller already has as many turns running or waiting as
    /// [`TurnCaps`] allows; 503 while shutting down.
    pub(crate) fn enqueue(
        self: &Arc<Self>,
        agent: &HarnessAgent,
        key: SessionKey,
        input: impl Into<TurnInput>,
        delegation: Delegation,
    ) -> Result<Arc<TurnFeed>, ApiError> {
        self.enqueue_asking(agent, key, input.into(), delegation, Asks::default())
    }

    /// [`enqueue`](Self::enqueue) with what the caller asks of the turn.
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue).
    pub(crate) fn enqueue_asking(
        self: &Arc<Self>,
        agent: &HarnessAgent,
        key: SessionKey,
        input: TurnInput,
        delegation: Delegation,
        asks: Asks,
    ) -> Result<Arc<TurnFeed>, ApiError> {
        let feed = TurnFeed::new(format!("turn-{}", uuid::Uuid::now_v7()), self.replay);
        let mut table = self.table();
        if table.closed {
            return Err(ApiError::shutting_down());
        }
        let (mut total, mut mine) = (0, 0);
        for (other, slot) in &table.slots {
            let turns = slot.waiting.len() + usize::from(slot.running.is_some());
            total += turns;
            if other.user == key.user {
                mine += turns;
            }
        }
        if total >= self.caps.server {
            return Err(ApiError::too_many_turns(
                format!(
                    "the server already runs or queues {} turns; retry after the Retry-After delay (or raise [serve] max_turns)",
                    self.caps.server
                ),
                RETRY_AFTER,
            ));
        }
        if mine >= self.caps.per_user {
            return Err(ApiError::too_many_turns(
                format!(
                    "user `{}` already has {} turns running or queued; retry after the Retry-After delay (or raise [serve] max_turns_per_user)",
                    key.user, self.caps.per_user
                ),
                RETRY_AFTER,
            ));
        }
        let spawn = {
            let slot = table.slots.entry(key.clone()).or_default();
            if slot.waiting.len() >= self.max_queued {
                return Err(ApiError::queue_full(self.max_queued, RETRY_AFTER));
            }
            let ahead = slot.waiting.len() + usize::from(slot.running.is_some());
            if ahead > 0 {
                feed.push(WireEvent::own(WireKind::TurnQueued {
                    turn_id: feed.turn_id().to_owned(),
                    ahead,
                }));
            }
            slot.waiting.push_back(Job {
                input,
                delegation,
                asks,
                cancel: CancellationToken::new(),
                feed: Arc::clone(&feed),
            });
            !std::mem::replace(&mut slot.worker, true)
        };
        if spawn {
            prune(&mut table);
            drop(table);
            let queues = Arc::clone(self);
            let agent = agent.clone();
            self.tracker.spawn(async move { queues.work(agent, key).await });
        }
        Ok(feed)
    }

    /// Runs the session's messages in order until its queue is empty.
    async fn work(self: Arc<Self>, agent: HarnessAgent, key: SessionKey) {
        loop {
            let job = {
                let mut table = self.table();
                table.idle_clock += 1;
                let clock = table.idle_clock;
                let Some(slot) = table.slots.get_mut(&key) else {
                    return;
                };
                match slot.waiting.pop_front() {
                    Some(job) => {
                        slot.running = Some(job.cancel.clone());
                        slot.last = Some(Arc::clone(&job.feed));
                        job
                    }
                    None => {
                        slot.running = None;
                        slot.worker = false;
                        slot.idle_since = clock;
                        return;
                    }
                }
            };
            run_turn(&agent, &key, job, &self.stopping, &self.pending).await;
        }
    }

    /// Cancels the session's running turn; whether there was one.
    pub(crate) fn cancel(&self, key: &SessionKey) -> bool {
        let table = self.table();
        match table.slots.get(key).and_then(|slot| slot.running.as_ref()) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The running or last turn of the session, for `/events`.
    pub(crate) fn last_turn(&self, key: &SessionKey) -> Option<Arc<TurnFeed>> {
        self.table().slots.get(key).and_then(|slot| slot.last.clone())
    }

    /// Refuses new messages and ends the waiting ones with a `shutting_down` error; running
    /// turns go on.
    pub(crate) fn close(&self) {
        let mut table = self.table();
        table.closed = true;
        for slot in table.slots.values_mut() {
            for job in slot.waiting.drain(..) {
                job.feed.fail(&ApiError::shutting_down());
            }
        }
        self.tracker.close();
    }

    /// Cancels every running turn (the shutdown deadline passed); each still saves.
    pub(crate) fn cancel_all(&self) {
        self.stopping.cancel();
        for token in self.table().slots.values().filter_map(|slot| slot.running.as_ref()) {
            token.cancel();
        }
    }

    /// Resolves when every worker has finished (after [`close`](Self::close)).
    pub(crate) async fn drained(&self) {
        self.tracker.wait().await;
    }

    /// (turns running, messages waiting behind them) now.
    pub(crate) fn depth(&self) -> (usize, usize) {
        let table = self.table();
        let running = table.slots.values().filter(|slot| slot.running.is_some()).count();
        (running, table.slots.values().map(|slot| slot.waiting.len()).sum())
    }

    /// Turns running or waiting now.
    pub(crate) fn busy(&self) -> usize {
        self.table()
            .slots
            .values()
            .map(|slot| slot.waiting.len() + usize::from(slot.running.is_some()))
            .sum()
    }
}

/// Drops the longest-idle sessions past [`IDLE_SESSIONS_KEPT`].
fn prune(table: &mut Table) {
    let idle = table.slots.values().filter(|slot| !slot.worker).count();
    if idle <= IDLE_SESSIONS_KEPT {
        return;
    }
    let mut ages: Vec<(u64, SessionKey)> = table
        .slots
        .iter()
        .filter(|(_, slot)| !slot.worker)
        .map(|(key, slot)| (slot.idle_since, key.clone()))
        .collect();
    ages.sort_unstable_by_key(|(age, _)| *age);
    for (_, key) in ages.into_iter().take(idle - IDLE_SESSIONS_KEPT) {
        table.slots.remove(&key);
    }
}

/// Runs one turn to its end, feeding its events; the feed always gets a terminal event.
/// The session's entry in `pending` is cleared when the turn starts and set (before the
/// event reaches the feed) when the turn ends asking for approval.
async fn run_turn(
    agent: &HarnessAgent,
    key: &SessionKey,
    job: Job,
    stopping: &CancellationToken,
    pending: &Mutex<HashMap<SessionKey, usize>>,
) {
    pending.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    let Job {
        input,
        delegation,
        asks,
        cancel,
        feed,
    } = job;
    let turn_id = feed.turn_id().to_owned();
    feed.push(WireEvent::own(WireKind::TurnStart {
        turn_id: turn_id.clone(),
        session_id: key.session.to_string(),
    }));
    let mut ctx = RuntimeContext::for_user(key.user.clone())
        .with_session(key.session.clone())
        .with_cancellation(cancel);
    if let Some(client) = asks.client {
        ctx.insert(client);
    }
    if let Some(schema) = asks.schema {
        ctx.insert(harness::structured::StructuredCall(schema));
    }
    ctx.insert(harness::control::ShutdownSignal(stopping.clone()));
    // A remote parent's child: its own spawns count from its depth.
    let ctx = match delegation.depth {
        Some(depth) => harness::subagents::delegated(ctx, depth, &key.agent),
        None => ctx,
    };
    // A remote parent's plan mode and rules narrow what this turn may do.
    let ctx = match delegation.inherit {
        Some(inherited) => agent.inherited_from_remote(ctx, inherited),
        None => ctx,
    };
    let span = tracing::info_span!("serve_turn", agent = %key.agent, user_id = %key.user, session_id = %key.session);
    if let Some(traceparent) = &delegation.traceparent {
        harness_ops::telemetry::join_remote(&span, traceparent);
    }
    let mut stream = match input {
        TurnInput::Message(input) => agent.stream(input, ctx),
        TurnInput::Resume(decisions) => agent.resume_stream(decisions, ctx),
    };
    while let Some(event) = tracing::Instrument::instrument(stream.next(), span.clone()).await {
        if let Some(event) = WireEvent::from_agent(event, Some(&turn_id)) {
            if let (WireKind::ApprovalRequired { calls }, None) = (&event.kind, &event.source) {
                pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.clone(), calls.len());
            }
            feed.push(event);
        }
    }
    if !feed.is_done() {
        feed.fail(&ApiError::internal("the turn ended without a final message"));
    }
}
