//! Tables for people (`meterctl` without `--json`). Pure.

use crate::ledger::Ledger;
use crate::status::HourStatus;
use crate::verify::Mismatch;
use std::fmt::Write;

fn group_hour(g: &awsmp_contract::keys::GroupKey) -> String {
    format!(
        "{} {} {} {}",
        g.license_arn, g.customer_aws_account_id, g.dimension, g.hour
    )
}

/// The ledger as a table: one line per group-hour, its differences under it, the totals.
pub fn ledger_table(l: &Ledger) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<72} {:>10} {:>10} {:>10} {:>10}  {:<24} flags",
        "group-hour", "intended", "aggregated", "submitted", "accepted", "status"
    );
    for line in &l.lines {
        let mut flags = Vec::new();
        if line.unexplained() {
            flags.push("UNEXPLAINED");
        }
        if line.billing_risk {
            flags.push("BILLING-RISK");
        }
        if line.pending_cloudtrail {
            flags.push("pending-cloudtrail");
        }
        let _ = writeln!(
            out,
            "{:<72} {:>10} {:>10} {:>10} {:>10}  {:<24} {}",
            group_hour(&line.group),
            line.intended,
            line.aggregated,
            line.submitted,
            line.accepted,
            line.status,
            flags.join(",")
        );
        for d in &line.differences {
            let _ = writeln!(
                out,
                "    {:<22} {:<44} {:>10}  {}{}",
                serde_json::to_value(d.stage)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                d.reason,
                d.units,
                if d.explained { "" } else { "UNEXPLAINED: " },
                d.detail
            );
        }
    }
    let t = &l.totals;
    let _ = writeln!(
        out,
        "{:<72} {:>10} {:>10} {:>10} {:>10}  lines {} unexplained {} billing-risk {} pending-cloudtrail {}",
        "TOTAL",
        t.intended,
        t.aggregated,
        t.submitted,
        t.accepted,
        t.lines,
        t.unexplained_lines,
        t.billing_risk_lines,
        t.pending_cloudtrail_lines
    );
    for (reason, units) in &t.by_reason {
        let _ = writeln!(out, "    {reason:<66} {units:>10}");
    }
    out
}

/// Group-hour statuses, one block each.
pub fn status_text(statuses: &[HourStatus]) -> String {
    let mut out = String::new();
    if statuses.is_empty() {
        out.push_str("no usage rows, records or CloudTrail calls for this selection\n");
    }
    for s in statuses {
        let r = &s.rows;
        let _ = writeln!(out, "{}", group_hour(&s.group));
        let _ = writeln!(
            out,
            "  rows      {} rows, quantity {}; pending {} ({}); aggregated {} (folded {}, late {})",
            r.rows,
            r.quantity,
            r.pending_rows,
            r.pending_quantity,
            r.aggregated_rows,
            r.folded_quantity,
            r.late_quantity
        );
        for (reason, q) in &r.terminal {
            let _ = writeln!(out, "            {reason}: {q}");
        }
        for (reason, q) in &s.consumer_rejected {
            let _ = writeln!(out, "  rejected  consumer {reason}: {q}");
        }
        match &s.record {
            Some(rec) => {
                let _ = writeln!(
                    out,
                    "  record    quantity {} ({} allocations, overflow {}), {} {}; MeteringRecordId {}; attempt {}",
                    rec.quantity,
                    rec.allocations,
                    rec.overflow_quantity,
                    rec.status,
                    rec.reason.as_deref().unwrap_or(""),
                    rec.metering_record_id.as_deref().unwrap_or("-"),
                    rec.attempted_quantity.map_or("-".into(), |q| format!(
                        "{q} at {}",
                        rec.submission_attempted_at
                            .map_or("?".into(), |t| t.to_rfc3339())
                    )),
                );
            }
            None => out.push_str("  record    none\n"),
        }
        let _ = writeln!(out, "  next      {}", s.next);
    }
    out
}

/// Verify mismatches.
pub fn verify_table(mismatches: &[Mismatch], checked: usize) -> String {
    let mut out = String::new();
    for m in mismatches {
        let _ = writeln!(
            out,
            "{:<72} {:<18} recomputed {:<24} stored {}",
            group_hour(&m.group),
            m.field,
            m.recomputed,
            m.stored
        );
    }
    let _ = writeln!(
        out,
        "{checked} group-hours checked, {} mismatches",
        mismatches.len()
    );
    out
}
