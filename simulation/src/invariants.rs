//! The invariants checked after every schedule (docs/simulation.md, "Invariants"):
//!
//! 1. strict conservation (`loadtest/src/conservation.rs`): every unit of a valid event is
//!    billed exactly once; only injected bad inputs end unbilled, each with its reason (a
//!    schedule with a short billable window may also let records expire: those units must end
//!    `SubmissionExpired` / `NeedsReconciliation` / `AggregationExpired`, never vanish);
//! 2. no raw row is stamped `Aggregated` with a quantity other than the one folded from it;
//! 3. every aggregated status agrees with the Marketplace ledger;
//! 4. nothing pending, every queue empty, dead letters accounted for, the stream read to its
//!    end, every poison record rejected with a reason;
//! 5. every batch the event source mapping discarded has its invocation record on the
//!    on-failure destination, and every such record was re-driven (its usage then billed, or
//!    refused with a reason: strict conservation counts it);
//! 6. every event meter-ingest must refuse is in its held-events table with its disposition
//!    and reason, and no invocation is left on its on-failure destination (its valid events
//!    are conserved with the producers' in 1).

use crate::world::{World, lock};
use awsmp_contract::attrs as a;
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey, parse_usage_timestamp};
use awsmp_contract::row::{AttrValue, RawUsageRow};
use awsmp_contract::status::AggregatedStatus;
use awsmp_loadtest::conservation::{self, GroupHour, Inputs};
use awsmp_pipeline::domain::fold::{SecondQuantities, SecondSet, folded_second};
use std::collections::BTreeMap;

fn s<'r>(row: &'r RawUsageRow, attr: &str) -> Option<&'r str> {
    row.get(attr).and_then(AttrValue::as_s)
}

fn n(row: &RawUsageRow, attr: &str) -> Option<u64> {
    row.get(attr)?.as_n()?.parse().ok()
}

/// A usage row's key and group-hour.
fn row_group(row: &RawUsageRow) -> Option<(RowKey, GroupKey)> {
    let license = s(row, a::LICENSE_ARN)?;
    let sort_key = s(row, a::USAGE_SORT_KEY)?;
    let seg = awsmp_contract::keys::split_usage_sort_key(sort_key)?;
    let t = parse_usage_timestamp(seg.timestamp).ok()?;
    let group = GroupKey::new(
        license,
        seg.account,
        seg.dimension,
        HourBucket::containing(t),
    );
    let key = RowKey {
        license_arn: license.to_owned(),
        sort_key: sort_key.to_owned(),
    };
    Some((key, group))
}

fn gh(g: &GroupKey) -> GroupHour {
    (
        g.license_arn.clone(),
        g.customer_aws_account_id.clone(),
        g.dimension.clone(),
        g.hour.to_string(),
    )
}

/// True when nothing is in flight: no hand-back waiting, no batch ready, empty queues, no
/// pending record or row.
pub fn quiescent(w: &World) -> bool {
    let now = w.clock.now() + chrono::Duration::hours(1);
    lock(&w.truth).handed_back.is_empty()
        && lock(&w.esm).ready(&w.stream, now).is_empty()
        && w.work.depth() == 0
        && w.cleanup.depth() == 0
        && lock(&w.esm).destination.depth() == 0
        && !w.aggregated.any_pending()
        && !w.usage.any_pending()
}

/// Every violation of the schedule's end state.
pub fn check(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    crate::causes::note_reach(
        w,
        w.usage
            .rows()
            .iter()
            .filter_map(|r| row_group(r).map(|(_, g)| g)),
    );
    conserved(w, &mut out);
    stamped_as_folded(w, &mut out);
    statuses_match_ledger(w, &mut out);
    nothing_left(w, &mut out);
    discards_redriven(w, &mut out);
    out.extend(crate::ingest::check(w));
    out.extend(crate::lifecycle::check(w));
    out
}

/// Group-hours whose record ended unbilled: rows age-out stamped `AggregationExpired` after
/// their record was committed (its cleanup lost) are the record's units, counted once, by the
/// record. Under a billed record such rows stay counted: their status would lie.
fn unbilled_records(w: &World) -> std::collections::HashSet<GroupHour> {
    w.aggregated
        .items()
        .iter()
        .filter(|i| {
            matches!(
                i.status,
                Some(AggregatedStatus::SubmissionExpired | AggregatedStatus::NeedsReconciliation)
            )
        })
        .map(|i| gh(&i.group))
        .collect()
}

