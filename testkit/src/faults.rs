//! The fault plan: for every port call, whether it fails and how, decided from the schedule's
//! seed and the call's identity (operation, key, and how often that key was called before),
//! never from the order concurrent calls happen to run in, so a schedule replays exactly.
//!
//! The plan also keeps each running invocation's frame: a crash (or the invocation's Lambda
//! timeout) ends it at that call, so every later call of the same invocation fails before
//! applying ([`Call::stopped`]); and, while faults are on, the virtual clock may move before a
//! call ([`FaultPlan::on_clock`]), so time passes between one call of an invocation and the
//! next — across an hour boundary, a window's close, a submitter run's budget.

use awsmp_contract::clock::{Clock, FixedClock};
use chrono::{DateTime, Duration, Timelike, Utc};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// What happens to one port call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Fails before applying with a retryable throttling error.
    Throttle,
    /// Applied, then the response is lost (a retryable error).
    LoseResponse,
    /// The invocation crashes before the call: nothing applied, no later call of the
    /// invocation applies either ([`Call::stopped`]), and its result is discarded.
    CrashBefore,
    /// The invocation crashes after the call was applied; nothing later applies.
    CrashAfter,
    /// Before the call, another stage runs one step (an adversarial interleaving).
    Preempt,
}

impl Fault {
    /// Its name in the trace and the summary.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Throttle => "throttle",
            Fault::LoseResponse => "lost-response",
            Fault::CrashBefore => "crash-before",
            Fault::CrashAfter => "crash-after",
            Fault::Preempt => "interleave",
        }
    }
}

/// Per-call probabilities of each fault, in parts per thousand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rates {
    /// [`Fault::Throttle`].
    pub throttle: u32,
    /// [`Fault::LoseResponse`] (write calls only).
    pub lose_response: u32,
    /// [`Fault::CrashBefore`] and [`Fault::CrashAfter`], each.
    pub crash: u32,
    /// [`Fault::Preempt`].
    pub preempt: u32,
}

/// A 64-bit mix (SplitMix64's finaliser): the same input gives the same output on every
/// platform and run, unlike `std`'s randomly keyed hasher.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// [`mix`] folded over the bytes of `parts`.
pub fn hash(seed: u64, parts: &[&str]) -> u64 {
    let mut h = mix(seed);
    for part in parts {
        for b in part.bytes() {
            h = mix(h ^ u64::from(b));
        }
        h = mix(h ^ 0xff);
    }
    h
}

/// Digits of a producer epoch (`p:{epoch}:{lane}:{seq}`, docs/row-contract.md): random per
/// producer instance, so never part of a fault decision.
const EPOCH_HEX_DIGITS: usize = 32;

