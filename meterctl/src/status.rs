//! The status of a group-hour, as an on-call engineer asks for it: its raw rows, its
//! aggregated record, late and rejected usage, and what will happen next (docs/meterctl.md,
//! "status"). Pure: it takes [`HourSources`] and the facts of the moment ([`Moment`]).

use crate::sources::{HourSources, RowSummary};
use awsmp_aws::deprovisioning::Deprovisioning;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::status::AggregatedStatus;
use awsmp_contract::time::{EffectiveLock, TimeConfig, effective_lock, is_billable};
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// What is true at the moment of asking.
#[derive(Debug, Clone)]
pub struct Moment<'a> {
    /// Now.
    pub now: DateTime<Utc>,
    /// Lock and window.
    pub time: &'a TimeConfig,
    /// The lowest ingest watermark over the stream's shards, when a fence is configured.
    pub watermark: Option<DateTime<Utc>>,
    /// Settle margin past an hour's end the watermark must reach.
    pub settle: Duration,
    /// The license's deprovisioning, if it is in its flush window.
    pub deprovisioning: Option<&'a Deprovisioning>,
}

/// The aggregated record, as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordView {
    /// Quantity.
    pub quantity: u64,
    /// Allocation tag sets merged into it.
    pub allocations: usize,
    /// Status (`Pending` while it has none).
    pub status: String,
    /// Reason text.
    pub reason: Option<String>,
    /// MeteringRecordId.
    pub metering_record_id: Option<String>,
    /// Quantity of the attempt on file.
    pub attempted_quantity: Option<u64>,
    /// When it was attempted.
    pub submission_attempted_at: Option<DateTime<Utc>>,
    /// Rows folded in.
    pub row_count: u32,
    /// Unbilled part above the API maximum.
    pub overflow_quantity: u64,
}

/// One group-hour's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HourStatus {
    /// The group-hour.
    pub group: GroupKey,
    /// Its raw rows.
    pub rows: RowSummary,
    /// Its aggregated record.
    pub record: Option<RecordView>,
    /// What the consumer refused for it, by reason.
    pub consumer_rejected: BTreeMap<String, u64>,
    /// Whether it is finished (nothing more will happen by itself).
    pub terminal: bool,
    /// What happens next, in a sentence.
    pub next: String,
}

fn view(r: &awsmp_pipeline::ports::AggregatedItem) -> RecordView {
    RecordView {
        quantity: r.quantity,
        allocations: r.allocations.as_ref().map_or(0, Vec::len),
        status: r.status.map_or("Pending".into(), |s| s.as_str().to_owned()),
        reason: r.status_reason.clone(),
        metering_record_id: r.metering_record_id.clone(),
        attempted_quantity: r.attempted_quantity,
        submission_attempted_at: r.submission_attempted_at,
        row_count: r.row_count,
        overflow_quantity: r.overflow.as_ref().map_or(0, |o| o.quantity),
    }
}

/// The status of one group-hour.
pub fn status(s: &HourSources, m: &Moment<'_>) -> HourStatus {
    let (terminal, mut next) = match &s.record {
        Some(r) => record_next(r, s, m),
        None => rows_next(s, m),
    };
    match m.deprovisioning {
        Some(d) if d.expiry > m.now => next.push_str(&format!(
            " The license is deprovisioning: AWS stops accepting its usage at {}; the pipeline \
             flushes its open hours before then.",
            d.expiry.to_rfc3339()
        )),
        Some(d) => next.push_str(&format!(
            " The license's deprovisioning window closed at {}: AWS accepts no more of its \
             usage.",
            d.expiry.to_rfc3339()
        )),
        None => {}
    }
    HourStatus {
        group: s.group.clone(),
        rows: s.rows.clone(),
        record: s.record.as_ref().map(view),
        consumer_rejected: s.consumer_rejected.clone(),
        terminal,
        next,
    }
}

fn window_close(s: &HourSources, m: &Moment<'_>) -> DateTime<Utc> {
    s.group.hour.start() + Duration::hours(i64::from(m.time.billable_window_hours()))
}