fn conserved(w: &World, out: &mut Vec<String>) {
    let mut inp = Inputs {
        produced: lock(&w.truth).produced.clone(),
        ..Inputs::default()
    };
    let expired_records = unbilled_records(w);
    for row in w.usage.rows() {
        let Some((_, group)) = row_group(&row) else {
            continue;
        };
        let q = n(&row, a::QUANTITY).unwrap_or(0);
        *inp.rows.entry(gh(&group)).or_default() += q;
        if row.contains_key(a::METERING_PENDING) {
            inp.still_pending.insert(gh(&group));
        }
        let status = s(&row, a::METERING_STATUS);
        let reason = s(&row, a::METERING_STATUS_REASON).unwrap_or("");
        match status {
            Some("Aggregated") => {
                if let Some(late) = n(&row, a::LATE_QUANTITY) {
                    let why = s(&row, a::LATE_REASON).unwrap_or("LateUsage");
                    *inp.pipeline_terminal
                        .entry((gh(&group), format!("row:Aggregated:{why}")))
                        .or_default() += late;
                }
            }
            Some("AggregationExpired") if expired_records.contains(&gh(&group)) => {}
            Some(other) => {
                *inp.pipeline_terminal
                    .entry((gh(&group), format!("row:{other}:{reason}")))
                    .or_default() += q;
            }
            None => {}
        }
    }
    for (_, event) in w.rejected.items() {
        let (Some(l), Some(acc), Some(d), Some(q)) = (
            event.license_arn.clone(),
            event.customer_aws_account_id.clone(),
            event.dimension.clone(),
            event.quantity,
        ) else {
            continue;
        };
        *inp.consumer_rejected
            .entry(((l, acc, d), event.reason.clone()))
            .or_default() += q;
    }
    let billed_groups: std::collections::HashSet<_> =
        w.ledger.ledger().into_iter().map(|b| b.group).collect();
    for item in w.aggregated.items() {
        let key = gh(&item.group);
        *inp.aggregated.entry(key.clone()).or_default() += item.quantity;
        if item.pending {
            inp.still_pending.insert(key.clone());
        }
        let billed = billed_groups.contains(&item.group);
        match item.status {
            Some(AggregatedStatus::Success) | None => {}
            // Billed though never answered: the ledger counts it.
            Some(AggregatedStatus::NeedsReconciliation) if billed => {}
            Some(status) => {
                *inp.pipeline_terminal
                    .entry((key, format!("record:{}", status.as_str())))
                    .or_default() += item.quantity;
            }
        }
    }
    for b in w.ledger.ledger() {
        *inp.billed.entry(gh(&b.group)).or_default() += b.quantity;
    }
    crate::causes::allow_caused_exits(w, &mut inp);
    allow_late_exits(&mut inp, &lock(&w.truth).late);
    crate::lifecycle::closing::allow_late_after_flush(w, &mut inp);
    let verdict = conservation::check(&inp);
    for v in verdict.violations {
        out.push(format!(
            "conservation ({}) {}: expected {}, found {}: {}",
            v.stage, v.key, v.expected, v.found, v.detail
        ));
    }
}

/// Injected late arrivals may end late (consumer or pipeline `LateUsage`), up to their
/// quantity per group; any other unit ending so is a violation.
fn allow_late_exits(inp: &mut Inputs, late: &BTreeMap<(String, String, String), u64>) {
    let mut budget = late.clone();
    for ((group, reason), q) in conservation::unbilled(inp) {
        if !reason.ends_with("LateUsage") {
            continue;
        }
        let Some(left) = budget.get_mut(&group) else {
            continue;
        };
        let allowed = q.min(*left);
        *left -= allowed;
        if allowed > 0 {
            *inp.injected.entry((group, reason)).or_default() += allowed;
        }
    }
}

fn stamped_as_folded(w: &World, out: &mut Vec<String>) {
    let records: BTreeMap<GroupKey, _> = w
        .aggregated
        .items()
        .into_iter()
        .map(|i| (i.group.clone(), i))
        .collect();
    for row in w.usage.rows() {
        if s(&row, a::METERING_STATUS) != Some("Aggregated") {
            continue;
        }
        let Some((key, group)) = row_group(&row) else {
            continue;
        };
        let quantity = n(&row, a::QUANTITY).unwrap_or(0);
        let folded = n(&row, a::FOLDED_QUANTITY).unwrap_or(quantity);
        let late = n(&row, a::LATE_QUANTITY).unwrap_or(0);
        if folded + late != quantity {
            out.push(format!(
                "row {} stamped Aggregated: quantity {quantity} ≠ folded {folded} + late {late}",
                key.sort_key
            ));
        }
        let Some(item) = records.get(&group) else {
            out.push(format!(
                "row {} stamped Aggregated without a record",
                key.sort_key
            ));
            continue;
        };
        let Ok(seconds) = SecondSet::from_bytes(&item.contributed_seconds) else {
            continue;
        };
        let (Ok(per_second), Some(second)) = (
            SecondQuantities::from_bytes(&item.contributed_quantities, &seconds),
            folded_second(&group, &key),
        ) else {
            continue;
        };
        if per_second.get(second) != folded {
            out.push(format!(
                "row {} stamped Aggregated with {folded}, but {} was folded from it",
                key.sort_key,
                per_second.get(second)
            ));
        }
    }
}