/// `key` with every run of [`EPOCH_HEX_DIGITS`] or more hex digits replaced by `*`.
pub fn stable_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut run = String::new();
    for c in key.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        if run.len() >= EPOCH_HEX_DIGITS {
            out.push('*');
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// Frames of invocations that can run at once: the scheduler's step, a step of another stage
/// run at a preemption point ([`NESTED_FRAME`]), and expiry racing a submitter run
/// ([`RACE_FRAME`]).
const FRAMES: usize = 3;
/// The frame of a step run at a preemption point of another invocation's call.
pub const NESTED_FRAME: usize = 1;
/// The frame of expiry running side by side with a submitter run.
pub const RACE_FRAME: usize = 2;

tokio::task_local! {
    static FRAME: usize;
}

/// Run `f` as frame `frame`: its port calls belong to the invocation begun in it. Calls made
/// outside any frame scope (the scheduler's own steps, and tasks a handler spawns: the
/// submitter's write-backs) belong to frame 0.
pub async fn in_frame<F: Future>(frame: usize, f: F) -> F::Output {
    FRAME.scope(frame, f).await
}

fn current_frame() -> usize {
    FRAME.try_with(|f| *f).unwrap_or(0).min(FRAMES - 1)
}

/// One running invocation.
#[derive(Debug, Default, Clone, Copy)]
struct Frame {
    /// It crashed or timed out: every later call fails before applying.
    stopped: bool,
    /// Its start on the virtual clock and its Lambda timeout.
    deadline: Option<DateTime<Utc>>,
    /// Which invocation of the frame this is (counts [`FaultPlan::begin`]s).
    invocation: u64,
    /// Between [`FaultPlan::begin`] and [`FaultPlan::end`] (calls outside an invocation, as
    /// EventBridge's deliveries, are never held by an outlasting throttle).
    running: bool,
}

/// One invocation: its frame and its number in the frame.
type Invocation = (usize, u64);
/// A port call's operation and (stable) key.
type CallKey = (String, String);

#[derive(Debug, Default)]
struct State {
    calls: BTreeMap<(String, String), u32>,
    tally: BTreeMap<&'static str, u64>,
    frames: [Frame; FRAMES],
    enabled: bool,
    racing: bool,
    /// Tables the scheduler knows hold nothing pending during the current run.
    empty: EmptyTables,
    /// Groups (`GroupKey` text) a fault hit on the attempt path (mark, send, take back, write
    /// back): the only groups whose attempt may be left unresolved.
    attempt_faults: std::collections::BTreeSet<String>,
    /// Calls throttled for the rest of an invocation: a throttle that outlasts every retry
    /// policy, so the error reaches the handler.
    hot: BTreeMap<CallKey, Invocation>,
    /// Calls whose last attempt failed with a retryable fault, and in which invocation: the
    /// next call of the same operation and key in it is a retry.
    failed: BTreeMap<CallKey, Invocation>,
}

/// Tables whose pending index holds nothing, as the scheduler saw them at the start of a
/// fault-free run in which nothing else runs: that run's scans of them can only read nothing
/// ([`FaultPlan::empty_tables`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmptyTables {
    /// No raw usage row is pending.
    pub usage: bool,
    /// No aggregated record is pending.
    pub aggregated: bool,
}

/// The submitter's calls on one record's attempt: a fault on one of them (or the invocation
/// stopping before it) may leave an attempt on file unanswered.
const ATTEMPT_OPS: [&str; 3] = ["mark_attempted", "retract_attempt", "write_back"];

/// How time moves inside invocations: the clock, and per thousand calls how many see it move
/// first.
#[derive(Debug)]
struct Drift {
    clock: Arc<FixedClock>,
    per_mille: u32,
}

/// What the plan says about one port call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Call {
    /// The invocation already crashed or timed out: the call fails before applying, as after
    /// a [`Fault::CrashBefore`].
    pub stopped: bool,
    /// The fault, if any.
    pub fault: Option<Fault>,
    /// While expiry races a submitter run: how often the call yields to the other first.
    pub yields: u32,
    /// A number drawn for the call, which picks among the error codes of its fault (a
    /// throttle or a 5xx, both retryable; a lost answer or a 5xx after applying).
    pub variant: u64,
}

/// The fault a call's `roll` (0–999) draws at `r`; only a `write` may lose its response or
/// crash after applying.
fn pick(r: Rates, roll: u64, write: bool) -> Option<Fault> {
    let mut edge = 0;
    for (fault, rate, allowed) in [
        (Fault::Throttle, r.throttle, true),
        (Fault::LoseResponse, r.lose_response, write),
        (Fault::CrashBefore, r.crash, true),
        (Fault::CrashAfter, r.crash, write),
        (Fault::Preempt, r.preempt, true),
    ] {
        if !allowed {
            continue;
        }
        edge += u64::from(rate);
        if roll < edge {
            return Some(fault);
        }
    }
    None
}

