//! The per-group-hour billing ledger (docs/meterctl.md, "ledger"): what was intended, folded,
//! submitted and accepted by AWS, and every difference between two of them with its reason.
//! A difference without a known reason is *unexplained*; a `DuplicateRecord` means AWS billed
//! another quantity and is flagged as a billing risk. Pure: it takes [`HourSources`].

use crate::sources::HourSources;
use crate::trail::{TrailOutcome, TrailRecord};
use awsmp_contract::keys::GroupKey;
use awsmp_contract::reasons::{LATE_USAGE, QUANTITY_ABOVE_API_MAXIMUM};
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::ports::AggregatedItem;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// How long after a call CloudTrail may take to show it: "CloudTrail typically delivers
/// events within an average of about 5 minutes of an API call", not guaranteed, so awsmp waits
/// three times that (<https://docs.aws.amazon.com/awscloudtrail/latest/userguide/how-cloudtrail-works.html>).
pub const CLOUDTRAIL_DELIVERY_LAG_SECS: i64 = 15 * 60;

/// Where in the path a difference arises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Stage {
    /// Intended (rows + consumer rejections) → the aggregated record.
    #[serde(rename = "intended→aggregated")]
    Aggregation,
    /// Aggregated → submitted to `BatchMeterUsage`.
    #[serde(rename = "aggregated→submitted")]
    Submission,
    /// Submitted → accepted by AWS (the audit trail).
    #[serde(rename = "submitted→accepted")]
    Acceptance,
}

/// The reason of a billed record CloudTrail may not show yet (inside its delivery lag).
pub const PENDING_CLOUDTRAIL: &str = "PendingCloudTrail";

/// The reason text of a difference nobody can account for.
pub const UNEXPLAINED: &str = "Unexplained";

/// One difference between two columns of a line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    /// Between which columns.
    pub stage: Stage,
    /// The reason code (docs/meterctl.md, "ledger"), or [`UNEXPLAINED`].
    pub reason: String,
    /// Units (always positive: the units that did not move on, or that appeared).
    pub units: u64,
    /// Whether a known reason accounts for it.
    pub explained: bool,
    /// A sentence for the operator.
    pub detail: String,
}

impl Difference {
    fn explained(stage: Stage, reason: impl Into<String>, units: u64, detail: &str) -> Self {
        Self {
            stage,
            reason: reason.into(),
            units,
            explained: true,
            detail: detail.into(),
        }
    }

    fn unexplained(stage: Stage, units: u64, detail: impl Into<String>) -> Self {
        Self {
            stage,
            reason: UNEXPLAINED.into(),
            units,
            explained: false,
            detail: detail.into(),
        }
    }
}

/// One line of the ledger: one group-hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerLine {
    /// The group-hour.
    pub group: GroupKey,
    /// Raw-row quantity plus what the consumer refused for the hour.
    pub intended: u64,
    /// The aggregated record's quantity (0 without one).
    pub aggregated: u64,
    /// What was sent to `BatchMeterUsage` (0 when never sent).
    pub submitted: u64,
    /// What AWS billed for the key, per the audit trail.
    pub accepted: u64,
    /// The aggregated record's status (`Pending` while it has none).
    pub status: String,
    /// The MeteringRecordId AWS billed under, per the trail.
    pub metering_record_id: Option<String>,
    /// Every difference.
    pub differences: Vec<Difference>,
    /// AWS billed a quantity other than ours (`DuplicateRecord`).
    pub billing_risk: bool,
    /// The trail may not yet show the hour's last call.
    pub pending_cloudtrail: bool,
}

impl LedgerLine {
    /// True when a difference has no known reason.
    pub fn unexplained(&self) -> bool {
        self.differences.iter().any(|d| !d.explained)
    }
}

/// The totals line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Group-hours.
    pub lines: usize,
    /// Sum of intended.
    pub intended: u64,
    /// Sum of aggregated.
    pub aggregated: u64,
    /// Sum of submitted.
    pub submitted: u64,
    /// Sum of accepted.
    pub accepted: u64,
    /// Units by reason, over every line.
    pub by_reason: BTreeMap<String, u64>,
    /// Lines with an unexplained difference.
    pub unexplained_lines: usize,
    /// Lines flagged as a billing risk.
    pub billing_risk_lines: usize,
    /// Lines whose trail may be incomplete.
    pub pending_cloudtrail_lines: usize,
}

