//! The background task: linger windows (with optional collapse), packing, per-shard budgets,
//! PutRecords calls, retries of failed entries, hand-back, flush and shutdown.
//!
//! Every byte it holds is covered by a [`Reservation`] taken at `record()`, released when
//! Kinesis acknowledges the record or the caller receives it back: the buffer bound covers
//! staged, queued, in-flight, retrying and undelivered data alike.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until, timeout};
use tracing::{Instrument, debug, error, info_span, warn};

use crate::batch::{CallLimits, Packed, UserRec, pack};
use crate::budget::ShardBudget;
use crate::collapse::{CollapseMeta, Collapser};
use crate::config::ProducerConfig;
use crate::metrics::{Metrics, StatCounters};
use crate::partition::{ShardMap, partition_hash, partition_key};
use crate::producer::{
    Body, FlushOutcome, Incoming, RECORD_OVERHEAD_BYTES, Reservation, Undelivered,
    UndeliveredCallback, UndeliveredReason,
};
use crate::shards::{ShardMapError, ShardMapSource};
use crate::sink::{EntryOutcome, PutEntry, RecordSink, SinkError};
use crate::wire::{deaggregate, decode_event, encode_event};

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

pub(crate) fn spawn<S: RecordSink, M: ShardMapSource>(
    runtime: &tokio::runtime::Handle,
    parts: EngineParts<S, M>,
) {
    let span = info_span!("awsmp_producer", stream = %parts.config.stream_name);
    let rng = match parts.config.jitter_seed {
        Some(seed) => StdRng::seed_from_u64(seed),
        None => StdRng::from_os_rng(),
    };
    let now = Instant::now();
    let engine = Engine {
        window: Window::default(),
        ready: Vec::new(),
        ready_unknown: VecDeque::new(),
        rr: 0,
        retry_heap: BinaryHeap::new(),
        retry_seq: 0,
        in_flight: JoinSet::new(),
        calls: HashMap::new(),
        budgets: HashMap::new(),
        budget_wake: None,
        shard_map: None,
        refresh_task: None,
        next_refresh: now,
        refresh_failures: 0,
        outstanding: BTreeMap::new(),
        epoch: 0,
        flush_waiters: Vec::new(),
        shutdown_waiters: Vec::new(),
        held: Vec::new(),
        held_reservation: None,
        closing: false,
        input_closed: false,
        rng,
        parts,
    };
    runtime.spawn(engine.run().instrument(span));
}

/// Bookkeeping of one user record (a collapsed one stands for several recorded events).
struct UserMeta {
    enqueued_at: Instant,
    epoch: u64,
    constituents: u64,
    reservation: Reservation,
}

impl CollapseMeta for UserMeta {
    fn absorb(&mut self, other: Self) {
        self.enqueued_at = self.enqueued_at.min(other.enqueued_at);
        self.constituents += other.constituents;
        self.reservation.merge(other.reservation);
    }
}

#[derive(Default)]
struct Window {
    opened_at: Option<Instant>,
    bytes: usize,
    plain: Vec<UserRec<UserMeta>>,
    collapser: Collapser<UserMeta>,
}

/// What is kept per user record once packed (its bytes are charged to the record).
struct UserAck {
    enqueued_at: Instant,
    epoch: u64,
    constituents: u64,
}

/// One Kinesis record on its way.
struct KRecord {
    entry: PutEntry,
    route_hash: u128,
    size: usize,
    users: Vec<UserAck>,
    /// The buffer bytes of every user record inside: one release per record, not per event.
    reservation: Reservation,
    attempts: u32,
    deadline: Instant,
    maybe_delivered: bool,
    last_error: Option<String>,
    predicted_shard: Option<String>,
}

struct RetryItem {
    ready_at: Instant,
    seq: u64,
    record: KRecord,
}

impl PartialEq for RetryItem {
    fn eq(&self, other: &Self) -> bool {
        (self.ready_at, self.seq) == (other.ready_at, other.seq)
    }
}
impl Eq for RetryItem {}
impl PartialOrd for RetryItem {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for RetryItem {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.ready_at, self.seq).cmp(&(other.ready_at, other.seq))
    }
}

type CallResult = Result<Result<Vec<EntryOutcome>, SinkError>, tokio::time::error::Elapsed>;

struct InFlightCall {
    records: Vec<KRecord>,
    started: Instant,
}