/// The fault of a call of `call_key` in `invocation`: a throttle while an outlasting one holds
/// it (in a `running` invocation), else `fresh()`. A fresh throttle outlasts the retries in
/// one case of [`OUTLASTING_THROTTLE_ONE_IN`]; a call failed retryably is remembered, so its
/// repeat in the same invocation counts as a retry.
fn held_or(
    s: &mut State,
    running: bool,
    call_key: CallKey,
    invocation: Invocation,
    variant: u64,
    fresh: impl FnOnce() -> Option<Fault>,
) -> Option<Fault> {
    let pick = if running && s.hot.get(&call_key) == Some(&invocation) {
        *s.tally.entry("throttle-outlasting-retries").or_default() += 1;
        Some(Fault::Throttle)
    } else {
        fresh()
    };
    if running
        && pick == Some(Fault::Throttle)
        && (variant >> 32).is_multiple_of(OUTLASTING_THROTTLE_ONE_IN)
    {
        s.hot.insert(call_key.clone(), invocation);
    }
    if matches!(pick, Some(Fault::Throttle | Fault::LoseResponse)) {
        s.failed.insert(call_key, invocation);
    }
    pick
}

/// The schedule's fault plan, shared by every fault-injecting port.
#[derive(Debug)]
pub struct FaultPlan {
    seed: u64,
    rates: Rates,
    state: Mutex<State>,
    drift: Option<Drift>,
}

/// Salt of the clock-move decisions (a hash of their own, so fault decisions stay as they were).
const DRIFT_SALT: u64 = 0x7105_e7ad;
/// Salt of the race's yield decisions.
const YIELD_SALT: u64 = 0x51e1_d5ed;
/// Salt of the error-code variants and of which throttles outlast the retries.
const VARIANT_SALT: u64 = 0x7a41_a47e;
/// One throttle in this many outlasts every retry policy: the call stays throttled for the
/// rest of its invocation.
const OUTLASTING_THROTTLE_ONE_IN: u64 = 3;

