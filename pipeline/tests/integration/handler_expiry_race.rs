//! The expiry race (docs/guarantees.md, "Submitter and expiry: an attempt on file is
//! reconciled, never expired"): expiry decides from a snapshot while a submitter run that
//! chose its buckets before the hour turned marks, sends and writes back. Each schedule is
//! forced step by step (a gate per step), with a billable window of 6 hours, over the
//! in-memory aggregated store (plain `cargo test`) and over the DynamoDB adapter on the local
//! stack (`#[ignore]`d; `scripts/test` runs them), so the adapter's condition expressions run
//! the same schedules as their memory twin.
//!
//! Run against the stack: `awsmp-local up && set -a && . $AWSMP_LOCAL_DIR/env && set +a &&
//! cargo test -p awsmp-pipeline --test integration handler_expiry_race:: -- --include-ignored`

use crate::contract_support;
use crate::handler_support::{self, Hooked};

use async_trait::async_trait;
use awsmp_aws::emf::MetricsSink;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::PipelineError;
use awsmp_pipeline::adapters::dynamodb::DynamoDbAggregatedStore;
use awsmp_pipeline::adapters::memory::{MemoryAggregatedStore, MemoryMeteringApi};
use awsmp_pipeline::handlers::expiry::{ATTEMPT_IN_FLIGHT_SECS, ExpiryOutput, expire_with};
use awsmp_pipeline::handlers::submitter::{SubmitterOutput, submit_with};
use awsmp_pipeline::handlers::{ExpiryDeps, SubmitterDeps};
use awsmp_pipeline::ports::{AggregatedItem, AggregatedStore, MeteringApi};
use chrono::{DateTime, Duration, Utc};
use std::sync::Arc;
use tokio::sync::watch;

/// How long a schedule waits for one of its steps: far beyond a step's time on a loaded machine
/// (the dynalite variants' calls take milliseconds). `AWSMP_TEST_GATE_TIMEOUT_SECS` overrides
/// the 60 s: `scripts/mutants` sets 10 s, as a mutant that breaks a schedule leaves its gates
/// to time out, and its tests run on the memory adapters only.
fn gate_timeout() -> std::time::Duration {
    let secs = std::env::var("AWSMP_TEST_GATE_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    std::time::Duration::from_secs(secs)
}

/// One step of a schedule: opened once, awaited by any number of waiters.
#[derive(Clone)]
struct Gate(Arc<watch::Sender<bool>>);

impl Gate {
    fn new() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }
    fn open(&self) {
        self.0.send_replace(true);
    }
    /// Wait until the gate opens. A schedule whose step never comes (a handler that no longer
    /// makes the call the gate stands for) fails after [`gate_timeout`] instead of hanging.
    async fn wait(&self) {
        let mut rx = self.0.subscribe();
        tokio::time::timeout(gate_timeout(), rx.wait_for(|open| *open))
            .await
            .expect("the schedule's step never came: a gate stayed closed")
            .expect("gate alive");
    }
}

/// Where a store or API call pauses: gates to open, then gates to wait for.
#[derive(Clone, Default)]
struct Pause {
    open: Vec<Gate>,
    wait: Vec<Gate>,
}

impl Pause {
    fn waits(gates: &[&Gate]) -> Self {
        Self {
            open: Vec::new(),
            wait: gates.iter().map(|g| (*g).clone()).collect(),
        }
    }
    fn opens(gates: &[&Gate]) -> Self {
        Self {
            open: gates.iter().map(|g| (*g).clone()).collect(),
            wait: Vec::new(),
        }
    }
    fn then_waits(mut self, gates: &[&Gate]) -> Self {
        self.wait.extend(gates.iter().map(|g| (*g).clone()));
        self
    }
    async fn run(&self) {
        for g in &self.open {
            g.open();
        }
        for g in &self.wait {
            g.wait().await;
        }
    }
}

/// One stage's view of the aggregated table, pausing around the calls a schedule orders.
#[derive(Clone, Default)]
struct Pauses {
    before_read: Pause,
    /// After a pending read that found a record.
    after_found: Pause,
    before_mark: Pause,
    after_mark: Pause,
    before_write: Pause,
    after_write: Pause,
}