enum Wake {
    Call(Result<(tokio::task::Id, CallResult), JoinError>),
    Refresh(Result<Result<ShardMap, ShardMapError>, JoinError>),
    Cmd(Option<Command>),
    Timer,
}

struct Engine<S, M> {
    parts: EngineParts<S, M>,
    window: Window,
    /// Ready records per shard of the current map, plus those of unknown shard.
    ready: Vec<VecDeque<KRecord>>,
    ready_unknown: VecDeque<KRecord>,
    rr: usize,
    retry_heap: BinaryHeap<Reverse<RetryItem>>,
    retry_seq: u64,
    in_flight: JoinSet<CallResult>,
    calls: HashMap<tokio::task::Id, InFlightCall>,
    budgets: HashMap<String, ShardBudget>,
    budget_wake: Option<Instant>,
    shard_map: Option<Arc<ShardMap>>,
    refresh_task: Option<JoinHandle<Result<ShardMap, ShardMapError>>>,
    next_refresh: Instant,
    refresh_failures: u32,
    /// Recorded events not yet acknowledged or handed back, per flush epoch.
    outstanding: BTreeMap<u64, u64>,
    epoch: u64,
    flush_waiters: Vec<(u64, oneshot::Sender<FlushOutcome>)>,
    shutdown_waiters: Vec<oneshot::Sender<FlushOutcome>>,
    /// Undelivered events waiting for the caller (no callback installed); still charged.
    held: Vec<Undelivered>,
    held_reservation: Option<Reservation>,
    closing: bool,
    input_closed: bool,
    rng: StdRng,
}

impl<S: RecordSink, M: ShardMapSource> Engine<S, M> {
    async fn run(mut self) {
        loop {
            let now = Instant::now();
            self.on_timers(now);
            self.dispatch(now);
            self.answer_flushes();
            self.update_gauges();
            if self.input_closed && self.is_idle() {
                break;
            }
            let deadline = self.next_deadline(now);
            let has_calls = !self.in_flight.is_empty();
            let has_refresh = self.refresh_task.is_some();
            let input_open = !self.input_closed;
            let wake = {
                let in_flight = &mut self.in_flight;
                let refresh = &mut self.refresh_task;
                let rx = &mut self.parts.rx;
                tokio::select! {
                    biased;
                    Some(done) = in_flight.join_next_with_id(), if has_calls => Wake::Call(done),
                    r = async { refresh.as_mut().expect("guarded by has_refresh").await }, if has_refresh => Wake::Refresh(r),
                    cmd = rx.recv(), if input_open => Wake::Cmd(cmd),
                    _ = sleep_until(deadline) => Wake::Timer,
                }
            };
            match wake {
                Wake::Call(done) => self.on_call_done(done),
                Wake::Refresh(r) => {
                    self.refresh_task = None;
                    self.on_refresh(r);
                }
                Wake::Cmd(None) => {
                    // Every handle is gone: deliver what is buffered, then stop.
                    self.input_closed = true;
                    self.closing = true;
                    self.close_window();
                }
                Wake::Cmd(Some(cmd)) => {
                    self.on_command(cmd);
                    // Take a burst of commands per wake-up: one select per event is the
                    // bottleneck at high rates.
                    for _ in 0..1024 {
                        match self.parts.rx.try_recv() {
                            Ok(cmd) => self.on_command(cmd),
                            Err(_) => break,
                        }
                    }
                    if self.closing {
                        self.close_window();
                    }
                }
                Wake::Timer => {}
            }
        }
        self.finish();
    }

    fn is_idle(&self) -> bool {
        self.window.opened_at.is_none()
            && self.in_flight.is_empty()
            && self.retry_heap.is_empty()
            && self.ready_unknown.is_empty()
            && self.ready.iter().all(VecDeque::is_empty)
    }

    fn finish(mut self) {
        if let Some(t) = self.refresh_task.take() {
            t.abort();
        }
        let undelivered = self.take_held();
        let mut outcome = Some(FlushOutcome { undelivered });
        for (_, w) in self.flush_waiters.drain(..) {
            let _ = w.send(outcome.take().unwrap_or_default());
        }
        for w in self.shutdown_waiters.drain(..) {
            let _ = w.send(outcome.take().unwrap_or_default());
        }
        if let Some(left) = outcome
            && !left.undelivered.is_empty()
        {
            // Nobody is left to hand these to: the handles were dropped without shutdown().
            error!(
                events = left.undelivered_events(),
                "producer dropped without shutdown(); undelivered events have no receiver"
            );
            self.parts
                .metrics
                .undelivered("NoReceiver", left.undelivered_events() as u64);
        }
        debug!("producer stopped");
    }