/// The ledger of a range of hours.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// One line per group-hour, in key order.
    pub lines: Vec<LedgerLine>,
    /// The totals.
    pub totals: Totals,
}

/// Exit status of `meterctl ledger` and `verify`: every line explained, no risk.
pub const EXIT_CLEAN: i32 = 0;
/// Exit status: at least one unexplained line.
pub const EXIT_UNEXPLAINED: i32 = 1;
/// Exit status: no unexplained line, but at least one billing risk.
pub const EXIT_BILLING_RISK: i32 = 3;

impl Ledger {
    /// The lines of `sources`, and their totals.
    pub fn build(sources: &[HourSources], now: DateTime<Utc>) -> Self {
        let mut lines: Vec<LedgerLine> = sources.iter().map(|s| line(s, now)).collect();
        lines.sort_by(|a, b| a.group.cmp(&b.group));
        let mut totals = Totals {
            lines: lines.len(),
            ..Totals::default()
        };
        for l in &lines {
            totals.intended += l.intended;
            totals.aggregated += l.aggregated;
            totals.submitted += l.submitted;
            totals.accepted += l.accepted;
            totals.unexplained_lines += usize::from(l.unexplained());
            totals.billing_risk_lines += usize::from(l.billing_risk);
            totals.pending_cloudtrail_lines += usize::from(l.pending_cloudtrail);
            for d in &l.differences {
                *totals.by_reason.entry(d.reason.clone()).or_default() += d.units;
            }
        }
        Self { lines, totals }
    }

    /// The process exit status this ledger calls for.
    pub fn exit_code(&self) -> i32 {
        if self.totals.unexplained_lines > 0 {
            EXIT_UNEXPLAINED
        } else if self.totals.billing_risk_lines > 0 {
            EXIT_BILLING_RISK
        } else {
            EXIT_CLEAN
        }
    }
}

/// One group-hour's line.
pub fn line(s: &HourSources, now: DateTime<Utc>) -> LedgerLine {
    let record = s.record.as_ref();
    let mut differences = aggregation_differences(s);
    let intended = intended(s);
    let aggregated = record.map_or(0, |r| r.quantity);
    let status = record.and_then(|r| r.status);
    let submitted = record.map_or(0, submitted_quantity);
    if let Some(d) = submission_difference(record, aggregated, submitted) {
        differences.push(d);
    }
    let billed = billed(&s.trail);
    let accepted = billed.iter().map(|(_, q)| q).sum();
    let pending_cloudtrail = record
        .and_then(|r| r.submission_attempted_at)
        .is_some_and(|at| at > now - Duration::seconds(CLOUDTRAIL_DELIVERY_LAG_SECS));
    let acceptance = Acceptance {
        record,
        submitted,
        billed: &billed,
        trail: &s.trail,
        pending_cloudtrail,
    };
    differences.extend(acceptance.differences());
    let pending_cloudtrail = differences.iter().any(|d| d.reason == PENDING_CLOUDTRAIL);
    LedgerLine {
        group: s.group.clone(),
        intended,
        aggregated,
        submitted,
        accepted,
        status: status.map_or("Pending".into(), |st| st.as_str().to_owned()),
        metering_record_id: billed.first().map(|(id, _)| id.clone()),
        billing_risk: matches!(
            status,
            Some(
                AggregatedStatus::DuplicateRecord
                    | AggregatedStatus::DuplicateRecordQuantityMismatch
            )
        ) || s
            .trail
            .iter()
            .any(|t| matches!(t.outcome, TrailOutcome::DuplicateRecord { .. })),
        differences,
        pending_cloudtrail,
    }
}

/// A direct-submit record (no rows folded into it) is its own intent.
fn is_direct_submit(s: &HourSources) -> bool {
    s.rows.rows == 0 && s.record.as_ref().is_some_and(|r| r.row_count == 0)
}

fn intended(s: &HourSources) -> u64 {
    if is_direct_submit(s) {
        return s.record.as_ref().map_or(0, |r| {
            r.quantity + r.overflow.as_ref().map_or(0, |o| o.quantity)
        });
    }
    s.rows.quantity + s.consumer_rejected.values().sum::<u64>()
}

