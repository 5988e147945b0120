//! Per-record decisions: emit their metric and write them back in the background, retried
//! under [`WRITE_BACK_RETRY`]; every write-back is joined before the run ends.
//!
//! A write-back that finds its record no longer pending reads it back: the record holding this
//! very outcome is an earlier delivery of the same write whose answer was lost; anything else
//! (expiry's `NeedsReconciliation` for the attempt in flight, whose answer came after) is
//! [`PipelineError::WriteBackConflict`]. The record keeps what its finalizer wrote — a status
//! that is true (`NeedsReconciliation`: possibly billed) — and AWS's answer is kept where an
//! operator finds it: an ERROR log line with the `MeteringRecordId`, the `WriteBackConflict`
//! metric (alarmed) and the run's error; CloudTrail holds the call itself
//! (docs/operations.md, "Write-back conflict").

use super::{MAX_WRITE_BACKS_IN_FLIGHT, Run, WRITE_BACK_RETRY};
use crate::domain::batch::SubmitRecord;
use crate::domain::results::Decision;
use crate::error::{PipelineError, Result};
use crate::handlers::STORE_RETRY;
use crate::ports::{AggregatedStore, AttemptCondition, WriteBack};
use awsmp_aws::emf::Metric;
use awsmp_aws::retry;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::status::AggregatedStatus;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Seconds per day, for the aggregated-usage TTL.
const SECONDS_PER_DAY: i64 = 86_400;

/// Outcome of one background write-back.
pub(super) type WriteBackDone = (GroupKey, AggregatedStatus, Result<()>);

impl Run<'_> {
    /// Emit a decision's metric and start its write-back in the background (retried through
    /// throttling; joined before the run ends).
    pub(super) async fn apply(&mut self, record: &SubmitRecord, decision: &Decision) {
        let svc = self.svc;
        if let Some(m) = decision.metric() {
            let mut metric = Metric::count(m.name);
            if let Some((k, v)) = m.dimension {
                metric = metric.with(k, v);
            }
            svc.metrics.emit(metric);
        }
        let Decision::Finalize(f) = decision else {
            self.out.left_pending += 1;
            return;
        };
        if awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::SubmitterForgetsWriteBack)
            && f.status.is_billed()
        {
            return;
        }
        let ttl = (f.status.is_billed() && svc.config.aggregated_ttl_days > 0).then(|| {
            svc.clock.now().timestamp()
                + i64::from(svc.config.aggregated_ttl_days) * SECONDS_PER_DAY
        });
        let write = WriteBack {
            status: f.status,
            reason: f.reason.clone(),
            metering_record_id: f.metering_record_id.clone(),
            ttl,
            // The answer to our own call: it stands whatever mark the run itself wrote.
            if_attempt: AttemptCondition::Any,
        };
        let (store, group, status, now) = (
            svc.aggregated.clone(),
            record.group.clone(),
            f.status,
            svc.clock.now(),
        );
        self.write_backs.spawn(async move {
            let result = write_back(store, &group, &write, now).await;
            (group, status, result)
        });
        while self.write_backs.len() > MAX_WRITE_BACKS_IN_FLIGHT
            && let Some(joined) = self.write_backs.join_next().await
        {
            self.settle(joined);
        }
    }

    /// Account for one finished background write-back.
    fn settle(&mut self, joined: Result<WriteBackDone, tokio::task::JoinError>) {
        let (group, status, result) = match joined {
            Ok(done) => done,
            // A write-back task only panics on a bug: surface it as such.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        match result {
            Ok(()) => {
                *self
                    .out
                    .statuses
                    .entry(status.as_str().to_owned())
                    .or_default() += 1;
            }
            Err(e @ PipelineError::WriteBackConflict { .. }) => {
                tracing::error!(%group, %status, error = %e, "write-back found the record finalized with another outcome: AWS's answer is not on the record; reconcile");
                self.svc
                    .metrics
                    .emit(Metric::count(metrics::WRITE_BACK_CONFLICT));
                self.failures.push(e);
            }
            Err(e) => {
                tracing::error!(%group, %status, error = %e, "write-back failed; the record stays pending and its replay will be recognised");
                self.out.left_pending += 1;
                self.failures.push(e);
            }
        }
    }

    /// Wait for every background write-back.
    pub(super) async fn settle_all(&mut self) {
        while let Some(joined) = self.write_backs.join_next().await {
            self.settle(joined);
        }
    }
}

/// Write one outcome back, retrying through throttling: AWS accepted the record, so giving
/// up early would leave it to be resubmitted and only recognised as a replay. A record found no
/// longer pending is read back: holding this outcome, it is our own earlier delivery; holding
/// another, it is [`PipelineError::WriteBackConflict`].
async fn write_back(
    store: Arc<dyn AggregatedStore>,
    group: &GroupKey,
    write: &WriteBack,
    now: DateTime<Utc>,
) -> Result<()> {
    if retry(&WRITE_BACK_RETRY, || store.write_back(group, write, now)).await? {
        return Ok(());
    }
    let stored = retry(&STORE_RETRY, || store.get(group)).await?;
    let ours = stored.as_ref().is_some_and(|item| {
        !item.pending
            && item.status == Some(write.status)
            && item.metering_record_id == write.metering_record_id
    });
    if ours {
        return Ok(());
    }
    Err(PipelineError::WriteBackConflict {
        group: group.clone(),
        status: write.status,
        metering_record_id: write.metering_record_id.clone(),
        stored: stored.and_then(|item| item.status),
    })
}