fn statuses_match_ledger(w: &World, out: &mut Vec<String>) {
    let faulted = w.faults.attempt_faults();
    let ledger: BTreeMap<GroupKey, u64> = w
        .ledger
        .ledger()
        .into_iter()
        .map(|b| (b.group, b.quantity))
        .collect();
    for item in w.aggregated.items() {
        let billed = ledger.get(&item.group).copied();
        let ok = match item.status {
            Some(AggregatedStatus::Success) => billed == Some(item.quantity),
            Some(AggregatedStatus::DuplicateRecord) => billed.is_some_and(|b| b != item.quantity),
            Some(AggregatedStatus::SubmissionExpired) => billed.is_none(),
            // Unresolved at window close: only a fault on its attempt path leaves an attempt
            // unanswered; the system racing itself must not (`simulation/src/causes.rs`).
            Some(AggregatedStatus::NeedsReconciliation) => {
                crate::causes::attempt_cause(&faulted, &item.group).is_some()
            }
            None => true,
            Some(_) => billed.is_none(),
        };
        if !ok {
            out.push(format!(
                "record {} is {:?} at {}, the ledger holds {billed:?}",
                item.group, item.status, item.quantity
            ));
        }
    }
    let records: BTreeMap<GroupKey, Option<AggregatedStatus>> = w
        .aggregated
        .items()
        .into_iter()
        .map(|i| (i.group, i.status))
        .collect();
    for (group, q) in &ledger {
        match records.get(group) {
            Some(Some(AggregatedStatus::Success | AggregatedStatus::NeedsReconciliation)) => {}
            other => out.push(format!(
                "ledger bills {group} ({q}) but its record is {other:?}"
            )),
        }
    }
}

fn nothing_left(w: &World, out: &mut Vec<String>) {
    for item in w.aggregated.items().iter().filter(|i| i.pending) {
        out.push(format!("record {} still pending", item.group));
    }
    let pending_rows = w
        .usage
        .rows()
        .iter()
        .filter(|r| r.contains_key(a::METERING_PENDING))
        .count();
    if pending_rows > 0 {
        out.push(format!("{pending_rows} raw rows still pending"));
    }
    for q in [&w.work, &w.cleanup] {
        if q.depth() > 0 {
            out.push(format!(
                "queue {} still holds {} messages",
                q.name(),
                q.depth()
            ));
        }
    }
    for body in w.work.dead_letters() {
        // Finished: its record is final, or it has none and none of its rows is pending (an
        // hour that left the window before it was aggregated: its rows expired or refused).
        let done = GroupKey::from_work_message(&body).is_ok_and(|g| {
            match w.aggregated.items().into_iter().find(|i| i.group == g) {
                Some(item) => !item.pending,
                None => !w.usage.rows().iter().any(|r| {
                    r.contains_key(a::METERING_PENDING)
                        && row_group(r).is_some_and(|(_, rg)| rg == g)
                }),
            }
        });
        if !done {
            out.push(format!(
                "work message dead-lettered, its group unfinished: {body}"
            ));
        }
    }
    if !w.cleanup.dead_letters().is_empty()
        && w.usage
            .rows()
            .iter()
            .any(|r| r.contains_key(a::METERING_PENDING))
    {
        out.push("cleanup messages dead-lettered with rows still pending".into());
    }
    let later = w.clock.now() + chrono::Duration::hours(1);
    if !lock(&w.esm).ready(&w.stream, later).is_empty() {
        out.push("stream records never delivered".into());
    }
    let rejected = w.rejected.items();
    for key in &lock(&w.truth).poison {
        let found = rejected
            .values()
            .any(|e| &e.partition_key == key && !e.reason.is_empty());
        if !found {
            out.push(format!("poison record {key} not rejected with a reason"));
        }
    }
}

/// Every discarded batch reached the destination and was re-driven from it.
fn discards_redriven(w: &World, out: &mut Vec<String>) {
    let esm = lock(&w.esm);
    let redriven: std::collections::BTreeSet<(String, String, String)> = esm
        .destination
        .redriven
        .iter()
        .map(|r| {
            let b = &r.kinesis_batch_info;
            (
                b.shard_id.clone(),
                b.start_sequence_number.clone(),
                b.end_sequence_number.clone(),
            )
        })
        .collect();
    for d in &esm.discarded {
        let key = (
            d.shard_id.clone(),
            d.range.0.to_string(),
            d.range.1.to_string(),
        );
        if !redriven.contains(&key) {
            out.push(format!(
                "batch {} {}..{} ({} records, {}) discarded but never re-driven: {} records on the destination, {} re-driven",
                d.shard_id,
                d.range.0,
                d.range.1,
                d.records,
                d.condition.as_str(),
                esm.destination.depth(),
                esm.destination.redriven.len()
            ));
        }
    }
    if esm.destination.depth() > 0 {
        out.push(format!(
            "the on-failure destination still holds {} records",
            esm.destination.depth()
        ));
    }
}