#[async_trait]
impl handler_support::Hooks for Pauses {
    async fn before_read(&self) {
        self.before_read.run().await;
    }
    async fn after_found(&self) {
        self.after_found.run().await;
    }
    async fn before_mark(&self) {
        self.before_mark.run().await;
    }
    async fn after_mark(&self) {
        self.after_mark.run().await;
    }
    async fn before_write(&self) {
        self.before_write.run().await;
    }
    async fn after_write(&self) {
        self.after_write.run().await;
    }
}

/// `BatchMeterUsage` (the in-memory ledger), pausing around each call.
struct CallPauses {
    before_call: Pause,
    after_call: Pause,
}

#[async_trait]
impl handler_support::Hooks for CallPauses {
    async fn before_call(&self) {
        self.before_call.run().await;
    }
    async fn after_call(&self) {
        self.after_call.run().await;
    }
}

/// A table under test and the group-hour the schedules race on.
struct Table {
    store: Arc<dyn AggregatedStore>,
    group: GroupKey,
}

impl Table {
    fn memory() -> Self {
        Self {
            store: Arc::new(MemoryAggregatedStore::new("aggregated-usage")),
            group: handler_support::group(handler_support::DIMENSION, "2026-11-30T07"),
        }
    }

    async fn dynamodb() -> Self {
        let run = contract_support::run_id();
        let table = contract_support::stack_var("AWSMP_AGGREGATED_USAGE_TABLE");
        let client = contract_support::dynamodb().await;
        Self {
            store: Arc::new(DynamoDbAggregatedStore::new(client, table)),
            // An hour of 1978–1990: the shared table's other suites write hours of 2001–2012,
            // so their pending records never fall in the hours these runs read.
            group: contract_support::group(
                &contract_support::license(&run, 1),
                "api_calls",
                contract_support::hour(&run).minus_hours(200_000),
            ),
        }
    }

    /// The submitter's run starts at xx:59:50 with the record at its last billable age (5
    /// hours, in a 6-hour window).
    fn run_starts(&self) -> DateTime<Utc> {
        self.group.hour.start() + Duration::hours(5) + Duration::minutes(59) + Duration::seconds(50)
    }

    /// Expiry reads at xx+1:00:05: the hour has just left the window.
    fn expiry_reads(&self) -> DateTime<Utc> {
        self.group.hour.start() + Duration::hours(6) + Duration::seconds(5)
    }

    /// The record as the aggregator commits it, with an earlier unanswered attempt of the same
    /// quantity on file when `attempted`.
    async fn commit(&self, quantity: u64, attempted: bool) {
        let item = AggregatedItem::new(self.group.clone(), quantity, None);
        // Ten minutes before the run: a mark older than any submitter run (expiry decides on it).
        let earlier = self.run_starts() - Duration::minutes(10);
        assert!(self.store.put_if_absent(&item, earlier).await.unwrap());
        if attempted {
            self.store
                .mark_attempted(&self.group, quantity, earlier)
                .await
                .unwrap();
        }
    }

    async fn stored(&self) -> AggregatedItem {
        self.store.get(&self.group).await.unwrap().expect("record")
    }
}

/// What one schedule did.
struct Raced {
    submitter: Result<SubmitterOutput, PipelineError>,
    expiry: ExpiryOutput,
    submitter_metrics: MetricsSink,
    expiry_metrics: MetricsSink,
}

/// Run one submitter pass and one expiry sweep concurrently over `table`, each pausing where
/// `submitter`, `expiry` and `aws` say.
async fn race(
    table: &Table,
    aws: &Arc<MemoryMeteringApi>,
    submitter: Pauses,
    expiry: Pauses,
    calls: (Pause, Pause),
) -> Raced {
    race_at(table, aws, submitter, expiry, calls, table.expiry_reads()).await
}

