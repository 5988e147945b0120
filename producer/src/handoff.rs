//! What passes between the producer handle and the background task: the commands, the
//! validated event on its way ([`Incoming`]) and the buffer bytes it holds ([`Reservation`]).
//! Both sides import this module; neither imports the other's internals.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use crate::config::ProducerConfig;
use crate::event::Event;
use crate::metrics::{Metrics, StatCounters};
use crate::outcome::{FlushOutcome, Undelivered, UndeliveredCallback};
use crate::wire::decode_payload;

/// Bytes charged per user record on top of its payload and partition key: the bookkeeping the
/// producer keeps for it while it is held.
pub const RECORD_OVERHEAD_BYTES: usize = 96;

/// Commands from producer handles.
// Records are the hot path and the other commands are rare: boxing records to shrink the
// enum would cost an allocation per event.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Command {
    Record(Incoming),
    Flush(oneshot::Sender<FlushOutcome>),
    TakeUndelivered(oneshot::Sender<Vec<Undelivered>>),
    Shutdown(oneshot::Sender<FlushOutcome>),
}

impl Command {
    pub fn into_incoming(self) -> Option<Incoming> {
        match self {
            Command::Record(i) => Some(i),
            _ => None,
        }
    }
}

/// Everything the background task is started with.
pub(crate) struct EngineParts<S, M> {
    pub config: Arc<ProducerConfig>,
    pub sink: Arc<S>,
    pub shards: Arc<M>,
    pub rx: mpsc::Receiver<Command>,
    pub sem: Arc<Semaphore>,
    pub on_undelivered: Option<UndeliveredCallback>,
    pub metrics: Metrics,
    pub stats: Arc<StatCounters>,
}

/// Bytes held against the buffer bound; released when dropped.
pub(crate) struct Reservation {
    sem: Arc<Semaphore>,
    bytes: usize,
}

impl Reservation {
    /// Takes charge of `bytes` already acquired (and forgotten) from `sem`.
    pub fn new(sem: Arc<Semaphore>, bytes: usize) -> Self {
        Reservation { sem, bytes }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes over `other`'s bytes.
    pub fn merge(&mut self, mut other: Reservation) {
        self.bytes += other.bytes;
        other.bytes = 0;
    }

    /// Releases everything above `bytes`.
    pub fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.sem.add_permits(self.bytes - bytes);
            self.bytes = bytes;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.sem.add_permits(self.bytes);
        }
    }
}

/// A validated event on its way to the background task.
pub(crate) struct Incoming {
    pub body: Body,
    pub partition_key: String,
    pub hash: u128,
    pub enqueued_at: Instant,
    pub reservation: Reservation,
}

pub(crate) enum Body {
    /// Encoded payload (no collapse).
    Encoded(Bytes),
    /// The event itself, kept for collapse.
    Event { event: Event, payload_len: usize },
}

impl Incoming {
    /// The event back, for a caller whose command could not be sent.
    pub fn into_event(self) -> Option<Event> {
        match self.body {
            Body::Event { event, .. } => Some(event),
            // Our own payload always decodes (tested property); `None` only on a bug.
            Body::Encoded(p) => decode_payload(&p).ok(),
        }
    }
}
