//! The fault plan, the one form of fault injection of the repository: for every port call,
//! whether it fails and how ([`Fault`]), decided from the seed and the call's identity
//! (operation, key, and how often that key was called before), never from the order concurrent
//! calls happen to run in, so a schedule replays exactly — in the simulation's single-threaded
//! schedules and on a multi-threaded runtime (the load test) alike. Besides its seeded
//! [`Rates`], a plan takes faults aimed at the next calls of one operation
//! ([`FaultPlan::script`]) and a crash point ([`FaultPlan::crash_after`], ended by
//! [`FaultPlan::recover`]), and counts what it injected ([`FaultPlan::injected_by_kind`]).
//!
//! The plan also keeps each running invocation's frame: a crash (or the invocation's Lambda
//! timeout) ends it at that call, so every later call of the same invocation fails before
//! applying ([`Call::stopped`]); and, while faults are on, the virtual clock may move before a
//! call ([`FaultPlan::on_clock`]), so time passes between one call of an invocation and the
//! next — across an hour boundary, a window's close, a submitter run's budget.

use awsmp_contract::clock::{Clock, FixedClock};
use chrono::{DateTime, Duration, Timelike, Utc};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};

/// What happens to one port call: the one fault vocabulary. What tells them apart is whether
/// the call was applied, what the caller hears back, and whether the invocation goes on.
///
/// | fault | applied | the caller gets | the invocation |
/// |---|---|---|---|
/// | `Throttle` | no | the service's throttling error (retryable) | goes on |
/// | `FailBeforeApply` | no | a 5xx, or a connection that failed before the request arrived (retryable) | goes on |
/// | `ApplyThenFail` | yes | nothing: it crashes right after the call applied | ends |
/// | `LoseResponse` | yes | a timeout (retryable); a retry finds the call applied | goes on |
/// | `Crash` | no | nothing: it crashes before the call | ends |
/// | `Preempt` | yes | the answer, after another stage ran one step first | goes on |
///
/// After `Crash` or `ApplyThenFail` every later call of the invocation fails before applying,
/// not retryable ([`Call::stopped`]), until the invocation ends ([`FaultPlan::end`]) or the
/// process restarts ([`FaultPlan::recover`]); its result is discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// Refused before applying with a retryable throttling error.
    Throttle,
    /// Failed before applying with a retryable server error.
    FailBeforeApply,
    /// Applied, then the invocation crashed: the caller never hears back.
    ApplyThenFail,
    /// Applied, then the response is lost (a retryable timeout).
    LoseResponse,
    /// The invocation crashes before the call: nothing applied.
    Crash,
    /// Before the call, another stage runs one step (an adversarial interleaving).
    Preempt,
}

impl Fault {
    /// Every fault, in declaration order.
    pub const ALL: [Fault; 6] = [
        Fault::Throttle,
        Fault::FailBeforeApply,
        Fault::ApplyThenFail,
        Fault::LoseResponse,
        Fault::Crash,
        Fault::Preempt,
    ];

    /// Its name in traces and summaries.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Throttle => "throttle",
            Fault::FailBeforeApply => "fail-before-apply",
            Fault::ApplyThenFail => "apply-then-fail",
            Fault::LoseResponse => "lose-response",
            Fault::Crash => "crash",
            Fault::Preempt => "preempt",
        }
    }

    /// Whether it ends the invocation.
    pub fn ends_invocation(self) -> bool {
        matches!(self, Fault::ApplyThenFail | Fault::Crash)
    }
}

/// Per-call probabilities of each fault, in parts per thousand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rates {
    /// [`Fault::Throttle`].
    pub throttle: u32,
    /// [`Fault::FailBeforeApply`].
    pub fail_before_apply: u32,
    /// [`Fault::LoseResponse`] (write calls only).
    pub lose_response: u32,
    /// [`Fault::Crash`] and [`Fault::ApplyThenFail`] (write calls only), each.
    pub crash: u32,
    /// [`Fault::Preempt`].
    pub preempt: u32,
}