    fn next_deadline(&self, now: Instant) -> Instant {
        let mut d = now + Duration::from_secs(3600);
        if let Some(opened) = self.window.opened_at {
            d = d.min(opened + self.parts.config.linger);
        }
        if let Some(Reverse(top)) = self.retry_heap.peek() {
            d = d.min(top.ready_at);
        }
        if let Some(w) = self.budget_wake {
            d = d.min(w);
        }
        if self.refresh_task.is_none() {
            d = d.min(self.next_refresh);
        }
        // Queued records expire even when nothing else happens.
        let oldest = self
            .ready
            .iter()
            .chain(std::iter::once(&self.ready_unknown))
            .filter_map(|q| q.front().map(|r| r.deadline))
            .min();
        if let Some(o) = oldest {
            d = d.min(o);
        }
        d.max(now)
    }

    fn on_timers(&mut self, now: Instant) {
        if let Some(opened) = self.window.opened_at
            && (now >= opened + self.parts.config.linger || self.closing)
        {
            self.close_window();
        }
        if self.budget_wake.is_some_and(|w| w <= now) {
            self.budget_wake = None;
        }
        while self
            .retry_heap
            .peek()
            .is_some_and(|Reverse(top)| top.ready_at <= now)
        {
            let Reverse(item) = self.retry_heap.pop().expect("peeked");
            self.enqueue_ready(item.record);
        }
        if self.refresh_task.is_none() && now >= self.next_refresh {
            let source = self.parts.shards.clone();
            self.refresh_task = Some(tokio::spawn(
                async move { source.shard_map().await }.instrument(info_span!("list_shards")),
            ));
            // Pushed further on completion; this stops a second spawn meanwhile.
            self.next_refresh = now + self.parts.config.shard_refresh_interval;
        }
    }

    fn on_refresh(&mut self, r: Result<Result<ShardMap, ShardMapError>, JoinError>) {
        let now = Instant::now();
        match r {
            Ok(Ok(map)) => {
                self.parts.metrics.shard_refresh("ok");
                StatCounters::add(&self.parts.stats.shard_refreshes, 1);
                self.parts.metrics.shards.set(map.len() as f64);
                self.refresh_failures = 0;
                self.next_refresh = now + self.parts.config.shard_refresh_interval;
                let changed = self.shard_map.as_deref() != Some(&map);
                if changed {
                    debug!(shards = map.len(), "shard map updated");
                    self.budgets
                        .retain(|id, _| map.shards().iter().any(|s| &s.shard_id == id));
                    self.shard_map = Some(Arc::new(map));
                    self.reroute();
                }
            }
            other => {
                let reason = match &other {
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                    Ok(Ok(_)) => unreachable!("handled above"),
                };
                self.parts.metrics.shard_refresh("error");
                self.refresh_failures += 1;
                // Back off 1 s, 2 s, 4 s… up to the refresh interval.
                let wait = Duration::from_secs(1 << self.refresh_failures.min(6))
                    .min(self.parts.config.shard_refresh_interval);
                self.next_refresh = now + wait;
                warn!(error = %reason, retry_in_ms = wait.as_millis() as u64, "ListShards failed; keeping the previous shard map");
            }
        }
    }

    /// The map is stale (a record landed on another shard than predicted): list again soon.
    fn shard_map_stale(&mut self) {
        let soon = Instant::now() + Duration::from_millis(100);
        if self.refresh_task.is_none() && self.next_refresh > soon {
            self.next_refresh = soon;
        }
    }

