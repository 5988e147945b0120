//! The producer handle: `record()`, `try_record()`, `flush()`, `shutdown()`, and its builder.

mod builder;
mod meter;
mod plain;
mod prepare;

pub use builder::ProducerBuilder;
pub use meter::Meter;
use plain::{Opening, Plain};
use prepare::{Check, Payload, Prepared, Route};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::config::ProducerConfig;
use crate::error::ProducerError;
use crate::event_id::IdGenerator;
use crate::fold::{Absorbed, Charged, FoldKey};
use crate::handoff::{Command, RECORD_OVERHEAD_BYTES, Staging};
use crate::metrics::{Metrics, ProducerStats, StatCounters};
use crate::outcome::{FlushOutcome, Undelivered};
use awsmp_contract::event::Event;
use awsmp_contract::wire::encode_single_into;
use awsmp_contract::wire::v2::put_single_from_head;

/// A call waiting for buffer space.
type Waiting<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), ProducerError>> + Send + 'a>>;

/// One unit of the task's cooperative budget per call: a caller recording in a tight loop
/// still yields (about every 128 calls) so the background task and other tasks get to run.
async fn cooperate() {
    tokio::task::consume_budget().await;
}

/// [`cooperate`] for a call that costs a fraction of a checked `Producer::record(Event)`
/// call: one unit of the budget every `every`-th call counted in `calls` (this thread's), so
/// a tight loop of such calls yields about as often *in time* as the checked loop does —
/// every 100–200 µs on the 2-core machine of `docs/benchmarks.md` — not after a fixed
/// number of calls.
///
/// The count is a plain thread-local step, inlined into the caller with its constant `every`
/// (a power of two: a mask, not a division); only the call that spends a unit builds the
/// budget's future.
macro_rules! cooperate_every {
    ($calls:expr, $every:expr) => {
        if $crate::producer::spends_unit(&$calls, $every) {
            tokio::task::consume_budget().await;
        }
    };
}
pub(crate) use cooperate_every;

/// Counts a call in `calls` (this thread's); whether it is the `every`-th, which spends a
/// unit of the cooperative budget ([`cooperate_every!`]).
#[inline(always)]
pub(crate) fn spends_unit(
    calls: &'static std::thread::LocalKey<std::cell::Cell<u32>>,
    every: u32,
) -> bool {
    calls.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n.is_multiple_of(every)
    })
}

thread_local! {
    /// Plain events' calls on this thread, for [`cooperate_every`].
    static PLAIN_CALLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether `event` may take the fast path ([`Producer::plain`]): no id or producer id of its
/// own.
fn looks_plain(event: &Event) -> bool {
    event.event_id.is_empty() && event.producer_id.is_none()
}

struct Shared {
    tx: mpsc::Sender<Command>,
    staging: Arc<Staging>,
    sem: Arc<Semaphore>,
    config: Arc<ProducerConfig>,
    closed: AtomicBool,
    metrics: Metrics,
    stats: Arc<StatCounters>,
    /// Generated event ids of this instance (its epoch and per-lane sequences).
    ids: Arc<IdGenerator>,
    /// This instance's number in the process ([`INSTANCES`]): what a thread's collapse slots
    /// are kept for (an epoch can be fixed, and so shared, by tests).
    instance: u64,
}

/// Producer instances started in this process: each gets the next number, never reused.
static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Buffers, packs and ships usage events to Kinesis from a background task. Cheap to clone;
/// all clones share one buffer.
#[derive(Clone)]
pub struct Producer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("stream", &self.shared.config.stream_name)
            .field("buffered_bytes", &self.buffered_bytes())
            .finish()
    }
}

impl Producer {
    /// A builder for `stream_name` with default settings.
    pub fn builder(stream_name: impl Into<String>) -> ProducerBuilder {
        ProducerBuilder::new(stream_name)
    }

    /// Validates `event`, gives it an id if it has none, and buffers it. Waits while the buffer
    /// is full (back-pressure). Errors give the event back.
    pub async fn record(&self, event: Event) -> Result<(), ProducerError> {
        // A plain event's call (the fast path) costs about half a checked one.
        if looks_plain(&event) {
            cooperate_every!(PLAIN_CALLS, 2);
        } else {
            cooperate().await;
        }
        match self.record_now(event)? {
            None => Ok(()),
            Some(waiting) => waiting.await,
        }
    }