fn record_next(
    r: &awsmp_pipeline::ports::AggregatedItem,
    s: &HourSources,
    m: &Moment<'_>,
) -> (bool, String) {
    use AggregatedStatus as S;
    let billable = is_billable(s.group.hour, m.now, m.time);
    let late = if s.rows.pending_rows > 0 {
        " Rows still pending after the fold are late: cleanup records them as LateUsage."
    } else {
        ""
    };
    let reason = r.status_reason.as_deref().unwrap_or_default();
    let text = match r.status {
        None if !billable => {
            "Pending past the billable window: the expiry sweep marks it SubmissionExpired \
             (NeedsReconciliation with an attempt on file)."
                .to_owned()
        }
        None if r.attempted_quantity.is_some() => format!(
            "In flight: {} was sent; the next submitter run resolves the attempt (an identical \
             retry is not billed twice).",
            r.attempted_quantity.unwrap_or_default()
        ),
        None => "Pending submission: the next submitter run sends it.".to_owned(),
        Some(S::Success) => format!(
            "Terminal: billed {} under MeteringRecordId {}.",
            r.quantity,
            r.metering_record_id.as_deref().unwrap_or("?")
        ),
        Some(S::Error) if billable => format!(
            "Terminal: AWS refused it ({reason}). After fixing the cause (the catalog, the \
             dimension), `meterctl redrive` it before {}.",
            window_close(s, m).to_rfc3339()
        ),
        Some(S::Error) => format!("Terminal: AWS refused it ({reason}); the window has closed."),
        Some(S::CustomerNotSubscribed) => "Terminal: not billed: AWS answered \
             CustomerNotSubscribed (the license was not, or no longer, subscribed when it was \
             sent). Not re-drivable."
            .to_owned(),
        Some(S::DuplicateRecord | S::DuplicateRecordQuantityMismatch) => format!(
            "Terminal, BILLING RISK: AWS had billed another quantity for this hour first \
             ({reason}); run `meterctl ledger` for the hour and reconcile with AWS."
        ),
        Some(S::NeedsReconciliation) => "Terminal, possibly billed: the attempt's outcome was \
             never seen; `meterctl ledger` shows what CloudTrail recorded."
            .to_owned(),
        Some(S::SubmissionExpired) => {
            "Terminal: not billed: it was not submitted within the billable window.".to_owned()
        }
        Some(S::DryRunSubmitted) => "Terminal: dry-run mode, never sent.".to_owned(),
    };
    (r.status.is_some(), format!("{text}{late}"))
}

fn rows_next(s: &HourSources, m: &Moment<'_>) -> (bool, String) {
    let hour = s.group.hour;
    if s.rows.pending_rows == 0 {
        let rejected: u64 = s
            .rows
            .terminal
            .iter()
            .filter(|(k, _)| k.starts_with("RejectedClientSide"))
            .map(|(_, q)| q)
            .sum();
        let text = if rejected > 0 && is_billable(hour, m.now, m.time) {
            format!(
                "Terminal: {rejected} units of rows rejected client-side. After the writer fix, \
                 `meterctl redrive` the group-hour before {}.",
                window_close(s, m).to_rfc3339()
            )
        } else if s.rows.rows > 0 {
            "Terminal: every row is finalized and none was billed.".to_owned()
        } else {
            "No usage recorded for this group-hour.".to_owned()
        };
        return (true, text);
    }
    if !is_billable(hour, m.now, m.time) {
        return (
            false,
            "Rows pending past the billable window: the age-out sweep marks them \
             AggregationExpired."
                .into(),
        );
    }
    let text = match effective_lock(hour, m.now, m.time) {
        EffectiveLock::Hours(h) if m.now < hour.start() + Duration::hours(i64::from(h)) => {
            format!(
                "Waiting for the metering lock: the hour is aggregated from {}.",
                (hour.start() + Duration::hours(i64::from(h))).to_rfc3339()
            )
        }
        EffectiveLock::Closed => "The hour's month has closed: it is never metered.".into(),
        _ => match m.watermark {
            Some(w) if w < hour.end() + m.settle => format!(
                "Waiting for the ingest watermark: the stream is applied through {}, the hour \
                 needs {}.",
                w.to_rfc3339(),
                (hour.end() + m.settle).to_rfc3339()
            ),
            _ => "Pending aggregation: the next discoverer run folds the hour.".into(),
        },
    };
    (false, text)
}

#[cfg(test)]
mod tests;