    fn reroute(&mut self) {
        let mut all: Vec<KRecord> = self.ready_unknown.drain(..).collect();
        for q in &mut self.ready {
            all.extend(q.drain(..));
        }
        let n = self.shard_map.as_ref().map_or(0, |m| m.len());
        self.ready = (0..n).map(|_| VecDeque::new()).collect();
        self.rr = 0;
        for r in all {
            self.enqueue_ready(r);
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Record(incoming) => self.stage(incoming),
            Command::Flush(tx) => {
                self.close_window();
                self.flush_waiters.push((self.epoch, tx));
                self.epoch += 1;
            }
            Command::TakeUndelivered(tx) => {
                let _ = tx.send(self.take_held());
            }
            Command::Shutdown(tx) => {
                self.closing = true;
                self.shutdown_waiters.push(tx);
                self.close_window();
                // Senders still racing get `Closed`; buffered commands are still received.
                self.parts.rx.close();
            }
        }
    }

    fn stage(&mut self, incoming: Incoming) {
        let Incoming {
            body,
            partition_key,
            hash,
            enqueued_at,
            reservation,
        } = incoming;
        *self.outstanding.entry(self.epoch).or_default() += 1;
        let meta = UserMeta {
            enqueued_at,
            epoch: self.epoch,
            constituents: 1,
            reservation,
        };
        let w = &mut self.window;
        w.opened_at.get_or_insert_with(Instant::now);
        w.bytes += meta.reservation.bytes();
        match body {
            Body::Encoded(payload) => w.plain.push(UserRec {
                payload,
                partition_key,
                hash,
                meta,
            }),
            Body::Event { event, payload_len } => {
                w.collapser.add(event, partition_key, payload_len, meta);
            }
        }
        // Size trigger: a window worth a few full PutRecords calls, or a quarter of the buffer,
        // goes out without waiting for the linger.
        let trigger =
            (4 * crate::limits::MAX_BYTES_PER_PUT).min(self.parts.config.max_buffered_bytes / 4);
        if self.window.bytes >= trigger {
            self.close_window();
        }
    }

    fn close_window(&mut self) {
        if self.window.opened_at.is_none() {
            return;
        }
        let mut window = std::mem::take(&mut self.window);
        let mut users = std::mem::take(&mut window.plain);
        let mut collapsed_away = 0u64;
        for c in window.collapser.drain() {
            let payload = bytes::Bytes::from(encode_event(&c.event));
            let pk = partition_key(
                &c.event.license_arn,
                &c.event.customer_aws_account_id,
                &c.event.dimension,
            );
            let mut meta = c.meta;
            collapsed_away += meta.constituents - 1;
            meta.reservation
                .shrink_to(payload.len() + pk.len() + RECORD_OVERHEAD_BYTES);
            users.push(UserRec {
                payload,
                hash: partition_hash(&pk),
                partition_key: pk,
                meta,
            });
        }
        if collapsed_away > 0 {
            self.parts
                .metrics
                .events_collapsed
                .increment(collapsed_away);
        }
        let map = self.shard_map.clone();
        let packed = pack(
            users,
            |h| map.as_ref().and_then(|m| m.shard_index(h)),
            self.parts.config.aggregation,
            self.parts.config.max_aggregate_bytes,
        );
        for p in packed {
            let r = self.new_record(p);
            self.enqueue_ready(r);
        }
    }

    fn new_record(&self, p: Packed<UserMeta>) -> KRecord {
        let mut metas = p.users.into_iter();
        let first = metas
            .next()
            .expect("a record holds at least one user record");
        let mut oldest = first.enqueued_at;
        let mut reservation = first.reservation;
        let mut users = vec![UserAck {
            enqueued_at: first.enqueued_at,
            epoch: first.epoch,
            constituents: first.constituents,
        }];
        for u in metas {
            oldest = oldest.min(u.enqueued_at);
            reservation.merge(u.reservation);
            users.push(UserAck {
                enqueued_at: u.enqueued_at,
                epoch: u.epoch,
                constituents: u.constituents,
            });
        }
        KRecord {
            size: p.entry.billed_size(),
            entry: p.entry,
            route_hash: p.route_hash,
            users,
            reservation,
            attempts: 0,
            deadline: oldest + self.parts.config.record_ttl,
            maybe_delivered: false,
            last_error: None,
            predicted_shard: None,
        }
    }

    fn enqueue_ready(&mut self, mut r: KRecord) {
        let idx = self.shard_map.as_ref().and_then(|m| {
            m.shard_index(r.route_hash)
                .map(|i| (i, m.shards()[i].shard_id.clone()))
        });
        match idx {
            Some((i, id)) if i < self.ready.len() => {
                r.predicted_shard = Some(id);
                self.ready[i].push_back(r);
            }
            _ => {
                r.predicted_shard = None;
                self.ready_unknown.push_back(r);
            }
        }
    }

