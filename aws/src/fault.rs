//! Seeded fault injection, in one reusable form: a [`FaultSchedule`] decides, call by call,
//! whether a call passes, is throttled or fails before it is applied, is applied and then loses
//! its response, or finds the process crashed. Each crate wraps its own ports with it (the
//! pipeline's `adapters::fault::Faulty`, the consumer's `adapters::fault`), turning the
//! injected fault into the error its AWS adapter returns for the same failure.
//!
//! A schedule is shared (`Clone` shares it), so one crash stops every wrapped port at once —
//! like a Lambda process dying mid-batch — and one seed replays the same faults in the same
//! order. Besides rates, a schedule takes a script of faults for named operations ("the next
//! `write_back` loses its response"), which a simulator uses to aim at one step.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use awsmp_aws::error::StoreError;
//! use awsmp_aws::fault::{FaultKind, FaultSchedule};
//! use awsmp_aws::watermark::{MemoryWatermarkStore, WatermarkStore};
//!
//! let faults = FaultSchedule::new(7);
//! faults.script("advance", [FaultKind::LoseResponse]);
//! let store = MemoryWatermarkStore::new();
//! let at = "2026-11-30T10:00:00Z".parse().unwrap();
//! let lost = |fault| StoreError::MalformedItem { table: "watermarks".into(), detail: format!("{fault}") };
//! let first = faults.run("watermarks", "advance", store.advance("s", "shardId-0", at), lost).await;
//! assert!(first.is_err()); // applied, answer lost
//! let retry = faults.run("watermarks", "advance", store.advance("s", "shardId-0", at), lost).await;
//! assert!(!retry.unwrap()); // the retry finds it applied
//! assert_eq!(faults.injected(), 1);
//! # });
//! ```

use awsmp_contract::retry::Retryable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Refused with the service's throttling error before anything was applied (retryable).
    Throttle,
    /// Failed before anything was applied: a server error or a connection that failed before
    /// the request arrived (retryable).
    FailBeforeApply,
    /// Applied, then the response was lost (a timeout after the service acted; retryable).
    LoseResponse,
    /// The process crashed: this and every later call fails, not retryable, until
    /// [`FaultSchedule::recover`].
    Crash,
}

impl FaultKind {
    /// Every kind, in declaration order (for summaries).
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Throttle,
        FaultKind::FailBeforeApply,
        FaultKind::LoseResponse,
        FaultKind::Crash,
    ];

    /// A short name, for traces and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Throttle => "throttle",
            FaultKind::FailBeforeApply => "fail-before-apply",
            FaultKind::LoseResponse => "lose-response",
            FaultKind::Crash => "crash",
        }
    }
}

/// The error a faulted call carries as its source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("injected fault {} in {port}.{operation}", .kind.as_str())]
pub struct Injected {
    /// The wrapped port's name (the table or queue it plays), e.g. `aggregated-usage`.
    pub port: String,
    /// The port operation (the trait method's name), e.g. `write_back`.
    pub operation: &'static str,
    /// What was injected.
    pub kind: FaultKind,
}

impl Retryable for Injected {
    fn is_retryable(&self) -> bool {
        self.kind != FaultKind::Crash
    }
}

/// One injected fault, as the schedule logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// The schedule's call counter when it was injected (1 = the first call).
    pub call: u64,
    /// The fault.
    pub fault: Injected,
}

#[derive(Debug)]
struct State {
    rng: StdRng,
    throttle_rate: f64,
    lost_response_rate: f64,
    fail_before_rate: f64,
    crash_after: Option<u64>,
    ops: u64,
    crashed: bool,
    script: BTreeMap<String, VecDeque<FaultKind>>,
    log: Vec<FaultEvent>,
}

/// A shared, seeded fault schedule; clones share it.
#[derive(Debug, Clone)]
pub struct FaultSchedule(Arc<Mutex<State>>);