/// Intended → aggregated: every unit that left, by reason, and the unexplained rest.
fn aggregation_differences(s: &HourSources) -> Vec<Difference> {
    use Stage::Aggregation as A;
    let mut out = Vec::new();
    let mut push = |reason: String, units: u64, detail: &str| {
        if units > 0 {
            out.push(Difference::explained(A, reason, units, detail));
        }
    };
    let overflow = s
        .record
        .as_ref()
        .and_then(|r| r.overflow.as_ref())
        .map_or(0, |o| o.quantity);
    push(
        QUANTITY_ABOVE_API_MAXIMUM.into(),
        overflow,
        "above the BatchMeterUsage quantity maximum: recorded on the aggregated record, not billed",
    );
    if is_direct_submit(s) {
        return out;
    }
    for (reason, q) in &s.consumer_rejected {
        push(
            format!("consumer:{reason}"),
            *q,
            "refused by the consumer (rejected-events store)",
        );
    }
    push(
        LATE_USAGE.into(),
        s.rows.late_quantity,
        "landed on a row after its hour was folded: recorded on the row, not billed",
    );
    for (reason, q) in &s.rows.terminal {
        push(
            format!("row:{reason}"),
            *q,
            "raw rows finalized without billing",
        );
    }
    push(
        "PendingAggregation".into(),
        s.rows.pending_quantity,
        "rows still pending: the aggregator has not folded the hour yet",
    );
    let folded = s.record.as_ref().map_or(0, |r| r.quantity + overflow);
    let accounted = s.rows.folded_quantity;
    if folded != accounted {
        out.push(Difference::unexplained(
            A,
            folded.abs_diff(accounted),
            format!(
                "the aggregated record holds {folded} (with overflow) but its folded rows hold {accounted}"
            ),
        ));
    }
    out
}

/// What was sent: the attempt on file, or for a record AWS answered, the record's quantity.
fn submitted_quantity(r: &AggregatedItem) -> u64 {
    use AggregatedStatus as S;
    match r.status {
        Some(
            S::Success
            | S::DuplicateRecord
            | S::DuplicateRecordQuantityMismatch
            | S::CustomerNotSubscribed
            | S::NeedsReconciliation,
        ) => r.attempted_quantity.unwrap_or(r.quantity),
        _ => r.attempted_quantity.unwrap_or(0),
    }
}

fn submission_difference(
    record: Option<&AggregatedItem>,
    aggregated: u64,
    submitted: u64,
) -> Option<Difference> {
    use AggregatedStatus as S;
    use Stage::Submission as B;
    let r = record?;
    if submitted == aggregated {
        return None;
    }
    let units = aggregated.abs_diff(submitted);
    let reason = r.status_reason.clone().unwrap_or_default();
    Some(match r.status {
        None => Difference::explained(
            B,
            "PendingSubmission",
            units,
            "the record is pending: the next submitter run sends it",
        ),
        Some(S::Error) => Difference::explained(
            B,
            format!("Error:{reason}"),
            units,
            "AWS refused the record; fix the cause and `meterctl redrive` it within the window",
        ),
        Some(S::SubmissionExpired) => Difference::explained(
            B,
            S::SubmissionExpired.as_str(),
            units,
            "not submitted before the hour left the billable window",
        ),
        Some(S::DryRunSubmitted) => Difference::explained(
            B,
            S::DryRunSubmitted.as_str(),
            units,
            "dry-run mode: never sent",
        ),
        Some(_) => Difference::unexplained(
            B,
            units,
            format!("status {reason:?} but {submitted} of {aggregated} on file as sent"),
        ),
    })
}

/// The distinct billed `(MeteringRecordId, quantity)` of a key, first seen first: a retry of
/// the same record gets the same id and is not counted twice.
fn billed(trail: &[TrailRecord]) -> Vec<(String, u64)> {
    let mut sorted: Vec<&TrailRecord> = trail.iter().collect();
    sorted.sort_by_key(|t| t.event_time);
    let mut out: Vec<(String, u64)> = Vec::new();
    for t in sorted {
        if let Some(id) = t.billed_id()
            && !out.iter().any(|(seen, _)| seen == id)
        {
            out.push((id.to_owned(), t.quantity));
        }
    }
    out
}

/// Submitted → accepted, judged against the record's status.
struct Acceptance<'a> {
    record: Option<&'a AggregatedItem>,
    submitted: u64,
    billed: &'a [(String, u64)],
    trail: &'a [TrailRecord],
    pending_cloudtrail: bool,
}