    fn dispatch(&mut self, now: Instant) {
        let max = self.parts.config.max_in_flight;
        while self.in_flight.len() < max {
            let nq = self.ready.len() + 1;
            let mut limits = CallLimits::default();
            let mut batch: Vec<KRecord> = Vec::new();
            for k in 0..nq {
                let qi = (self.rr + k) % nq;
                loop {
                    let q = if qi < self.ready.len() {
                        &mut self.ready[qi]
                    } else {
                        &mut self.ready_unknown
                    };
                    let Some(front) = q.front() else { break };
                    if now >= front.deadline {
                        let r = q.pop_front().expect("front exists");
                        self.hand_back(
                            r,
                            |r| UndeliveredReason::Expired {
                                last_error: r.last_error.clone(),
                            },
                            "RecordTtlExpired",
                        );
                        continue;
                    }
                    if !limits.fits(front.size) {
                        break;
                    }
                    let size = front.size;
                    if let Some(shard) = front.predicted_shard.clone() {
                        let budget = self
                            .budgets
                            .entry(shard)
                            .or_insert_with(|| ShardBudget::new(now));
                        if let Err(wait) = budget.try_take(now, size) {
                            let at = now + wait;
                            self.budget_wake = Some(self.budget_wake.map_or(at, |w| w.min(at)));
                            break;
                        }
                    }
                    let q = if qi < self.ready.len() {
                        &mut self.ready[qi]
                    } else {
                        &mut self.ready_unknown
                    };
                    limits.add(size);
                    batch.push(q.pop_front().expect("front exists"));
                    if limits.is_full() {
                        break;
                    }
                }
                if limits.is_full() {
                    break;
                }
            }
            self.rr = (self.rr + 1) % nq;
            if batch.is_empty() {
                break;
            }
            self.spawn_call(batch, now);
        }
    }

    fn spawn_call(&mut self, records: Vec<KRecord>, now: Instant) {
        let entries: Vec<PutEntry> = records.iter().map(|r| r.entry.clone()).collect();
        let bytes: usize = records.iter().map(|r| r.size).sum();
        let span = info_span!("put_records", entries = entries.len(), bytes);
        let sink = self.parts.sink.clone();
        let limit = self.parts.config.put_timeout;
        let handle = self
            .in_flight
            .spawn(async move { timeout(limit, sink.put_records(entries)).await }.instrument(span));
        StatCounters::add(&self.parts.stats.put_calls, 1);
        self.calls.insert(
            handle.id(),
            InFlightCall {
                records,
                started: now,
            },
        );
    }

