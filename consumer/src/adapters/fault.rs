//! Seeded fault injection around any port: throttling (fails before applying), lost responses
//! (applies, then fails) and a crash (after N operations every call fails until
//! [`Faults::recover`]), shared by every wrapped store so a crash stops them all at once —
//! like a Lambda process dying mid-batch.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use awsmp_pipeline::domain::keys::{GroupKey, RowKey};
use awsmp_pipeline::domain::row::RawUsageRow;
use awsmp_retry::Retryable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::domain::row::RowWrite;
use crate::error::{ConsumerError, Result};
use crate::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, LaneItem, RejectedEvent,
    RejectedEventStore, UsageRowWriter,
};

#[derive(Debug)]
struct State {
    rng: StdRng,
    throttle_rate: f64,
    lost_response_rate: f64,
    crash_after: Option<u64>,
    ops: u64,
    crashed: bool,
    injected: u64,
}

/// A shared, seeded fault schedule.
#[derive(Debug, Clone)]
pub struct Faults(Arc<Mutex<State>>);

/// A fault the schedule injected, the source of the [`ConsumerError::Store`] a wrapped store
/// returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InjectedFault {
    /// Failed before applying (retryable).
    #[error("injected fault (throttled)")]
    Throttled,
    /// Applied, then failed (retryable).
    #[error("injected fault (response lost)")]
    ResponseLost,
    /// The consumer crashed: every call fails until [`Faults::recover`] (not retryable).
    #[error("injected fault (consumer crashed)")]
    Crashed,
}

impl Retryable for InjectedFault {
    fn is_retryable(&self) -> bool {
        !matches!(self, InjectedFault::Crashed)
    }
}

enum Plan {
    Pass,
    Throttle,
    LoseResponse,
    Crash,
}

impl Faults {
    /// No faults yet, randomness from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(State {
            rng: StdRng::seed_from_u64(seed),
            throttle_rate: 0.0,
            lost_response_rate: 0.0,
            crash_after: None,
            ops: 0,
            crashed: false,
            injected: 0,
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fail this share of calls with a retryable throttling error, before applying them.
    pub fn throttle(self, rate: f64) -> Self {
        self.state().throttle_rate = rate;
        self
    }

    /// Apply this share of calls, then fail them with a retryable error (the response was lost).
    pub fn lose_responses(self, rate: f64) -> Self {
        self.state().lost_response_rate = rate;
        self
    }

    /// Crash after `ops` more calls: every later call fails (not retryable) until `recover`.
    pub fn crash_after(&self, ops: u64) {
        let mut s = self.state();
        s.crash_after = Some(s.ops + ops);
    }

    /// The process restarted: calls pass again (rates stay).
    pub fn recover(&self) {
        let mut s = self.state();
        s.crashed = false;
        s.crash_after = None;
    }

    /// True once the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.state().crashed
    }

    /// Number of faults injected so far.
    pub fn injected(&self) -> u64 {
        self.state().injected
    }

    fn plan(&self) -> Plan {
        let mut s = self.state();
        if s.crashed {
            return Plan::Crash;
        }
        s.ops += 1;
        if s.crash_after.is_some_and(|n| s.ops > n) {
            s.crashed = true;
            s.injected += 1;
            return Plan::Crash;
        }
        let (t, l) = (s.throttle_rate, s.lost_response_rate);
        let roll: f64 = s.rng.random();
        if roll < t {
            s.injected += 1;
            Plan::Throttle
        } else if roll < t + l {
            s.injected += 1;
            Plan::LoseResponse
        } else {
            Plan::Pass
        }
    }

    async fn run<T, F>(&self, store: &'static str, op: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let fault = match self.plan() {
            Plan::Pass => return op.await,
            Plan::Throttle => InjectedFault::Throttled,
            Plan::LoseResponse => {
                op.await?;
                InjectedFault::ResponseLost
            }
            Plan::Crash => InjectedFault::Crashed,
        };
        Err(ConsumerError::Store {
            store,
            retryable: fault.is_retryable(),
            source: Box::new(fault),
        })
    }
}

/// A port wrapped with [`Faults`].
#[derive(Debug, Clone)]
pub struct Faulty<T> {
    inner: T,
    faults: Faults,
}

impl<T> Faulty<T> {
    /// Wrap `inner`.
    pub fn new(inner: T, faults: Faults) -> Self {
        Self { inner, faults }
    }
}

#[async_trait]
impl<T: DedupStore> DedupStore for Faulty<T> {
    async fn claim(&self, claim: &DedupClaim) -> Result<ClaimOutcome> {
        self.faults.run("dedup", self.inner.claim(claim)).await
    }

    async fn read_lane(&self, key: &str) -> Result<Option<LaneItem>> {
        self.faults.run("dedup", self.inner.read_lane(key)).await
    }

    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> Result<bool> {
        self.faults
            .run("dedup", self.inner.write_lane(item, expected))
            .await
    }
}

#[async_trait]
impl<T: RejectedEventStore> RejectedEventStore for Faulty<T> {
    async fn put(&self, event: &RejectedEvent) -> Result<()> {
        self.faults
            .run("rejected-events", self.inner.put(event))
            .await
    }
}

#[async_trait]
impl<T: UsageRowWriter> UsageRowWriter for Faulty<T> {
    async fn read(&self, key: &RowKey) -> Result<Option<RawUsageRow>> {
        self.faults.run("usage-rows", self.inner.read(key)).await
    }
    async fn write(&self, write: &RowWrite) -> Result<bool> {
        self.faults.run("usage-rows", self.inner.write(write)).await
    }
}

#[async_trait]
impl<T: FinalizedGroups> FinalizedGroups for Faulty<T> {
    async fn finalized(&self, groups: &[GroupKey]) -> Result<HashSet<GroupKey>> {
        self.faults
            .run("finalized-groups", self.inner.finalized(groups))
            .await
    }
}
