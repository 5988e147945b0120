//! `meterctl verify`: recompute each group-hour from its sources (the folded raw rows, the
//! audit trail) and compare with what the pipeline stored on the aggregated record (quantity,
//! row count, allocations, status, MeteringRecordId). Pure.

use crate::contract::status::AggregatedStatus;
use crate::domain::keys::GroupKey;
use crate::ops::sources::HourSources;
use serde::Serialize;

/// One stored value that does not match its recomputation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mismatch {
    /// The group-hour.
    pub group: GroupKey,
    /// Which value (`quantity`, `rowCount`, `allocations`, `meteringRecordId`, `status`).
    pub field: &'static str,
    /// What the sources give.
    pub recomputed: String,
    /// What is stored.
    pub stored: String,
}

/// Every mismatch of one group-hour.
pub fn verify(s: &HourSources) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut push = |field, recomputed: String, stored: String| {
        if recomputed != stored {
            out.push(Mismatch {
                group: s.group.clone(),
                field,
                recomputed,
                stored,
            });
        }
    };
    let Some(r) = &s.record else {
        if s.rows.aggregated_rows > 0 {
            push(
                "quantity",
                s.rows.folded_quantity.to_string(),
                "no record".into(),
            );
        }
        return out;
    };
    let overflow = r.overflow.as_ref().map_or(0, |o| o.quantity);
    if r.row_count > 0 || s.rows.rows > 0 {
        push(
            "quantity",
            s.rows.folded_quantity.to_string(),
            (r.quantity + overflow).to_string(),
        );
        push(
            "rowCount",
            s.rows.aggregated_rows.to_string(),
            r.row_count.to_string(),
        );
    }
    if let Some(allocs) = &r.allocations {
        let sum: u64 = allocs.iter().map(|a| a.quantity).sum();
        push(
            "allocations",
            r.quantity.to_string(),
            format!("{sum} allocated"),
        );
    }
    let billed = s
        .trail
        .iter()
        .find_map(|t| t.billed_id().map(|id| (id, t.quantity)));
    match (r.status, billed) {
        (Some(AggregatedStatus::Success), Some((id, q))) => {
            push(
                "meteringRecordId",
                id.to_owned(),
                r.metering_record_id.clone().unwrap_or_default(),
            );
            push("quantity billed", q.to_string(), r.quantity.to_string());
        }
        (Some(AggregatedStatus::Success), None) => {
            push("status", "not in CloudTrail".into(), "Success".into());
        }
        (Some(st), Some((id, _))) if !matches!(st, AggregatedStatus::NeedsReconciliation) => {
            push("status", format!("billed as {id}"), st.as_str().into());
        }
        _ => {}
    }
    out
}