/// The layer whose retry loop a repeated call is: the pipeline's stores, `BatchMeterUsage`
/// (the submitter), or another's (the consumer, meter-ingest, the lifecycle).
fn retry_class(operation: &str) -> &'static str {
    const PIPELINE: [&str; 11] = [
        "pending_groups",
        "read_pending_rows",
        "finalize_row",
        "finalize_folded",
        "expire_bucket",
        "put_if_absent",
        "get",
        "pending",
        "mark_attempted",
        "retract_attempt",
        "write_back",
    ];
    if operation == "batch_meter_usage" {
        "retry-marketplace"
    } else if PIPELINE.contains(&operation) {
        "retry-pipeline-store"
    } else {
        "retry-other"
    }
}
/// Longest ordinary move of the clock before a call.
const MAX_DRIFT_SECS: u64 = 45;
/// Within this many seconds of an hour boundary, one move in two goes just past it.
const HOUR_LEAD_SECS: i64 = 300;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere, which the panic already reports.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FaultPlan {
    /// A plan for `seed` at `rates`, enabled.
    pub fn new(seed: u64, rates: Rates) -> Self {
        Self {
            seed,
            rates,
            state: Mutex::new(State {
                enabled: true,
                ..State::default()
            }),
            drift: None,
        }
    }

    /// Move `clock` before `per_mille` of the calls made while faults are on: by 1–45 s, or,
    /// within 5 minutes of an hour boundary, one move in two to just past it.
    pub fn on_clock(mut self, clock: Arc<FixedClock>, per_mille: u32) -> Self {
        self.drift = Some(Drift { clock, per_mille });
        self
    }

    /// Stop (or resume) injecting: the final drain of a schedule runs fault-free.
    pub fn set_enabled(&self, on: bool) {
        lock(&self.state).enabled = on;
    }

    /// Whether faults are being injected (off in the final drain).
    pub fn enabled(&self) -> bool {
        lock(&self.state).enabled
    }

    /// The fault for this call of `operation` on `key`; `write` calls may also lose their
    /// response or crash after applying. A call of an invocation that already stopped gets
    /// [`Fault::CrashBefore`].
    pub fn decide(&self, operation: &str, key: &str, write: bool) -> Option<Fault> {
        let call = self.call(operation, key, write);
        if call.stopped {
            Some(Fault::CrashBefore)
        } else {
            call.fault
        }
    }

    /// True when [`FaultPlan::call`] would say nothing about the current frame's next call,
    /// whatever its operation and key: faults are off and the invocation has not stopped. A
    /// port then need not name the call's key (the fault-free drain's lookback scans make
    /// most calls of a schedule, and formatting their keys cost a tenth of it).
    pub fn quiet(&self) -> bool {
        let s = lock(&self.state);
        !s.enabled && !s.frames[current_frame()].stopped
    }

    /// Declare (or, with the default, withdraw) which tables hold nothing pending for the run
    /// about to start; only a fault-free run in which no other stage runs may declare any.
    pub fn set_empty_tables(&self, empty: EmptyTables) {
        lock(&self.state).empty = empty;
    }

    /// The tables declared empty, while the plan is [quiet](FaultPlan::quiet) (none
    /// otherwise): an index scan of one reads nothing, so a port may answer it without
    /// reading (the drain's age-out and expiry scan a year and a month of empty hours).
    pub fn empty_tables(&self) -> EmptyTables {
        let s = lock(&self.state);
        if !s.enabled && !s.frames[current_frame()].stopped {
            s.empty
        } else {
            EmptyTables::default()
        }
    }

    /// Everything the plan says about this call of `operation` on `key`: whether its
    /// invocation has stopped, its fault, and (racing) its yields. Before deciding, the clock
    /// may move, and an invocation past its Lambda timeout stops here.
    pub fn call(&self, operation: &str, key: &str, write: bool) -> Call {
        let frame = current_frame();
        let mut s = lock(&self.state);
        let on_attempt = ATTEMPT_OPS.contains(&operation);
        if s.frames[frame].stopped {
            if on_attempt {
                s.attempt_faults.insert(key.to_owned());
            }
            *s.tally.entry("stopped-after-crash").or_default() += 1;
            return Call {
                stopped: true,
                ..Call::default()
            };
        }
        if !s.enabled {
            return Call::default();
        }
        let key_text = key;
        let key = stable_key(key);
        let n = s
            .calls
            .entry((operation.to_owned(), key.clone()))
            .or_default();
        *n += 1;
        let n = n.to_string();
        let parts = [operation, key.as_str(), n.as_str()];
        let invocation = (frame, s.frames[frame].invocation);
        let call_key = (operation.to_owned(), key.clone());
        if s.failed.remove(&call_key) == Some(invocation) {
            *s.tally.entry(retry_class(operation)).or_default() += 1;
        }
        if let Some(now) = self.drift(&mut s, &parts)
            && s.frames[frame].deadline.is_some_and(|d| now > d)
        {
            // Lambda ends an invocation at its timeout: this call and every later one fail.
            *s.tally.entry("timed-out").or_default() += 1;
            s.frames[frame].stopped = true;
            if on_attempt {
                s.attempt_faults.insert(key_text.to_owned());
            }
            return Call {
                stopped: true,
                ..Call::default()
            };
        }
        // Expiry racing a submitter run is fault-free (it reads a bucket per hour of its
        // lookback, and under the schedule's rates almost every racing run failed before it
        // wrote); its calls still yield and see the clock move.
        let roll = if frame == RACE_FRAME {
            u64::MAX
        } else {
            hash(self.seed, &parts) % 1000
        };
        let variant = hash(self.seed ^ VARIANT_SALT, &parts);
        let running = s.frames[frame].running;
        let pick = held_or(&mut s, running, call_key, invocation, variant, || {
            pick(self.rates, roll, write)
        });
        if let Some(f) = pick {
            if on_attempt && f != Fault::Preempt {
                s.attempt_faults.insert(key_text.to_owned());
            }
            *s.tally.entry(f.name()).or_default() += 1;
            if matches!(f, Fault::CrashBefore | Fault::CrashAfter) {
                s.frames[frame].stopped = true;
            }
        }
        let yields = if s.racing {
            (hash(self.seed ^ YIELD_SALT, &parts) % 3) as u32
        } else {
            0
        };
        Call {
            stopped: false,
            fault: pick,
            yields,
            variant,
        }
    }

    /// Move the clock before the call named by `parts`, if the plan says so; the clock's
    /// reading when it has one.
    fn drift(&self, s: &mut State, parts: &[&str]) -> Option<DateTime<Utc>> {
        let d = self.drift.as_ref()?;
        let before = d.clock.now();
        let h = hash(self.seed ^ DRIFT_SALT, parts);
        if h % 1000 >= u64::from(d.per_mille) {
            return Some(before);
        }
        let to_boundary = 3600 - i64::from(before.minute() * 60 + before.second());
        let by = if (h >> 20).is_multiple_of(2) && to_boundary <= HOUR_LEAD_SECS {
            // Just past the next hour boundary: an hour closes, a window closes.
            Duration::seconds(to_boundary + 1 + ((h >> 24) % 20) as i64)
        } else {
            Duration::seconds(1 + ((h >> 24) % MAX_DRIFT_SECS) as i64)
        };
        d.clock.advance(by);
        *s.tally.entry("clock-moved-in-call").or_default() += 1;
        let after = d.clock.now();
        if before.date_naive() != after.date_naive() || before.hour() != after.hour() {
            *s.tally.entry("hour-crossed-in-call").or_default() += 1;
        }
        Some(after)
    }

    /// Count a fault the harness injected itself (a stream or delivery fault).
    pub fn count(&self, class: &'static str) {
        *lock(&self.state).tally.entry(class).or_default() += 1;
    }

    /// True when an injection site keyed by `parts` fires at `per_mille`.
    pub fn roll(&self, per_mille: u32, parts: &[&str]) -> bool {
        lock(&self.state).enabled && hash(self.seed ^ 0x5eed, parts) % 1000 < u64::from(per_mille)
    }

    /// Start an invocation in the current frame, with its Lambda `timeout` from now on the
    /// virtual clock: not crashed.
    pub fn begin(&self, timeout: Duration) {
        let deadline = self.drift.as_ref().map(|d| d.clock.now() + timeout);
        let mut s = lock(&self.state);
        let frame = &mut s.frames[current_frame()];
        *frame = Frame {
            deadline,
            invocation: frame.invocation + 1,
            running: true,
            ..Frame::default()
        };
    }

    /// End the current frame's invocation: true when it crashed or timed out (its result must
    /// be discarded). Calls made after it (outside any invocation) are not stopped.
    pub fn end(&self) -> bool {
        let mut s = lock(&self.state);
        let frame = &mut s.frames[current_frame()];
        let stopped = frame.stopped;
        *frame = Frame {
            invocation: frame.invocation,
            ..Frame::default()
        };
        stopped
    }

    /// Whether the current frame's invocation has crashed or timed out.
    pub fn crashed(&self) -> bool {
        lock(&self.state).frames[current_frame()].stopped
    }

    /// Expiry races a submitter run (`on`) or no longer: calls yield to each other.
    pub fn set_racing(&self, on: bool) {
        lock(&self.state).racing = on;
    }

    /// A fault hit a `BatchMeterUsage` call carrying `groups` (or it never reached AWS because
    /// its invocation had stopped, or an outage lost its answer).
    pub fn note_attempt_faults<'g>(&self, groups: impl IntoIterator<Item = &'g str>) {
        let mut s = lock(&self.state);
        s.attempt_faults
            .extend(groups.into_iter().map(str::to_owned));
    }

    /// Groups whose attempt an injected fault may have left unresolved
    /// ([`FaultPlan::note_attempt_faults`], and every fault on [`ATTEMPT_OPS`]).
    pub fn attempt_faults(&self) -> std::collections::BTreeSet<String> {
        lock(&self.state).attempt_faults.clone()
    }

    /// Faults injected so far, by class.
    pub fn tally(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.state).tally.clone()
    }
}

#[cfg(test)]
mod tests;