impl Acceptance<'_> {
    fn differences(&self) -> Vec<Difference> {
        use AggregatedStatus as S;
        use Stage::Acceptance as C;
        let accepted: u64 = self.billed.iter().map(|(_, q)| q).sum();
        let mut out = Vec::new();
        if self.billed.len() > 1 {
            out.push(Difference::unexplained(
                C,
                accepted,
                format!(
                    "AWS billed the key under {} MeteringRecordIds",
                    self.billed.len()
                ),
            ));
            return out;
        }
        let Some(r) = self.record else {
            if accepted > 0 {
                out.push(Difference::unexplained(
                    C,
                    accepted,
                    "AWS billed the key but no aggregated record exists",
                ));
            }
            return out;
        };
        match r.status {
            Some(S::Success) => out.extend(self.success(r, accepted)),
            Some(S::DuplicateRecord | S::DuplicateRecordQuantityMismatch) => {
                out.push(Difference::explained(
                    C,
                    S::DuplicateRecord.as_str(),
                    self.submitted.abs_diff(accepted),
                    "BILLING RISK: AWS billed another quantity for this hour first",
                ));
            }
            Some(S::NeedsReconciliation) if accepted == 0 => out.push(Difference::explained(
                C,
                "NeedsReconciliation:NotBilled",
                self.submitted,
                "the attempt's outcome was never seen; CloudTrail shows it was not billed",
            )),
            Some(S::NeedsReconciliation) => out.extend(self.compare(
                accepted,
                "NeedsReconciliation:Billed",
                "the attempt's outcome was never seen; CloudTrail shows it billed",
            )),
            Some(S::CustomerNotSubscribed) if accepted == 0 => out.push(Difference::explained(
                C,
                S::CustomerNotSubscribed.as_str(),
                self.submitted,
                "AWS refused it: the customer was not subscribed",
            )),
            None if accepted > 0 && r.attempted_quantity == Some(accepted) => {
                out.push(Difference::explained(
                    C,
                    "InFlight",
                    0,
                    "billed; the submitter has not written the outcome back yet",
                ));
            }
            _ if accepted > 0 => out.push(Difference::unexplained(
                C,
                accepted,
                format!(
                    "AWS billed {accepted} but the record says {}",
                    r.status.map_or("Pending", |s| s.as_str())
                ),
            )),
            _ => {}
        }
        out
    }

    fn success(&self, r: &AggregatedItem, accepted: u64) -> Vec<Difference> {
        use Stage::Acceptance as C;
        if accepted == 0 {
            return vec![if self.pending_cloudtrail {
                Difference::explained(
                    C,
                    PENDING_CLOUDTRAIL,
                    self.submitted,
                    "submitted within CloudTrail's delivery lag: check again later",
                )
            } else {
                Difference::unexplained(
                    C,
                    self.submitted,
                    "the record says Success but CloudTrail shows no billed record for it",
                )
            }];
        }
        let mut out = self.compare(accepted, "", "");
        let trail_id = self.billed.first().map(|(id, _)| id.as_str());
        if r.metering_record_id.is_some() && r.metering_record_id.as_deref() != trail_id {
            out.push(Difference::unexplained(
                C,
                accepted,
                format!(
                    "MeteringRecordId {:?} on the record, {:?} in CloudTrail",
                    r.metering_record_id.as_deref().unwrap_or_default(),
                    trail_id.unwrap_or_default()
                ),
            ));
        }
        out
    }

    /// Accepted must equal submitted; an equal pair adds an explained zero-unit note when a
    /// reason is given.
    fn compare(&self, accepted: u64, reason: &str, detail: &str) -> Vec<Difference> {
        use Stage::Acceptance as C;
        if accepted != self.submitted {
            let unprocessed = self
                .trail
                .iter()
                .any(|t| t.outcome == TrailOutcome::Unprocessed);
            return vec![Difference::unexplained(
                C,
                accepted.abs_diff(self.submitted),
                format!(
                    "submitted {} but AWS billed {accepted}{}",
                    self.submitted,
                    if unprocessed {
                        " (some calls left it unprocessed)"
                    } else {
                        ""
                    }
                ),
            )];
        }
        if reason.is_empty() {
            Vec::new()
        } else {
            vec![Difference::explained(C, reason, 0, detail)]
        }
    }
}

#[cfg(test)]
mod tests;