mod key;
mod pick;
pub use key::{hash, mix, stable_key};
use pick::{forced, held_or, pick, retry_class};

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
    /// Faults aimed at the next calls of an operation ([`FaultPlan::script`]).
    script: BTreeMap<String, VecDeque<Fault>>,
    /// Faults aimed at the first calls of an operation on every key
    /// ([`FaultPlan::script_each_key`]).
    script_each_key: BTreeMap<String, Vec<Fault>>,
    /// Calls decided while enabled (crashed ones excluded), for [`FaultPlan::crash_after`].
    ops: u64,
    /// The call past which the process crashes.
    crash_after: Option<u64>,
    /// An operation whose n-th next call crashes ([`FaultPlan::crash_at`]).
    crash_at: Option<(String, u32)>,
    /// Faults injected, by kind.
    injected: BTreeMap<Fault, u64>,
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
    /// a [`Fault::Crash`].
    pub stopped: bool,
    /// The fault, if any.
    pub fault: Option<Fault>,
    /// While expiry races a submitter run: how often the call yields to the other first.
    pub yields: u32,
    /// A number drawn for the call, which picks among the error codes of its fault (a
    /// throttle or a 5xx, both retryable; a lost answer or a 5xx after applying).
    pub variant: u64,
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
/// While expiry races a submitter run, a table call yields to the other fewer times than
/// this: a DynamoDB round trip takes about as long as another.
const RACE_STORE_YIELDS: u64 = 3;
/// While expiry races a submitter run, a `BatchMeterUsage` call yields fewer times than this
/// before AWS applies and answers it: a call to another service may take as long as expiry's
/// whole lookback scan (744 table reads, 8 at a time: about 100 turns of the race), so expiry
/// may read, decide and write while a record's call is in flight (in four races of five).
const RACE_MARKETPLACE_YIELDS: u64 = 500;
/// The operation name of a `BatchMeterUsage` call.
const MARKETPLACE_CALL: &str = "batch_meter_usage";
/// Salt of the error-code variants and of which throttles outlast the retries.
const VARIANT_SALT: u64 = 0x7a41_a47e;
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
    /// [`Fault::Crash`].
    pub fn decide(&self, operation: &str, key: &str, write: bool) -> Option<Fault> {
        let call = self.call(operation, key, write);
        if call.stopped {
            Some(Fault::Crash)
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
        let nth = *n;
        let n = n.to_string();
        let parts = [operation, key.as_str(), n.as_str()];
        let invocation = (frame, s.frames[frame].invocation);
        let call_key = (operation.to_owned(), key.clone());
        if s.failed.remove(&call_key) == Some(invocation) {
            *s.tally.entry(retry_class(operation)).or_default() += 1;
        }
        if let Some(now) = self.drift(&mut s, &parts, frame)
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
        let pick = match forced(&mut s, operation, nth) {
            Some(f) => Some(f),
            None => held_or(&mut s, running, call_key, invocation, variant, || {
                pick(self.rates, roll, write)
            }),
        };
        if let Some(f) = pick {
            if on_attempt && f != Fault::Preempt {
                s.attempt_faults.insert(key_text.to_owned());
            }
            *s.tally.entry(f.name()).or_default() += 1;
            *s.injected.entry(f).or_default() += 1;
            if f.ends_invocation() {
                s.frames[frame].stopped = true;
            }
        }
        let yields = if s.racing {
            self.race_yields(&parts)
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

    /// How often the call named by `parts` (its operation first) yields to the other side of
    /// a race before it runs.
    fn race_yields(&self, parts: &[&str]) -> u32 {
        let most = if parts.first() == Some(&MARKETPLACE_CALL) {
            RACE_MARKETPLACE_YIELDS
        } else {
            RACE_STORE_YIELDS
        };
        (hash(self.seed ^ YIELD_SALT, parts) % most) as u32
    }

    /// Move the clock before the call named by `parts` of `frame`, if the plan says so; the
    /// clock's reading when it has one.
    fn drift(&self, s: &mut State, parts: &[&str], frame: usize) -> Option<DateTime<Utc>> {
        let d = self.drift.as_ref()?;
        let before = d.clock.now();
        if frame == RACE_FRAME {
            // Expiry racing a submitter run does not move the clock itself: its lookback scan
            // (744 reads, 8 at a time) takes about a second in AWS, and at the race class's
            // rate of moves its calls took it past its 5-minute timeout before it wrote, in
            // nearly every race. It still sees the moves of the run's calls.
            return Some(before);
        }
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

    /// The next calls of `operation` (the name the wrapper gives it, e.g. `write_back`,
    /// `row-write`) get these faults, one per call, in order, ahead of the rates.
    pub fn script(&self, operation: &str, faults: impl IntoIterator<Item = Fault>) {
        lock(&self.state)
            .script
            .entry(operation.to_owned())
            .or_default()
            .extend(faults);
    }

    /// The first calls of `operation` on every key (a group, a row) get these faults, one per
    /// call, in order, ahead of the rates: "every record's `write_back` is throttled twice".
    /// A call's key counts its calls while the plan is enabled.
    pub fn script_each_key(&self, operation: &str, faults: impl IntoIterator<Item = Fault>) {
        lock(&self.state)
            .script_each_key
            .entry(operation.to_owned())
            .or_default()
            .extend(faults);
    }

    /// Crash after `calls` more calls: the next one is a [`Fault::Crash`], and every later
    /// call of the invocation fails before applying until [`FaultPlan::recover`] (or the
    /// invocation's [`FaultPlan::end`]).
    pub fn crash_after(&self, calls: u64) {
        let mut s = lock(&self.state);
        s.crash_after = Some(s.ops + calls);
    }

    /// Crash at the `nth` (from 1) next call of `operation`, as [`FaultPlan::crash_after`]
    /// does at a call count.
    pub fn crash_at(&self, operation: &str, nth: u32) {
        lock(&self.state).crash_at = Some((operation.to_owned(), nth));
    }

    /// The process restarted: the current frame's calls pass again and no crash point is
    /// armed (rates and scripts stay).
    pub fn recover(&self) {
        let mut s = lock(&self.state);
        s.crash_after = None;
        s.crash_at = None;
        s.frames[current_frame()].stopped = false;
    }

    /// Faults injected so far (a crash counts once, at its call; the calls it stopped are
    /// `stopped-after-crash` in the [tally](FaultPlan::tally), not faults of their own).
    pub fn injected(&self) -> u64 {
        lock(&self.state).injected.values().sum()
    }

    /// Faults injected so far, by kind.
    pub fn injected_by_kind(&self) -> BTreeMap<Fault, u64> {
        lock(&self.state).injected.clone()
    }
}

#[cfg(test)]
mod tests;
