//! [`TurnFeed`]: the bounded replay buffer of one turn's events. The turn's worker pushes
//! and never waits; any number of readers follow at their own pace from an event id, and a
//! reader that falls more than the buffer behind gets a `lagged` event instead of stalling
//! the turn.

use futures::Stream;
use harness_protocol::{ErrorCode, EventId, WireEvent, WireKind};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;

/// The next turn's number: [`EventId`]s carry it, so ids are never reused by another turn
/// or session of the process.
static NEXT_TURN: AtomicU64 = AtomicU64::new(1);

/// One buffered event and its id.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    /// The SSE `id:`; absent on a `lagged` marker.
    pub(crate) seq: Option<EventId>,
    pub(crate) event: WireEvent,
}

#[derive(Debug, Default)]
struct Buffer {
    frames: VecDeque<(EventId, WireEvent)>,
    /// The id of the newest event dropped from the front, the default (0) if none.
    dropped_through: EventId,
    done: bool,
}

/// The events of one turn.
#[derive(Debug)]
pub(crate) struct TurnFeed {
    turn_id: String,
    capacity: usize,
    /// The id before the turn's first event.
    base: EventId,
    buffer: Mutex<Buffer>,
    /// Bumped on every push, so readers wake without a lock held across an await.
    version: watch::Sender<u64>,
}

impl TurnFeed {
    pub(crate) fn new(turn_id: String, capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            turn_id,
            capacity: capacity.max(2),
            base: EventId::turn_start(NEXT_TURN.fetch_add(1, Ordering::Relaxed)),
            buffer: Mutex::default(),
            version: watch::Sender::new(0),
        })
    }

    pub(crate) fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// Appends `event` (dropping the oldest when full; a terminal event ends the feed).
    /// Never waits.
    pub(crate) fn push(&self, event: WireEvent) {
        {
            let mut buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            if buffer.done {
                return;
            }
            let seq = buffer
                .frames
                .back()
                .map_or(buffer.dropped_through.max(self.base), |(seq, _)| *seq)
                .next();
            buffer.done = event.is_terminal();
            if buffer.frames.len() >= self.capacity
                && let Some((old, _)) = buffer.frames.pop_front()
            {
                buffer.dropped_through = old;
            }
            buffer.frames.push_back((seq, event));
        }
        self.version.send_modify(|version| *version += 1);
    }

    /// Ends the feed with an error event unless it already ended.
    pub(crate) fn fail(&self, error: &crate::error::ApiError) {
        self.push(WireEvent::own(WireKind::Error {
            turn_id: Some(self.turn_id.clone()),
            message: error.message.clone(),
            kind: match error.code {
                ErrorCode::ShuttingDown => harness_core::ErrorKind::Cancelled,
                _ => harness_core::ErrorKind::Internal,
            },
            status: error.status.as_u16(),
        }));
    }

    /// Whether the turn's terminal event is in.
    pub(crate) fn is_done(&self) -> bool {
        self.buffer.lock().unwrap_or_else(PoisonError::into_inner).done
    }

    /// Whether `seq` is an id of this turn (or the id just before its first event).
    pub(crate) fn owns(&self, seq: EventId) -> bool {
        seq.turn() == self.base.turn()
    }

    /// Frames after `cursor`, a `lagged` marker first when some were dropped, and whether
    /// the feed has ended.
    fn after(&self, cursor: EventId) -> (Vec<Frame>, EventId, bool) {
        let buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut frames = Vec::new();
        let mut cursor = cursor.max(self.base);
        if buffer.dropped_through > cursor {
            let missed = buffer.dropped_through.get() - cursor.get();
            frames.push(Frame {
                seq: None,
                event: WireEvent::own(WireKind::Lagged { missed }),
            });
            cursor = buffer.dropped_through;
        }
        let from = cursor;
        for (seq, event) in buffer.frames.iter().filter(|(seq, _)| *seq > from) {
            frames.push(Frame {
                seq: Some(*seq),
                event: event.clone(),
            });
            cursor = *seq;
        }
        (frames, cursor, buffer.done)
    }

    /// The events after id `after` (from the turn's start when `after` is not one of its
    /// ids), ending after the terminal one.
    pub(crate) fn subscribe(self: &Arc<Self>, after: EventId) -> impl Stream<Item = Frame> + Send + 'static {
        struct Reader {
            feed: Arc<TurnFeed>,
            rx: watch::Receiver<u64>,
            cursor: EventId,
            pending: VecDeque<Frame>,
            ended: bool,
        }
        let reader = Reader {
            rx: self.version.subscribe(),
            feed: Arc::clone(self),
            cursor: if self.owns(after) { after } else { self.base },
            pending: VecDeque::new(),
            ended: false,
        };
        futures::stream::unfold(reader, |mut reader| async move {
            loop {
                if let Some(frame) = reader.pending.pop_front() {
                    return Some((frame, reader));
                }
                if reader.ended {
                    return None;
                }
                // Mark the current version seen before reading, so a push after the read
                // wakes the wait below.
                reader.rx.borrow_and_update();
                let (frames, cursor, done) = reader.feed.after(reader.cursor);
                reader.cursor = cursor;
                reader.pending.extend(frames);
                if done {
                    reader.ended = true;
                    continue;
                }
                if reader.pending.is_empty() && reader.rx.changed().await.is_err() {
                    // The sender lives in the feed we hold: unreachable, but end cleanly.
                    reader.ended = true;
                }
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn text(delta: &str) -> WireEvent {
        WireEvent::own(WireKind::TextDelta {
            delta: delta.to_owned(),
        })
    }

    fn done(turn: &str) -> WireEvent {
        WireEvent::own(WireKind::Error {
            turn_id: Some(turn.to_owned()),
            message: "x".to_owned(),
            kind: harness_core::ErrorKind::Cancelled,
            status: 503,
        })
    }

    fn names(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .map(|frame| match &frame.event.kind {
                WireKind::TextDelta { delta } => delta.clone(),
                WireKind::Lagged { missed } => format!("lagged {missed}"),
                other => format!("{other:?}").chars().take(5).collect(),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_reader_sees_every_event_then_the_end_and_can_resume_from_an_id() {
        let feed = TurnFeed::new("t".into(), 16);
        let reader = feed.subscribe(EventId::default());
        feed.push(text("a"));
        feed.push(text("b"));
        feed.push(done("t"));
        let frames: Vec<Frame> = reader.collect().await;
        assert_eq!(names(&frames), ["a", "b", "Error"]);
        let first = frames[0].seq.unwrap();
        let resumed: Vec<Frame> = feed.subscribe(first).collect().await;
        assert_eq!(names(&resumed), ["b", "Error"]);
    }

    #[tokio::test]
    async fn a_slow_reader_never_blocks_the_writer_and_is_told_what_it_missed() {
        let feed = TurnFeed::new("t".into(), 4);
        let reader = feed.subscribe(EventId::default());
        for i in 0..10 {
            feed.push(text(&i.to_string()));
        }
        feed.push(done("t"));
        let frames: Vec<Frame> = reader.collect().await;
        assert_eq!(names(&frames), ["lagged 7", "7", "8", "9", "Error"]);
        assert!(feed.is_done());
    }
}