    fn on_call_done(&mut self, done: Result<(tokio::task::Id, CallResult), JoinError>) {
        let now = Instant::now();
        let (id, result) = match done {
            Ok((id, r)) => (id, Ok(r)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(call) = self.calls.remove(&id) else {
            error!("completed PutRecords call is unknown");
            return;
        };
        self.parts
            .metrics
            .put_latency
            .record(now.saturating_duration_since(call.started).as_secs_f64());
        let records = call.records;
        match result {
            Ok(Ok(Ok(outcomes))) if outcomes.len() == records.len() => {
                self.parts.metrics.call("ok");
                for (r, o) in records.into_iter().zip(outcomes) {
                    match o {
                        EntryOutcome::Ok { shard_id, .. } => {
                            if r.predicted_shard.as_ref().is_some_and(|p| *p != shard_id) {
                                self.shard_map_stale();
                            }
                            self.ack(r, now);
                        }
                        EntryOutcome::Throttled => {
                            self.throttled(&r, now);
                            self.retry(r, "ProvisionedThroughputExceededException".into(), now);
                        }
                        EntryOutcome::Failed {
                            code,
                            message,
                            retryable: true,
                        } => self.retry(r, format!("{code}: {message}"), now),
                        EntryOutcome::Failed {
                            code,
                            message,
                            retryable: false,
                        } => self.hand_back(
                            r,
                            |_| UndeliveredReason::Rejected {
                                code: code.clone(),
                                message: message.clone(),
                            },
                            "Rejected",
                        ),
                    }
                }
            }
            Ok(Ok(Ok(outcomes))) => {
                self.parts.metrics.call("transient");
                let msg = format!(
                    "sink answered {} outcomes for {} entries",
                    outcomes.len(),
                    records.len()
                );
                self.retry_all(records, msg, true, now);
            }
            Ok(Ok(Err(e))) => match e {
                SinkError::Throttled(msg) => {
                    self.parts.metrics.call("throttled");
                    for r in &records {
                        self.throttled(r, now);
                    }
                    self.retry_all(records, format!("throttled: {msg}"), false, now);
                }
                SinkError::Transient { .. } => {
                    self.parts.metrics.call("transient");
                    self.retry_all(records, e.to_string(), true, now);
                }
                SinkError::ResourceNotFound(ref msg) => {
                    self.parts.metrics.call("rejected");
                    warn!(error = %msg, "stream not found; handing records back");
                    self.shard_map_stale();
                    for r in records {
                        self.hand_back(
                            r,
                            |_| UndeliveredReason::Rejected {
                                code: "ResourceNotFoundException".into(),
                                message: msg.clone(),
                            },
                            "Rejected",
                        );
                    }
                }
                SinkError::Rejected { ref message, .. } => {
                    self.parts.metrics.call("rejected");
                    warn!(error = %message, "PutRecords rejected; handing records back");
                    for r in records {
                        self.hand_back(
                            r,
                            |_| UndeliveredReason::Rejected {
                                code: "Rejected".into(),
                                message: message.clone(),
                            },
                            "Rejected",
                        );
                    }
                }
            },
            Ok(Err(_elapsed)) => {
                self.parts.metrics.call("timeout");
                let msg = format!(
                    "PutRecords timed out after {:?}",
                    self.parts.config.put_timeout
                );
                self.retry_all(records, msg, true, now);
            }
            Err(join) => {
                self.parts.metrics.call("transient");
                error!(error = %join, "PutRecords task failed");
                self.retry_all(records, format!("sink task failed: {join}"), true, now);
            }
        }
    }

    fn throttled(&mut self, r: &KRecord, now: Instant) {
        self.parts.metrics.throttles.increment(1);
        StatCounters::add(&self.parts.stats.throttles, 1);
        if let Some(shard) = &r.predicted_shard
            && let Some(b) = self.budgets.get_mut(shard)
        {
            b.exhaust(now);
        }
    }

    fn retry_all(&mut self, records: Vec<KRecord>, msg: String, maybe_applied: bool, now: Instant) {
        for mut r in records {
            r.maybe_delivered |= maybe_applied;
            self.retry(r, msg.clone(), now);
        }
    }

    /// Schedules another attempt of the same bytes after a full-jitter backoff, or hands the
    /// record back when that would outlive its TTL.
    fn retry(&mut self, mut r: KRecord, error: String, now: Instant) {
        r.attempts += 1;
        r.last_error = Some(error);
        let cap = self.parts.config.retry.cap(r.attempts);
        let delay = Duration::from_nanos(self.rng.random_range(0..=cap.as_nanos() as u64));
        let ready_at = now + delay;
        if ready_at >= r.deadline {
            self.hand_back(
                r,
                |r| UndeliveredReason::Expired {
                    last_error: r.last_error.clone(),
                },
                "RecordTtlExpired",
            );
            return;
        }
        self.parts.metrics.retries.increment(1);
        StatCounters::add(&self.parts.stats.retries, 1);
        self.retry_seq += 1;
        self.retry_heap.push(Reverse(RetryItem {
            ready_at,
            seq: self.retry_seq,
            record: r,
        }));
    }

    /// Settles the users of one record, one map update per run of equal epochs.
    fn settle_users(&mut self, users: &[UserAck]) {
        let mut run: Option<(u64, u64)> = None;
        for u in users {
            run = match run {
                Some((e, n)) if e == u.epoch => Some((e, n + u.constituents)),
                Some((e, n)) => {
                    self.settle(e, n);
                    Some((u.epoch, u.constituents))
                }
                None => Some((u.epoch, u.constituents)),
            };
        }
        if let Some((e, n)) = run {
            self.settle(e, n);
        }
    }

    fn settle(&mut self, epoch: u64, constituents: u64) {
        if let Some(n) = self.outstanding.get_mut(&epoch) {
            *n -= constituents.min(*n);
            if *n == 0 {
                self.outstanding.remove(&epoch);
            }
        }
    }

    fn ack(&mut self, r: KRecord, now: Instant) {
        let m = &self.parts.metrics;
        m.records_acked.increment(1);
        m.bytes_acked.increment(r.size as u64);
        StatCounters::add(&self.parts.stats.records_acked, 1);
        StatCounters::add(&self.parts.stats.bytes_acked, r.size as u64);
        let mut events = 0;
        for u in &r.users {
            self.parts
                .metrics
                .record_to_ack
                .record(now.saturating_duration_since(u.enqueued_at).as_secs_f64());
            events += u.constituents;
        }
        self.settle_users(&r.users);
        // `r.reservation` drops here: the record's bytes return to the buffer.
        self.parts.metrics.events_acked.increment(events);
        StatCounters::add(&self.parts.stats.events_acked, events);
    }

    /// Gives the record's events back to the caller: to the callback now, else held (still
    /// charged against the buffer) for the next flush/shutdown/take_undelivered.
    fn hand_back(
        &mut self,
        r: KRecord,
        reason: impl Fn(&KRecord) -> UndeliveredReason,
        code: &'static str,
    ) {
        let why = reason(&r);
        let payloads: Vec<bytes::Bytes> = match deaggregate(&r.entry.data) {
            Ok(us) => us.into_iter().map(|u| u.data).collect(),
            Err(_) => Vec::new(),
        };
        let mut out = Vec::with_capacity(r.users.len());
        let mut events = 0u64;
        self.settle_users(&r.users);
        for (i, u) in r.users.iter().enumerate() {
            events += u.constituents;
            match payloads.get(i).map(|p| decode_event(p)) {
                Some(Ok(event)) => {
                    let partition_key = partition_key(
                        &event.license_arn,
                        &event.customer_aws_account_id,
                        &event.dimension,
                    );
                    out.push(Undelivered {
                        event,
                        partition_key,
                        reason: why.clone(),
                        attempts: r.attempts,
                        maybe_delivered: r.maybe_delivered,
                        constituents: u.constituents as usize,
                    });
                }
                _ => {
                    // Our own encoding failed to decode: a bug, never expected (round trips are
                    // property-tested). Say so loudly rather than pretend.
                    error!(
                        events = u.constituents,
                        "internal error: an undelivered record could not be decoded"
                    );
                    self.parts
                        .metrics
                        .undelivered("InternalDecode", u.constituents);
                }
            }
        }
        warn!(
            events,
            reason = code,
            attempts = r.attempts,
            "events handed back undelivered"
        );
        self.parts.metrics.undelivered(code, events);
        StatCounters::add(&self.parts.stats.events_undelivered, events);
        match &self.parts.on_undelivered {
            // The record's reservation drops after the callback has the events.
            Some(cb) => {
                // A panicking callback must not take the background task (and every buffered
                // event) down with it.
                let n = out.len();
                let cb = cb.clone();
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || cb(out))).is_err()
                {
                    error!(
                        events = n,
                        "on_undelivered callback panicked; those events were handed to it"
                    );
                }
            }
            None => {
                self.held.extend(out);
                match &mut self.held_reservation {
                    Some(h) => h.merge(r.reservation),
                    None => self.held_reservation = Some(r.reservation),
                }
            }
        }
    }

    /// Hands the held undelivered events over; their bytes are released.
    fn take_held(&mut self) -> Vec<Undelivered> {
        self.held_reservation = None;
        std::mem::take(&mut self.held)
    }

    fn answer_flushes(&mut self) {
        if self.flush_waiters.is_empty() {
            return;
        }
        let oldest_open = self.outstanding.keys().next().copied();
        let (done, pending): (Vec<_>, Vec<_>) = self
            .flush_waiters
            .drain(..)
            .partition(|(epoch, _)| oldest_open.is_none_or(|o| o > *epoch));
        self.flush_waiters = pending;
        for (_, tx) in done {
            let undelivered = self.take_held();
            let _ = tx.send(FlushOutcome { undelivered });
        }
    }

    fn update_gauges(&self) {
        let max = self.parts.config.max_buffered_bytes;
        let held = max.saturating_sub(self.parts.sem.available_permits());
        let m = &self.parts.metrics;
        m.buffered_bytes.set(held as f64);
        m.buffer_fill.set(held as f64 / max as f64);
        m.in_flight.set(self.in_flight.len() as f64);
    }
}