impl FaultSchedule {
    /// No faults yet; randomness from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(State {
            rng: StdRng::seed_from_u64(seed),
            throttle_rate: 0.0,
            lost_response_rate: 0.0,
            fail_before_rate: 0.0,
            crash_after: None,
            ops: 0,
            crashed: false,
            script: BTreeMap::new(),
            log: Vec::new(),
        })))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked mid-update of plain data.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Throttle this share of calls (0.0–1.0), before applying them.
    pub fn throttle(self, rate: f64) -> Self {
        self.state().throttle_rate = rate;
        self
    }

    /// Apply this share of calls, then lose their responses.
    pub fn lose_responses(self, rate: f64) -> Self {
        self.state().lost_response_rate = rate;
        self
    }

    /// Fail this share of calls before applying them, with a server error.
    pub fn fail_before_apply(self, rate: f64) -> Self {
        self.state().fail_before_rate = rate;
        self
    }

    /// The next calls of `operation` — a method name (`write_back`), or `port.method`
    /// (`aggregated-usage.write_back`) for one port only — get these faults, one per call, in
    /// order, ahead of the rates. A call that finds a script takes no random roll.
    pub fn script(&self, operation: &str, faults: impl IntoIterator<Item = FaultKind>) {
        self.state()
            .script
            .entry(operation.to_owned())
            .or_default()
            .extend(faults);
    }

    /// Crash after `ops` more calls: every later call fails (not retryable) until `recover`.
    pub fn crash_after(&self, ops: u64) {
        let mut s = self.state();
        s.crash_after = Some(s.ops + ops);
    }

    /// The process restarted: calls pass again (rates and scripts stay).
    pub fn recover(&self) {
        let mut s = self.state();
        s.crashed = false;
        s.crash_after = None;
    }

    /// True once the crash point was reached (and until `recover`).
    pub fn crashed(&self) -> bool {
        self.state().crashed
    }

    /// Calls the schedule decided, crashed ones after the crash excluded.
    pub fn calls(&self) -> u64 {
        self.state().ops
    }

    /// Faults injected so far (a crash counts once, at its crash point).
    pub fn injected(&self) -> u64 {
        self.state().log.len() as u64
    }

    /// Faults injected so far, by kind.
    pub fn injected_by_kind(&self) -> BTreeMap<FaultKind, u64> {
        let mut out = BTreeMap::new();
        for e in &self.state().log {
            *out.entry(e.fault.kind).or_default() += 1;
        }
        out
    }

    /// Every fault injected so far, in order.
    pub fn log(&self) -> Vec<FaultEvent> {
        self.state().log.clone()
    }

    /// Decide the next call of `port.operation`: `None` to pass it.
    pub fn decide(&self, port: &str, operation: &'static str) -> Option<Injected> {
        let mut s = self.state();
        let injected = |kind| Injected {
            port: port.to_owned(),
            operation,
            kind,
        };
        if s.crashed {
            return Some(injected(FaultKind::Crash));
        }
        s.ops += 1;
        let kind = if s.crash_after.is_some_and(|n| s.ops > n) {
            s.crashed = true;
            Some(FaultKind::Crash)
        } else if let Some(kind) = s.scripted(port, operation) {
            Some(kind)
        } else {
            s.roll()
        };
        let fault = injected(kind?);
        let call = s.ops;
        s.log.push(FaultEvent {
            call,
            fault: fault.clone(),
        });
        Some(fault)
    }

    /// Run `call` under the schedule: pass it, fail it before it runs, or run it and then fail
    /// (a lost response). `error` turns the injected fault into the port's error.
    pub async fn run<T, E, F>(
        &self,
        port: &str,
        operation: &'static str,
        call: F,
        error: impl FnOnce(Injected) -> E,
    ) -> std::result::Result<T, E>
    where
        F: Future<Output = std::result::Result<T, E>>,
    {
        match self.decide(port, operation) {
            None => call.await,
            Some(fault) if fault.kind == FaultKind::LoseResponse => {
                call.await?;
                Err(error(fault))
            }
            Some(fault) => Err(error(fault)),
        }
    }
}

impl State {
    fn scripted(&mut self, port: &str, operation: &str) -> Option<FaultKind> {
        let qualified = format!("{port}.{operation}");
        for key in [qualified.as_str(), operation] {
            if let Some(kind) = self.script.get_mut(key).and_then(VecDeque::pop_front) {
                return Some(kind);
            }
        }
        None
    }

    /// One roll of the seeded generator against the rates (one roll per call, so a seed's
    /// sequence does not depend on which rates are set).
    fn roll(&mut self) -> Option<FaultKind> {
        let (t, l, f) = (
            self.throttle_rate,
            self.lost_response_rate,
            self.fail_before_rate,
        );
        let roll: f64 = self.rng.random();
        if roll < t {
            Some(FaultKind::Throttle)
        } else if roll < t + l {
            Some(FaultKind::LoseResponse)
        } else if roll < t + l + f {
            Some(FaultKind::FailBeforeApply)
        } else {
            None
        }
    }
}
