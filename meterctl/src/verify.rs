//! `meterctl verify`: recompute each group-hour from its sources (the folded raw rows, the
//! audit trail) and compare with what the pipeline stored on the aggregated record (quantity,
//! row count, allocations, status, MeteringRecordId). Pure.

use crate::sources::HourSources;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::status::AggregatedStatus;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trail::{TrailOutcome, TrailRecord};
    use awsmp_contract::keys::HourBucket;
    use awsmp_contract::row::Allocation;
    use awsmp_contract::status::RawStatus;
    use awsmp_pipeline::ports::AggregatedItem;
    use chrono::{TimeZone, Utc};

    fn sources(
        stored: u64,
        status: Option<AggregatedStatus>,
        billed: Option<(&str, u64)>,
    ) -> HourSources {
        let g = GroupKey::new(
            "arn:aws:license-manager::1:license:l-1",
            "210987654321",
            "d",
            "2026-12-01T14".parse::<HourBucket>().unwrap(),
        );
        let mut s = HourSources::new(g.clone());
        s.rows.add(30, false, Some(RawStatus::Aggregated), "", 0);
        s.rows.add(10, false, Some(RawStatus::Aggregated), "", 0);
        let mut r = AggregatedItem::new(g.clone(), stored, None);
        r.row_count = 2;
        r.status = status;
        r.metering_record_id = Some("m".into());
        s.record = Some(r);
        if let Some((id, q)) = billed {
            s.trail.push(TrailRecord {
                event_id: "e".into(),
                event_time: Utc.with_ymd_and_hms(2026, 12, 1, 15, 5, 0).unwrap(),
                group: g,
                quantity: q,
                outcome: TrailOutcome::Success {
                    metering_record_id: id.into(),
                },
            });
        }
        s
    }

    #[test]
    fn a_record_that_matches_its_rows_and_the_trail_verifies() {
        assert!(
            verify(&sources(
                40,
                Some(AggregatedStatus::Success),
                Some(("m", 40))
            ))
            .is_empty()
        );
        assert!(verify(&sources(40, None, None)).is_empty());
    }

    #[test]
    fn every_stored_value_that_differs_is_reported() {
        let fields = |s: &HourSources| verify(s).iter().map(|m| m.field).collect::<Vec<_>>();
        assert_eq!(fields(&sources(45, None, None)), ["quantity"]);
        assert_eq!(
            fields(&sources(
                40,
                Some(AggregatedStatus::Success),
                Some(("other", 41))
            )),
            ["meteringRecordId", "quantity billed"]
        );
        assert_eq!(
            fields(&sources(40, Some(AggregatedStatus::Success), None)),
            ["status"]
        );
        assert_eq!(
            fields(&sources(40, Some(AggregatedStatus::Error), Some(("m", 40)))),
            ["status"]
        );
        let mut s = sources(40, None, None);
        s.record.as_mut().unwrap().allocations = Some(vec![Allocation {
            quantity: 39,
            tags: vec![],
        }]);
        s.record.as_mut().unwrap().row_count = 3;
        assert_eq!(fields(&s), ["rowCount", "allocations"]);
        s.record = None;
        assert_eq!(fields(&s), ["quantity"]);
    }
}
