//! Seeded fault injection around the consumer's ports: throttling (fails before applying),
//! lost responses (applies, then fails) and a crash (after N operations every call fails until
//! [`Faults::recover`]), shared by every wrapped store so a crash stops them all at once —
//! like a Lambda process dying mid-batch. The schedule is the pipeline's
//! ([`awsmp_aws::fault::FaultSchedule`]): one form of fault injection for every
//! port of both crates, so one schedule can drive the consumer and the pipeline together.

use std::collections::HashSet;

use async_trait::async_trait;
use awsmp_contract::keys::{GroupKey, RowKey};
use awsmp_contract::retry::Retryable;
use awsmp_contract::row::RawUsageRow;
use chrono::{DateTime, Utc};

pub use awsmp_aws::fault::{FaultKind, FaultSchedule, Injected};

use crate::domain::row::RowWrite;
use crate::error::{ConsumerError, Result};
use crate::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, FirstSeen, LaneItem, RejectedEvent,
    RejectedEventStore, UsageRowWriter,
};

/// A shared, seeded fault schedule (clones share it). The source of a faulted call's
/// [`ConsumerError::Store`] is an [`Injected`] naming the store, the operation and the kind.
#[derive(Debug, Clone)]
pub struct Faults(FaultSchedule);

impl From<FaultSchedule> for Faults {
    fn from(schedule: FaultSchedule) -> Self {
        Self(schedule)
    }
}

impl Faults {
    /// No faults yet, randomness from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(FaultSchedule::new(seed))
    }

    /// The underlying schedule (to share it with the pipeline's ports, or to script it).
    pub fn schedule(&self) -> &FaultSchedule {
        &self.0
    }

    /// Fail this share of calls with a retryable throttling error, before applying them.
    pub fn throttle(self, rate: f64) -> Self {
        Self(self.0.throttle(rate))
    }

    /// Apply this share of calls, then fail them with a retryable error (the response was lost).
    pub fn lose_responses(self, rate: f64) -> Self {
        Self(self.0.lose_responses(rate))
    }

    /// Fail this share of calls before applying them, with a retryable server error.
    pub fn fail_before_apply(self, rate: f64) -> Self {
        Self(self.0.fail_before_apply(rate))
    }

    /// Crash after `ops` more calls: every later call fails (not retryable) until `recover`.
    pub fn crash_after(&self, ops: u64) {
        self.0.crash_after(ops);
    }

    /// The process restarted: calls pass again (rates stay).
    pub fn recover(&self) {
        self.0.recover();
    }

    /// True once the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.0.crashed()
    }

    /// Number of faults injected so far.
    pub fn injected(&self) -> u64 {
        self.0.injected()
    }

    async fn run<T, F>(&self, store: &'static str, operation: &'static str, op: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        self.0
            .run(store, operation, op, |fault| ConsumerError::Store {
                store,
                retryable: fault.is_retryable(),
                source: Box::new(fault),
            })
            .await
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
        self.faults
            .run("dedup", "claim", self.inner.claim(claim))
            .await
    }

    async fn read_lane(&self, key: &str) -> Result<Option<LaneItem>> {
        self.faults
            .run("dedup", "read_lane", self.inner.read_lane(key))
            .await
    }

    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> Result<bool> {
        self.faults
            .run("dedup", "write_lane", self.inner.write_lane(item, expected))
            .await
    }

    async fn first_seen(&self, seen: &FirstSeen) -> Result<DateTime<Utc>> {
        self.faults
            .run("dedup", "first_seen", self.inner.first_seen(seen))
            .await
    }
}

#[async_trait]
impl<T: RejectedEventStore> RejectedEventStore for Faulty<T> {
    async fn put(&self, event: &RejectedEvent) -> Result<()> {
        self.faults
            .run("rejected-events", "put", self.inner.put(event))
            .await
    }
}

#[async_trait]
impl<T: UsageRowWriter> UsageRowWriter for Faulty<T> {
    async fn read(&self, key: &RowKey) -> Result<Option<RawUsageRow>> {
        self.faults
            .run("usage-rows", "read", self.inner.read(key))
            .await
    }
    async fn write(&self, write: &RowWrite) -> Result<bool> {
        self.faults
            .run("usage-rows", "write", self.inner.write(write))
            .await
    }
}

#[async_trait]
impl<T: FinalizedGroups> FinalizedGroups for Faulty<T> {
    async fn finalized(&self, groups: &[GroupKey]) -> Result<HashSet<GroupKey>> {
        self.faults
            .run(
                "finalized-groups",
                "finalized",
                self.inner.finalized(groups),
            )
            .await
    }
}
