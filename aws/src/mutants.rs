//! Deliberately broken variants of the pipeline, the consumer and the lifecycle's
//! deprovision-cleanup, compiled in only with the
//! test-only `mutants` feature, so the deterministic simulation (`simulation/`,
//! docs/simulation.md) can prove that its invariants catch each of them. Without the feature
//! [`active`] is the constant `false` and every hook compiles to nothing.
//!
//! One build runs every mutant: the simulator chooses the active one at run time ([`set`]).

/// A deliberately broken variant; each names the guarantee it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mutant {
    /// Cleanup stamps a folded row `Aggregated` whatever it holds now (drops late usage).
    CleanupUnconditional,
    /// The consumer's dedup ignores event ids: every delivery of an event is applied.
    DedupIgnoresEventIds,
    /// The submitter forgets the write-back of a `Success`: the record stays pending.
    SubmitterForgetsWriteBack,
    /// Expiry ignores attempts on file: a possibly billed record becomes `SubmissionExpired`.
    ExpiryIgnoresAttempts,
    /// The discoverer's fence ignores the ingest watermarks: hours are aggregated mid-ingest.
    FenceIgnoresWatermarks,
    /// A re-visit drops what it finds: rows whose cleanup was lost stay pending.
    RevisitDropsContributions,
    /// The deprovisioning flush never takes the still open hour: a license deprovisioned early
    /// in an hour has that hour billed only after it ends, too late for a window that closes
    /// minutes later.
    FlushSkipsCurrentHour,
    /// Deprovision-cleanup finalizes a license while its window is still open (it reads the
    /// index an hour ahead): the license leaves the index and the flush stops.
    CleanupFinalizesOpenWindow,
    /// The simulated event source mapping discards an exhausted batch without sending its
    /// invocation record to the on-failure destination.
    EsmDropsExhaustedBatch,
    /// meter-ingest accepts a dimension the module's mapping entry does not grant.
    IngestSkipsDimensionGrant,
    /// The consumer publishes its shard's watermark before its row writes, and retries every
    /// failed store call (up to ten times, whatever the error) as if that made the rows
    /// durable: a crash between the publish and the writes leaves the watermark past rows that
    /// are not written.
    WatermarkBeforeRows,
    /// Expiry's writes are conditional only on the record being pending (the expiry race at
    /// the window's close, docs/guarantees.md): a `SubmissionExpired` decided before a
    /// submitter run marked and sent the record lands over that mark.
    ExpiryWritePendingOnly,
    /// Expiry decides on an attempt a submitter run marked seconds ago (docs/guarantees.md,
    /// "Submitter and expiry"): `NeedsReconciliation` lands before the run's answer, on usage
    /// AWS bills moments later.
    ExpiryDecidesInFlight,
    /// The submitter reads every retryable `BatchMeterUsage` exception as proof that nothing
    /// was applied, a 5xx (`InternalServiceErrorException`) as a throttle: a call AWS applied
    /// before answering 5xx is not marked sent, its attempt is taken back, and the replay's
    /// `DuplicateRecord` is then read as someone else's record.
    Submitter5xxProvesUnapplied,
    /// The submitter's ordinary pass skips an hour in its last billable hour (an off-by-one at
    /// the window's edge): a record committed late, after faults held its hour, is never sent
    /// and expires.
    SubmitterSkipsLastHour,
}

impl Mutant {
    /// Every mutant, in declaration order.
    pub const ALL: [Mutant; 15] = [
        Mutant::CleanupUnconditional,
        Mutant::DedupIgnoresEventIds,
        Mutant::SubmitterForgetsWriteBack,
        Mutant::ExpiryIgnoresAttempts,
        Mutant::FenceIgnoresWatermarks,
        Mutant::RevisitDropsContributions,
        Mutant::FlushSkipsCurrentHour,
        Mutant::CleanupFinalizesOpenWindow,
        Mutant::EsmDropsExhaustedBatch,
        Mutant::IngestSkipsDimensionGrant,
        Mutant::WatermarkBeforeRows,
        Mutant::ExpiryWritePendingOnly,
        Mutant::ExpiryDecidesInFlight,
        Mutant::Submitter5xxProvesUnapplied,
        Mutant::SubmitterSkipsLastHour,
    ];

    /// Its name on the command line (`scripts/simulate --mutant NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Mutant::CleanupUnconditional => "cleanup-unconditional",
            Mutant::DedupIgnoresEventIds => "dedup-ignores-event-ids",
            Mutant::SubmitterForgetsWriteBack => "submitter-forgets-write-back",
            Mutant::ExpiryIgnoresAttempts => "expiry-ignores-attempts",
            Mutant::FenceIgnoresWatermarks => "fence-ignores-watermarks",
            Mutant::RevisitDropsContributions => "revisit-drops-contributions",
            Mutant::FlushSkipsCurrentHour => "flush-skips-current-hour",
            Mutant::CleanupFinalizesOpenWindow => "cleanup-finalizes-open-window",
            Mutant::EsmDropsExhaustedBatch => "esm-drops-exhausted-batch",
            Mutant::IngestSkipsDimensionGrant => "ingest-skips-dimension-grant",
            Mutant::WatermarkBeforeRows => "watermark-before-rows",
            Mutant::ExpiryWritePendingOnly => "expiry-write-pending-only",
            Mutant::ExpiryDecidesInFlight => "expiry-decides-in-flight",
            Mutant::Submitter5xxProvesUnapplied => "submitter-5xx-proves-unapplied",
            Mutant::SubmitterSkipsLastHour => "submitter-skips-last-hour",
        }
    }

    /// The mutant named `name`.
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// True when `mutant` is the active one (always false without the `mutants` feature).
#[inline(always)]
pub fn active(mutant: Mutant) -> bool {
    #[cfg(feature = "mutants")]
    {
        ACTIVE.load(std::sync::atomic::Ordering::Relaxed) == mutant as u8 + 1
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = mutant;
        false
    }
}

/// Make `mutant` the active one (`None`: the real code). Process-wide.
#[cfg(feature = "mutants")]
pub fn set(mutant: Option<Mutant>) {
    let v = mutant.map_or(0, |m| m as u8 + 1);
    ACTIVE.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// True when this build has the mutant hooks compiled in.
pub const COMPILED_IN: bool = cfg!(feature = "mutants");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for m in Mutant::ALL {
            assert_eq!(Mutant::from_name(m.name()), Some(m));
        }
        let names: std::collections::BTreeSet<_> = Mutant::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names.len(), Mutant::ALL.len());
        assert_eq!(Mutant::from_name("no-such-mutant"), None);
    }

    #[cfg(not(feature = "mutants"))]
    #[test]
    fn without_the_feature_no_mutant_is_ever_active() {
        assert!(Mutant::ALL.into_iter().all(|m| !active(m)));
    }
}