    /// Everything [`Producer::record`] does without waiting; `Some` is the wait for buffer
    /// space. Synchronous, so the caller's future keeps none of its locals.
    fn record_now(&self, event: Event) -> Result<Option<Waiting<'_>>, ProducerError> {
        match self.plain(&event) {
            Some(Plain::Staged) => {
                self.accepted();
                return Ok(None);
            }
            Some(Plain::Slot) => return Ok(None),
            Some(Plain::Sealed) => return Err(self.sealed_with(event)),
            Some(Plain::NoSpace {
                generated,
                route,
                cost,
            }) => {
                let p = Plain::prepared(event, generated, *route, cost);
                return Ok(Some(self.wait_and_stage(p)));
            }
            Some(Plain::Closed(id)) => return Err(self.closed_with(event, id)),
            Some(Plain::Open(o)) => {
                return match self.open(event, *o)? {
                    None => Ok(None),
                    Some(p) => Ok(self.stage_now(p)?.map(|p| self.wait_and_stage(p))),
                };
            }
            None => {}
        }
        let p = self.prepare(event, Check::Whole)?;
        let Some(p) = self.absorb(p)? else {
            return Ok(None);
        };
        Ok(self.stage_now(p)?.map(|p| self.wait_and_stage(p)))
    }

    /// [`Producer::charge_and_stage`], boxed (made outside the caller's future, so that only
    /// the box is kept in it).
    fn wait_and_stage(&self, p: Prepared) -> Waiting<'_> {
        Box::pin(self.charge_and_stage(p))
    }

    /// Charges and stages `p` if there is buffer space now; `Some` gives it back to wait for
    /// space. The wait is boxed by the callers: its state (the semaphore's queue entry, the
    /// event) stays off the common path's future, which is then a few words to set up.
    fn stage_now(&self, p: Prepared) -> Result<Option<Prepared>, ProducerError> {
        match self.shared.sem.try_acquire_many(p.cost as u32) {
            Ok(permit) => {
                permit.forget();
                self.stage(p).map(|()| None)
            }
            Err(tokio::sync::TryAcquireError::NoPermits) => Ok(Some(p)),
            Err(tokio::sync::TryAcquireError::Closed) => {
                let event = self.give_back(p.event, p.generated);
                Err(ProducerError::Closed(Some(Box::new(event))))
            }
        }
    }

    /// Collapse: an event with no id of its own and no allocations joins its open sum at no
    /// charge (it adds nothing the sum holds); `Some` gives back one that needs a charge.
    fn absorb(&self, p: Prepared) -> Result<Option<Prepared>, ProducerError> {
        let e = &p.event;
        let Route::Fold { keyed, .. } = &p.route else {
            return Ok(Some(p));
        };
        if !e.event_id.is_empty() || e.usage_allocations.is_some() {
            return Ok(Some(p));
        }
        let absorbed = {
            let origin = keyed.as_ref().map(|k| &k.0);
            let key = FoldKey::new(e, self.producer_id_of(e)).from(origin);
            self.shared
                .staging
                .absorb(&key, e.quantity, e.timestamp, None)
        };
        match absorbed {
            Absorbed::Yes => {
                self.accepted();
                Ok(None)
            }
            Absorbed::No => Ok(Some(p)),
            Absorbed::Sealed => {
                let event = self.give_back(p.event, None);
                Err(ProducerError::Closed(Some(Box::new(event))))
            }
        }
    }

    /// Collapse: a plain event that opens its sum ([`Plain::Open`]) — opened now, charged,
    /// with the thread's slot for its group attached, when there is buffer space; else
    /// prepared as [`Producer::prepare`] prepares it, to be charged and staged as the checked
    /// path would (waiting for space, or refused `Full` by `try_record`).
    fn open(&self, event: Event, o: Opening) -> Result<Option<Prepared>, ProducerError> {
        let event = Plain::as_prepared(event);
        let Opening {
            fold,
            keyed,
            slot,
            head,
            payload_len,
            cost,
        } = o;
        let prepared = |event| Prepared {
            event,
            generated: None,
            route: Route::Fold {
                payload_len,
                keyed: Some(keyed.clone()),
            },
            cost,
        };
        match self.shared.sem.try_acquire_many(cost as u32) {
            Ok(permit) => permit.forget(),
            Err(_) => return Ok(Some(prepared(event))),
        }
        let charged = Charged {
            bytes: cost,
            payload_len,
            keyed: Some(keyed.clone()),
            head,
        };
        let default_producer_id = self.shared.config.producer_id.as_deref();
        let staging = &self.shared.staging;
        match staging.fold_opening(event, default_producer_id, charged, Some((fold, &slot))) {
            Ok(()) => {
                #[cfg(test)]
                plain::PLAIN_ABSORBED.with(|n| n.set(n.get() + 1));
                self.accepted();
                Ok(None)
            }
            Err(event) => {
                self.shared.sem.add_permits(cost);
                let event = self.give_back(event, None);
                Err(ProducerError::Closed(Some(Box::new(event))))
            }
        }
    }

    /// [`ProducerError::Closed`] giving `event` back with its generated id `id`.
    #[cold]
    fn closed_with(
        &self,
        event: Event,
        id: awsmp_contract::event_id::GeneratedId,
    ) -> ProducerError {
        let event = self.give_back(Plain::as_prepared(event), Some(id));
        ProducerError::Closed(Some(Box::new(event)))
    }

    /// [`ProducerError::Closed`] giving back `event` that a sealed table refused (an id is
    /// generated for it, as [`Producer::absorb`] gives one back).
    #[cold]
    fn sealed_with(&self, event: Event) -> ProducerError {
        let event = self.give_back(Plain::as_prepared(event), None);
        ProducerError::Closed(Some(Box::new(event)))
    }

    /// Charges a prepared event, waiting for buffer space, and stages it.
    async fn charge_and_stage(&self, p: Prepared) -> Result<(), ProducerError> {
        match self.charge(p.cost).await {
            Ok(()) => self.stage(p),
            Err(()) => {
                let event = self.give_back(p.event, p.generated);
                Err(ProducerError::Closed(Some(Box::new(event))))
            }
        }
    }

    /// Takes `cost` bytes of buffer space, waiting while there are none; `Err` once closed.
    /// The fast path neither waits nor yields: space is taken without awaiting when there is
    /// some.
    async fn charge(&self, cost: usize) -> Result<(), ()> {
        let cost = cost as u32;
        if let Ok(permit) = self.shared.sem.try_acquire_many(cost) {
            permit.forget();
            return Ok(());
        }
        match self.shared.sem.acquire_many(cost).await {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(_) => Err(()),
        }
    }

    /// Takes `cost` bytes of buffer space if there are some now (`Full` counted as refused).
    fn try_charge(&self, cost: usize) -> Result<(), tokio::sync::TryAcquireError> {
        match self.shared.sem.try_acquire_many(cost as u32) {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(e) => {
                if e == tokio::sync::TryAcquireError::NoPermits {
                    self.shared.metrics.refused("Full");
                }
                Err(e)
            }
        }
    }

    /// Leaves a prepared event (its bytes charged) for the background task.
    fn stage(&self, p: Prepared) -> Result<(), ProducerError> {
        let Prepared {
            event,
            generated,
            route,
            cost,
        } = p;
        let staged = match route {
            Route::Encoded {
                payload,
                partition_key,
                hash,
            } => {
                let producer_id = self.producer_id_of(&event);
                let write = |buf: &mut BytesMut| match &payload {
                    Payload::V2 { .. } => encode_single_into(buf, &event, producer_id, generated),
                    Payload::V2Head { head, .. } => {
                        let id = generated.expect("a head is used for generated ids only");
                        let millis = event.timestamp.timestamp_millis();
                        let allocations = event.usage_allocations.as_deref();
                        put_single_from_head(
                            buf,
                            &head.bytes,
                            event.quantity,
                            millis,
                            id,
                            allocations,
                        );
                    }
                    Payload::Json(json) => buf.extend_from_slice(json),
                };
                let staging = &self.shared.staging;
                let split = payload.split();
                if staging.push(payload.len(), write, split, &partition_key, hash, cost) {
                    Ok(())
                } else {
                    self.shared.sem.add_permits(cost);
                    Err((event, generated))
                }
            }
            Route::Fold { payload_len, keyed } => {
                let default_producer_id = self.shared.config.producer_id.as_deref();
                match self
                    .shared
                    .staging
                    .fold(event, default_producer_id, cost, payload_len, keyed)
                {
                    Ok(()) => Ok(()),
                    Err(event) => {
                        self.shared.sem.add_permits(cost);
                        Err((event, None))
                    }
                }
            }
        };
        match staged {
            Ok(()) => {
                self.accepted();
                Ok(())
            }
            // The background task took its last events (shutdown); the event is ours to give back.
            Err((event, generated)) => Err(ProducerError::Closed(Some(Box::new(
                self.give_back(event, generated),
            )))),
        }
    }

    /// Like [`Producer::record`] but never waits: a full buffer is [`ProducerError::Full`]
    /// (with the event, id assigned, so a retry keeps the same id).
    pub fn try_record(&self, event: Event) -> Result<(), ProducerError> {
        match self.plain(&event) {
            Some(Plain::Staged) => {
                self.accepted();
                return Ok(());
            }
            Some(Plain::Slot) => return Ok(()),
            Some(Plain::Sealed) => return Err(self.sealed_with(event)),
            Some(Plain::NoSpace { generated, .. }) => {
                self.shared.metrics.refused("Full");
                let event = self.give_back(Plain::as_prepared(event), Some(generated));
                return Err(ProducerError::Full(Box::new(event)));
            }
            Some(Plain::Closed(id)) => return Err(self.closed_with(event, id)),
            Some(Plain::Open(o)) => {
                return match self.open(event, *o)? {
                    None => Ok(()),
                    Some(p) => self.try_charge_and_stage(p),
                };
            }
            None => {}
        }
        let p = self.prepare(event, Check::Whole)?;
        match self.absorb(p)? {
            Some(p) => self.try_charge_and_stage(p),
            None => Ok(()),
        }
    }

    /// Charges a prepared event if there is space now, and stages it.
    fn try_charge_and_stage(&self, p: Prepared) -> Result<(), ProducerError> {
        match self.try_charge(p.cost) {
            Ok(()) => self.stage(p),
            Err(e) => {
                let event = Box::new(self.give_back(p.event, p.generated));
                Err(match e {
                    tokio::sync::TryAcquireError::NoPermits => ProducerError::Full(event),
                    tokio::sync::TryAcquireError::Closed => ProducerError::Closed(Some(event)),
                })
            }
        }
    }

    /// Sends everything buffered now (ignoring linger) and waits until every event recorded
    /// before this call is acknowledged or handed back. Returns the events handed back since
    /// the last flush (none when an undelivered callback is installed).
    pub async fn flush(&self) -> Result<FlushOutcome, ProducerError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .tx
            .send(Command::Flush(tx))
            .await
            .map_err(|_| ProducerError::Closed(None))?;
        rx.await.map_err(|_| ProducerError::Closed(None))
    }

    /// Stops accepting events, delivers everything buffered (bounded by the record TTL), stops
    /// the background task, and returns what could not be delivered.
    pub async fn shutdown(&self) -> Result<FlushOutcome, ProducerError> {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Callers waiting for buffer space get `Closed` (with their event) instead of waiting.
        self.shared.sem.close();
        let (tx, rx) = oneshot::channel();
        self.shared
            .tx
            .send(Command::Shutdown(tx))
            .await
            .map_err(|_| ProducerError::Closed(None))?;
        rx.await.map_err(|_| ProducerError::Closed(None))
    }

    /// Takes the events handed back so far without waiting for a flush.
    pub async fn take_undelivered(&self) -> Result<Vec<Undelivered>, ProducerError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .tx
            .send(Command::TakeUndelivered(tx))
            .await
            .map_err(|_| ProducerError::Closed(None))?;
        rx.await.map_err(|_| ProducerError::Closed(None))
    }

    /// Bytes currently held against [`ProducerConfig::max_buffered_bytes`].
    pub fn buffered_bytes(&self) -> usize {
        self.shared
            .config
            .max_buffered_bytes
            .saturating_sub(self.shared.sem.available_permits())
    }

    /// The settings in use.
    pub fn config(&self) -> &ProducerConfig {
        &self.shared.config
    }

    /// Counters since start. `events_recorded` counts every accepted event, those a meter
    /// added to an open sum included.
    pub fn stats(&self) -> ProducerStats {
        let mut stats = self.shared.stats.snapshot();
        stats.events_recorded = self.shared.staging.recorded();
        stats
    }

    /// What a validated event costs against the buffer bound.
    pub fn buffer_cost(payload_len: usize, partition_key_len: usize) -> usize {
        payload_len + partition_key_len + RECORD_OVERHEAD_BYTES
    }

    fn accepted(&self) {
        self.shared.metrics.events_recorded.increment(1);
        self.shared.stats.events_recorded.add(1);
    }
}

#[cfg(test)]
mod plain_tests;

#[cfg(test)]
mod window_tests;