/// [`race`] with expiry's clock at `expiry_at`.
async fn race_at(
    table: &Table,
    aws: &Arc<MemoryMeteringApi>,
    submitter: Pauses,
    expiry: Pauses,
    (before_call, after_call): (Pause, Pause),
    expiry_at: DateTime<Utc>,
) -> Raced {
    let mut config = handler_support::config(&[("AWSMP_BILLABLE_WINDOW_HOURS", "6")]);
    // Expiry reads back no further than the window: the raced hour is the only expired one,
    // so records other tests leave pending in the shared table are never its business.
    config.time = config.time.with_expiry_lookback_hours(6).expect("lookback");
    let submitter_metrics = MetricsSink::capture("submitter");
    let expiry_metrics = MetricsSink::capture("expiry");
    let submitter_deps = SubmitterDeps {
        config: config.clone(),
        aggregated: Arc::new(Hooked {
            inner: table.store.clone(),
            hooks: submitter,
        }),
        deprovisioning: None,
        metrics: submitter_metrics.clone(),
        clock: Arc::new(FixedClock::new(table.run_starts())),
    };
    let expiry_deps = ExpiryDeps {
        config,
        aggregated: Arc::new(Hooked {
            inner: table.store.clone(),
            hooks: expiry,
        }),
        metrics: expiry_metrics.clone(),
        clock: Arc::new(FixedClock::new(expiry_at)),
    };
    let inner: Arc<dyn MeteringApi> = aws.clone();
    let api = Hooked {
        inner,
        hooks: CallPauses {
            before_call,
            after_call,
        },
    };
    let (submitter, expiry) = tokio::join!(
        submit_with(&submitter_deps, &api),
        expire_with(&expiry_deps)
    );
    Raced {
        submitter,
        expiry: expiry.expect("expiry run"),
        submitter_metrics,
        expiry_metrics,
    }
}

/// The race of the issue: the run chose the record before the hour turned; expiry reads it with
/// no attempt on file; the submitter marks and sends it; AWS bills it; only then does expiry
/// write. Expiry's `SubmissionExpired` must not land: the record ends `Success` with the
/// `MeteringRecordId` AWS returned.
async fn billed_while_expiry_decides(table: Table) {
    // GIVEN a pending record of 40 at its last billable age, no attempt on file
    table.commit(40, false).await;
    let aws = Arc::new(MemoryMeteringApi::default());
    let (expiry_read, billed, expiry_wrote) = (Gate::new(), Gate::new(), Gate::new());

    // WHEN expiry reads between the run's bucket choice and its mark, and writes after AWS
    // billed the call, before the submitter's write-back
    let out = race(
        &table,
        &aws,
        Pauses {
            before_mark: Pause::waits(&[&expiry_read]),
            before_write: Pause::waits(&[&expiry_wrote]),
            ..Pauses::default()
        },
        Pauses {
            before_write: Pause::opens(&[&expiry_read]).then_waits(&[&billed]),
            after_write: Pause::opens(&[&expiry_wrote]),
            ..Pauses::default()
        },
        (Pause::waits(&[&expiry_read]), Pause::opens(&[&billed])),
    )
    .await;

    // THEN AWS billed it once, and the stored status says so, with AWS's MeteringRecordId
    let ledger = aws.ledger();
    assert_eq!(ledger.len(), 1, "AWS billed the record");
    let stored = table.stored().await;
    assert_eq!(
        (stored.pending, stored.status, stored.metering_record_id),
        (
            false,
            Some(AggregatedStatus::Success),
            Some(ledger[0].metering_record_id.clone())
        ),
        "billed, so Success — never SubmissionExpired"
    );
    assert_eq!(
        (
            out.expiry.records_expired,
            out.expiry.records_changed_meanwhile
        ),
        (0, 1),
        "expiry's write did not land; the next run decides again"
    );
    assert_eq!(
        out.expiry_metrics
            .total(metrics::USAGE_SUBMISSION_EXPIRED.name()),
        0.0
    );
    let submitted = out.submitter.expect("the run succeeds");
    assert_eq!(submitted.statuses.get("Success"), Some(&1));
}

