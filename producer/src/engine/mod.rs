//! The background task: linger windows (with optional collapse), packing, per-shard budgets,
//! PutRecords calls, retries of failed entries, hand-back, flush and shutdown.
//!
//! Every byte it holds is covered by a [`Reservation`] taken at `record()`, released when
//! Kinesis acknowledges the record or the caller receives it back: the buffer bound covers
//! staged, queued, in-flight, retrying and undelivered data alike.
//!
//! One module per step an event takes: [`window`] (linger, collapse, packing), [`dispatch`]
//! (per-shard queues and PutRecords calls), [`retries`] (re-sending failed entries as they
//! were), [`shard_map`] (shard refresh and per-shard budgets), [`accounting`] (acks, hand-back,
//! flush epochs).

mod accounting;
mod dispatch;
mod record;
mod retries;
mod shard_map;
mod window;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until};
use tracing::{Instrument, debug, error, info_span};

use crate::budget::ShardBudget;
use crate::handoff::{Command, EngineParts, Reservation};
use crate::outcome::{FlushOutcome, Undelivered};
use crate::partition::ShardMap;
use crate::shards::{ShardMapError, ShardMapSource};
use crate::sink::RecordSink;
use dispatch::{CallResult, InFlightCall};
use record::KRecord;
use retries::RetryQueue;
use window::Window;
pub(crate) use window::size_trigger;

/// Commands taken per wake-up besides the one that woke the task.
const COMMAND_BURST: usize = 1024;
/// How soon the task looks again at staged bytes it found no window for.
const STAGED_RECHECK: Duration = Duration::from_millis(1);

/// Starts the background task on `runtime`.
pub(crate) fn spawn<S: RecordSink, M: ShardMapSource>(
    runtime: &tokio::runtime::Handle,
    parts: EngineParts<S, M>,
) {
    let span = info_span!("awsmp_producer", stream = %parts.config.stream_name);
    let rng = match parts.config.jitter_seed {
        Some(seed) => StdRng::seed_from_u64(seed),
        None => StdRng::from_os_rng(),
    };
    let engine = Engine {
        window: Window::new(&parts.config),
        ready: Vec::new(),
        ready_unknown: VecDeque::new(),
        rr: 0,
        retries: RetryQueue::default(),
        in_flight: JoinSet::new(),
        calls: HashMap::new(),
        budgets: HashMap::new(),
        budget_wake: None,
        shard_map: None,
        refresh_task: None,
        next_refresh: Instant::now(),
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

enum Wake {
    Call(Result<(tokio::task::Id, CallResult), JoinError>),
    Refresh(Result<Result<ShardMap, ShardMapError>, JoinError>),
    Cmd(Option<Command>),
    /// Events were staged.
    Staged,
    Timer,
}

struct Engine<S, M> {
    parts: EngineParts<S, M>,
    window: Window,
    /// Ready records per shard of the current map, plus those of unknown shard.
    ready: Vec<VecDeque<KRecord>>,
    ready_unknown: VecDeque<KRecord>,
    rr: usize,
    retries: RetryQueue,
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
            self.take_staged(false);
            self.on_timers(now);
            self.dispatch(now);
            self.answer_flushes();
            self.update_gauges();
            if self.input_closed && self.is_idle() {
                break;
            }
            let wake = self.wait(now).await;
            self.on_wake(wake);
        }
        self.finish();
    }

    /// Sleeps until a call completes, the shard listing returns, a command arrives or the
    /// next deadline passes.
    async fn wait(&mut self, now: Instant) -> Wake {
        let deadline = self.next_deadline(now);
        let has_calls = !self.in_flight.is_empty();
        let has_refresh = self.refresh_task.is_some();
        let input_open = !self.input_closed;
        // With a window open, the linger (or the size trigger) closes it: staging more needs
        // no wake-up but one every pack step, to pack what was staged while the window is open.
        let no_window = self.window.opened_at.is_none();
        let in_flight = &mut self.in_flight;
        let refresh = &mut self.refresh_task;
        let rx = &mut self.parts.rx;
        let staging = &*self.parts.staging;
        tokio::select! {
            biased;
            Some(done) = in_flight.join_next_with_id(), if has_calls => Wake::Call(done),
            r = async { refresh.as_mut().expect("guarded by has_refresh").await }, if has_refresh => Wake::Refresh(r),
            cmd = rx.recv(), if input_open => Wake::Cmd(cmd),
            () = staging.first_staged(), if input_open && no_window => Wake::Staged,
            () = staging.trigger_crossed(), if input_open => Wake::Staged,
            () = staging.step_crossed(), if input_open => Wake::Staged,
            _ = sleep_until(deadline) => Wake::Timer,
        }
    }

    fn on_wake(&mut self, wake: Wake) {
        match wake {
            Wake::Call(done) => self.on_call_done(done),
            Wake::Refresh(r) => {
                self.refresh_task = None;
                self.on_refresh(r);
            }
            Wake::Cmd(None) => {
                // Every handle is gone: deliver what is buffered, then stop.
                self.take_staged(true);
                self.input_closed = true;
                self.closing = true;
                self.close_window();
            }
            Wake::Cmd(Some(cmd)) => {
                self.on_command(cmd);
                // Take a burst of commands per wake-up: one select per event is the
                // bottleneck at high rates.
                for _ in 0..COMMAND_BURST {
                    match self.parts.rx.try_recv() {
                        Ok(cmd) => self.on_command(cmd),
                        Err(_) => break,
                    }
                }
                if self.closing {
                    self.close_window();
                }
            }
            Wake::Staged | Wake::Timer => {}
        }
    }

    fn is_idle(&self) -> bool {
        self.window.opened_at.is_none()
            && self.in_flight.is_empty()
            && self.retries.is_empty()
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
        if let Some(at) = self.retries.next_at() {
            d = d.min(at);
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
        // Staged bytes without a window: a push racing the last take; look again shortly.
        if self.window.opened_at.is_none() && self.parts.staging.bytes() > 0 {
            d = d.min(now + STAGED_RECHECK);
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
        while let Some(r) = self.retries.pop_due(now) {
            self.enqueue_ready(r);
        }
        self.maybe_refresh(now);
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Flush(tx) => {
                // Every event recorded before flush() was called is staged by now.
                self.take_staged(false);
                self.close_window();
                self.flush_waiters.push((self.epoch, tx));
                self.epoch += 1;
            }
            Command::TakeUndelivered(tx) => {
                let _ = tx.send(self.take_held());
            }
            Command::Shutdown(tx) => {
                // The last take: a record() after it gets its event back as `Closed`.
                self.take_staged(true);
                self.closing = true;
                self.shutdown_waiters.push(tx);
                self.close_window();
                // Senders still racing get `Closed`; buffered commands are still received.
                self.parts.rx.close();
            }
        }
    }

    /// Stages what `record()` left in the staging area (sealing it with `seal`).
    fn take_staged(&mut self, seal: bool) {
        let staging = self.parts.staging.clone();
        // Counted outstanding once per take, not per event: nothing is acknowledged meanwhile.
        let mut taken = 0u64;
        staging.take(seal, |incoming| {
            taken += 1;
            self.stage(incoming);
        });
        if taken > 0 {
            *self.outstanding.entry(self.epoch).or_default() += taken;
        }
        if self.parts.config.collapse {
            self.watch_folded(seal);
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