#[tokio::test]
async fn a_record_billed_while_expiry_decides_ends_success() {
    billed_while_expiry_decides(Table::memory()).await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn a_record_billed_while_expiry_decides_ends_success_in_dynamodb() {
    billed_while_expiry_decides(Table::dynamodb().await).await;
}

/// The reverse order: expiry reads and writes `SubmissionExpired` after the run chose the
/// record and before it marks it. The submitter must not send it: nothing is billed, and the
/// stored `SubmissionExpired` stays true.
async fn expired_before_the_mark(table: Table) {
    // GIVEN the same record, no attempt on file
    table.commit(40, false).await;
    let aws = Arc::new(MemoryMeteringApi::default());
    let expiry_wrote = Gate::new();

    // WHEN expiry finalizes it between the run's bucket choice and its mark
    let out = race(
        &table,
        &aws,
        Pauses {
            before_mark: Pause::waits(&[&expiry_wrote]),
            ..Pauses::default()
        },
        Pauses {
            after_write: Pause::opens(&[&expiry_wrote]),
            ..Pauses::default()
        },
        (Pause::default(), Pause::default()),
    )
    .await;

    // THEN it is expired, and AWS was never asked to bill it
    assert!(aws.ledger().is_empty(), "an expired record is never sent");
    assert_eq!(aws.calls(), 0);
    let stored = table.stored().await;
    assert_eq!(
        (stored.pending, stored.status),
        (false, Some(AggregatedStatus::SubmissionExpired))
    );
    assert_eq!(out.expiry.records_expired, 1);
    let submitted = out.submitter.expect("expiry winning is not an error");
    assert!(submitted.statuses.is_empty());
    assert_eq!(submitted.finalized_meanwhile, 1);
}

#[tokio::test]
async fn a_record_expired_before_its_mark_is_not_sent() {
    expired_before_the_mark(Table::memory()).await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn a_record_expired_before_its_mark_is_not_sent_in_dynamodb() {
    expired_before_the_mark(Table::dynamodb().await).await;
}

/// `NeedsReconciliation` is conditional on the attempt expiry read: with an earlier attempt
/// on file (billed by AWS, answer lost), expiry reads it and decides `NeedsReconciliation`;
/// the run resends the record (a new attempt), AWS answers the identical retry `Success`;
/// expiry's write must not land, and the record ends `Success` with AWS's id.
async fn reconciled_while_expiry_decides(table: Table) {
    // GIVEN a record whose earlier attempt AWS billed without an answer reaching us
    table.commit(40, true).await;
    let aws = Arc::new(MemoryMeteringApi::default());
    let id = aws.prebill(table.group.clone(), 40);
    let (expiry_read, billed, expiry_wrote) = (Gate::new(), Gate::new(), Gate::new());

    // WHEN expiry reads before the run's new attempt and writes after AWS answered it
    let out = race(
        &table,
        &aws,
        Pauses {
            before_mark: Pause::waits(&[&expiry_read]),
            before_write: Pause::waits(&[&expiry_wrote]),
            ..Pauses::default()
        },
        Pauses {
            before_write: Pause::opens(&[&expiry_read]).then_waits(&[&billed]),
            after_write: Pause::opens(&[&expiry_wrote]),
            ..Pauses::default()
        },
        (Pause::waits(&[&expiry_read]), Pause::opens(&[&billed])),
    )
    .await;

    // THEN the answered attempt decides: Success with the id AWS gave the first time
    let stored = table.stored().await;
    assert_eq!(
        (stored.pending, stored.status, stored.metering_record_id),
        (false, Some(AggregatedStatus::Success), Some(id))
    );
    assert_eq!(
        (
            out.expiry.records_unresolved,
            out.expiry.records_changed_meanwhile
        ),
        (0, 1)
    );
    assert_eq!(
        out.expiry_metrics
            .total(metrics::USAGE_NEEDS_RECONCILIATION.name()),
        0.0
    );
    out.submitter.expect("the run succeeds");
}

#[tokio::test]
async fn reconciliation_of_an_attempt_that_was_resent_meanwhile_does_not_land() {
    reconciled_while_expiry_decides(Table::memory()).await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn reconciliation_of_an_attempt_that_was_resent_meanwhile_does_not_land_in_dynamodb() {
    reconciled_while_expiry_decides(Table::dynamodb().await).await;
}

/// Expiry reads *after* the run's mark (the attempt in flight is the one it reads) and would
/// decide before AWS answers. The mark is seconds old: the run that wrote it may still be
/// answered, so expiry leaves the record (`records_attempt_in_flight`), and the answer decides:
/// `Success` with AWS's id, no reconciliation, no conflict. (Before expiry waited for marks in
/// flight, it wrote `NeedsReconciliation` here, on usage AWS had billed and the run knew it.)
async fn answered_while_expiry_reads_the_mark(table: Table) {
    // GIVEN the record, no attempt on file
    table.commit(40, false).await;
    let aws = Arc::new(MemoryMeteringApi::default());
    let (marked, expiry_read) = (Gate::new(), Gate::new());

    // WHEN expiry reads after the mark, and the call is answered only once it has
    let out = race(
        &table,
        &aws,
        Pauses {
            after_mark: Pause::opens(&[&marked]),
            ..Pauses::default()
        },
        Pauses {
            before_read: Pause::waits(&[&marked]),
            after_found: Pause::opens(&[&expiry_read]),
            ..Pauses::default()
        },
        (Pause::waits(&[&expiry_read]), Pause::default()),
    )
    .await;

    // THEN expiry left it, and the answer is the record's status
    let ledger = aws.ledger();
    assert_eq!(ledger.len(), 1);
    let stored = table.stored().await;
    assert_eq!(
        (stored.pending, stored.status, stored.metering_record_id),
        (
            false,
            Some(AggregatedStatus::Success),
            Some(ledger[0].metering_record_id.clone())
        )
    );
    assert_eq!(
        (
            out.expiry.records_unresolved,
            out.expiry.records_attempt_in_flight
        ),
        (0, 1)
    );
    assert_eq!(
        out.expiry_metrics
            .total(metrics::USAGE_NEEDS_RECONCILIATION.name()),
        0.0
    );
    out.submitter.expect("the run succeeds");
}

#[tokio::test]
async fn an_attempt_in_flight_is_left_to_its_answer() {
    answered_while_expiry_reads_the_mark(Table::memory()).await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn an_attempt_in_flight_is_left_to_its_answer_in_dynamodb() {
    answered_while_expiry_reads_the_mark(Table::dynamodb().await).await;
}

/// The guard behind it: a mark expiry reads as older than any run (expiry's clock past
/// `ATTEMPT_IN_FLIGHT_SECS` after the mark, as if the run's clock lagged) is decided
/// `NeedsReconciliation`, true (possibly billed); if that run's answer still comes, its
/// `Success` write-back finds the record finalized, and that is an error with a metric,
/// carrying the `MeteringRecordId` — never dropped.
async fn answered_after_reconciliation(table: Table) {
    // GIVEN the record, no attempt on file
    table.commit(40, false).await;
    let aws = Arc::new(MemoryMeteringApi::default());
    let (marked, expiry_wrote) = (Gate::new(), Gate::new());
    let late = table.run_starts() + Duration::seconds(ATTEMPT_IN_FLIGHT_SECS);

    // WHEN expiry reads after the mark, as of a mark older than any run, and writes before
    // the call is answered
    let out = race_at(
        &table,
        &aws,
        Pauses {
            after_mark: Pause::opens(&[&marked]),
            ..Pauses::default()
        },
        Pauses {
            before_read: Pause::waits(&[&marked]),
            after_write: Pause::opens(&[&expiry_wrote]),
            ..Pauses::default()
        },
        (Pause::waits(&[&expiry_wrote]), Pause::default()),
        late,
    )
    .await;

    // THEN the record says "possibly billed", and the AWS answer is surfaced, not dropped
    let ledger = aws.ledger();
    assert_eq!(ledger.len(), 1);
    let stored = table.stored().await;
    assert_eq!(
        (stored.pending, stored.status),
        (false, Some(AggregatedStatus::NeedsReconciliation))
    );
    assert_eq!(out.expiry.records_unresolved, 1);
    let e = out.submitter.expect_err("a lost write-back is an error");
    let text = e.to_string();
    assert!(
        text.contains(&ledger[0].metering_record_id) && text.contains("NeedsReconciliation"),
        "{text}"
    );
    assert_eq!(e.kind(), "WriteBackConflict");
    assert_eq!(
        out.submitter_metrics
            .total(metrics::WRITE_BACK_CONFLICT.name()),
        1.0
    );
}

#[tokio::test]
async fn an_answer_after_reconciliation_is_an_error_with_its_metering_record_id() {
    answered_after_reconciliation(Table::memory()).await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn an_answer_after_reconciliation_is_an_error_with_its_metering_record_id_in_dynamodb() {
    answered_after_reconciliation(Table::dynamodb().await).await;
}
