//! The conservation check, strict: every unit of a valid event is billed exactly once. A unit
//! that ends unbilled — handed back by the producer, rejected or late at the consumer, late,
//! expired or rejected in the pipeline — is a violation, unless the run injected it as a bad
//! input on purpose and it ended with the reason the run expected ([`Inputs::injected`]).
//! Pure: it takes what each tier reports and returns a verdict with the offending groups /
//! group-hours listed, and the funnel (produced → accepted → rows → aggregated → billed) with
//! every unit that left it, by reason. The guarantee it checks: `docs/guarantees.md`.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A group: (license ARN, buyer account, dimension).
pub type Group = (String, String, String);
/// A group-hour: the group and its UTC hour bucket `YYYY-MM-DDTHH`.
pub type GroupHour = (String, String, String, String);

/// Reason prefix of units the producer handed back (`producer:Undelivered`).
pub const PRODUCER_UNDELIVERED: &str = "producer:Undelivered";
/// Reason prefix of units the consumer rejected (`consumer:<reason>`).
pub const CONSUMER: &str = "consumer:";
/// Reason prefix of raw usage rows that ended in a terminal non-billed state
/// (`pipeline:row:<status>:<reason>`): left between rows and aggregated records.
pub const PIPELINE_ROW: &str = "pipeline:row:";
/// Reason prefix of aggregated records that ended in a terminal non-billed state
/// (`pipeline:record:<status>`): left between aggregated records and the ledger.
pub const PIPELINE_RECORD: &str = "pipeline:record:";

/// Reason prefix of units meter-ingest refused (`meter-ingest:<reason>`): left before the stream.
pub const METER_INGEST: &str = "meter-ingest:";

/// What every tier reports, summed.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Quantity accepted by `record()`, per group (the producer side of the ledger).
    pub produced: BTreeMap<Group, u64>,
    /// Quantity the producer handed back as undeliverable, per group (terminal at the producer).
    pub producer_returned: BTreeMap<Group, u64>,
    /// Quantity sent through meter-ingest that it refused (held or rejected, or its invoke's
    /// retries spent), per group and `meter-ingest:<reason>`: terminal before the stream. What
    /// meter-ingest was sent is part of `produced`.
    pub ingest_refused: BTreeMap<(Group, String), u64>,
    /// Quantity written into usage rows, per group-hour (what the consumer accepted).
    pub rows: BTreeMap<GroupHour, u64>,
    /// Quantity the consumer rejected, per group and reason (rejected-events store, late usage).
    pub consumer_rejected: BTreeMap<(Group, String), u64>,
    /// Quantity folded into aggregated records (any status), per group-hour.
    pub aggregated: BTreeMap<GroupHour, u64>,
    /// Quantity billed by the simulator, per group-hour (its ledger).
    pub billed: BTreeMap<GroupHour, u64>,
    /// Quantity of group-hours that reached a terminal non-billed state in the pipeline, per
    /// group-hour and reason: `row:<status>:<reason>` for raw rows (late usage…),
    /// `record:<status>` for aggregated records (RejectedClientSide, SubmissionExpired…).
    pub pipeline_terminal: BTreeMap<(GroupHour, String), u64>,
    /// Group-hours whose aggregated record or raw rows are still pending.
    pub still_pending: BTreeSet<GroupHour>,
    /// Units the run injected as bad inputs on purpose, per group and the reason they must end
    /// with (`consumer:<reason>`, `producer:Undelivered`, `pipeline:…`): the only units that
    /// may end unbilled. Injected units are part of `produced`; a group whose produced units
    /// were all injected is a *bad-input group*, kept out of the funnel and the totals (which
    /// are about valid usage) and listed in [`Funnel::injected`].
    pub injected: BTreeMap<(Group, String), u64>,
    /// Records injected as bad inputs that carry no usage any tier can count (malformed JSON,
    /// an unknown `v`, a negative quantity), by the reason they must end with
    /// (`consumer:<reason>`).
    pub injected_records: BTreeMap<String, u64>,
    /// Records of the run's stream the consumer rejected without a group (nothing of them
    /// decoded), by `consumer:<reason>`: each must have been injected with that reason.
    pub rejected_records: BTreeMap<String, u64>,
    /// Units of events injected again under an event id already applied (a caller's duplicate),
    /// per group; not part of `produced`: the consumer must drop them (`consumer:DedupHit`),
    /// and if it applied them the group's rows exceed what was produced.
    pub injected_duplicates: BTreeMap<Group, u64>,
}

/// The reason a re-used event id must end with: dropped by the consumer's dedup.
pub const DEDUP_HIT: &str = "consumer:DedupHit";

impl Inputs {
    /// Groups whose produced units were all injected as bad inputs.
    pub fn bad_input_groups(&self) -> BTreeSet<Group> {
        let mut injected: BTreeMap<&Group, u64> = BTreeMap::new();
        for ((g, _), q) in &self.injected {
            *injected.entry(g).or_default() += q;
        }
        injected
            .into_iter()
            .filter(|(g, q)| self.produced.get(*g).copied().unwrap_or(0) <= *q)
            .map(|(g, _)| g.clone())
            .collect()
    }
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// `ingest` (producer → rows), `billing` (rows → ledger), `unbilled` (a unit of a valid
    /// event ended unbilled, or an injected bad input did not end with its reason) or
    /// `pending`.
    pub stage: &'static str,
    /// License, account, dimension (and hour for billing).
    pub key: String,
    /// What was expected.
    pub expected: u64,
    /// What was found.
    pub found: u64,
    /// Explanation.
    pub detail: String,
}

/// One row of the conservation table (per group-hour).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableRow {
    /// `license|account|dimension|hour`.
    pub group_hour: String,
    /// Accepted into rows.
    pub accepted: u64,
    /// Billed.
    pub billed: u64,
    /// Terminal non-billed, by reason.
    pub terminal: BTreeMap<String, u64>,
}

/// Units that left the funnel between two of its stages, for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exit {
    /// `produced→accepted`, `accepted→rows`, `rows→aggregated` or `aggregated→billed`.
    pub between: &'static str,
    /// The terminal reason (`unexplained` when the stage lost units without one; `pending`
    /// when they had not moved on when the run ended).
    pub reason: String,
    /// Units.
    pub units: u64,
    /// Of those, units the run injected as bad inputs with this reason.
    pub injected: u64,
}

/// How the bad inputs injected with one reason ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InjectedEnding {
    /// The reason they must end with.
    pub reason: String,
    /// `units` (usage a tier counts) or `records` (records that carry none).
    pub counted_in: &'static str,
    /// Injected.
    pub injected: u64,
    /// Found ending with that reason.
    pub found: u64,
}

/// The funnel: units at each stage, and every unit that left it, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Funnel {
    /// Accepted by `record()`.
    pub produced: u64,
    /// Accepted by the stream (not handed back by the producer).
    pub accepted: u64,
    /// In usage rows.
    pub rows: u64,
    /// Folded into aggregated records.
    pub aggregated: u64,
    /// Billed (the ledger).
    pub billed: u64,
    /// Every unit that left, by stage and reason.
    pub exits: Vec<Exit>,
    /// The bad inputs injected on purpose, by the reason each must end with, and how they
    /// ended (bad-input groups are not in the stages above).
    pub injected: Vec<InjectedEnding>,
}

/// The verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// True when nothing was lost, duplicated, left unbilled or unaccounted.
    pub conserved: bool,
    /// The funnel, produced → billed.
    pub funnel: Funnel,
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Totals.
    pub produced: u64,
    /// Units accepted into usage rows.
    pub accepted: u64,
    /// Units billed.
    pub billed: u64,
    /// Units with a terminal non-billed reason, by reason (all tiers).
    pub terminal: BTreeMap<String, u64>,
    /// Group-hours checked.
    pub group_hours: usize,
    /// The per-group-hour table (for the report).
    pub table: Vec<TableRow>,
}

fn key3(g: &Group) -> String {
    format!("{}|{}|{}", g.0, g.1, g.2)
}

fn key4(g: &GroupHour) -> String {
    format!("{}|{}|{}|{}", g.0, g.1, g.2, g.3)
}

fn group_of(gh: &GroupHour) -> Group {
    (gh.0.clone(), gh.1.clone(), gh.2.clone())
}

/// Check conservation, strictly.
pub fn check(inp: &Inputs) -> Verdict {
    let mut v = Verdict::default();
    check_ingest(inp, &mut v);
    check_billing(inp, &mut v);
    for gh in &inp.still_pending {
        if !inp.rows.contains_key(gh) && !inp.billed.contains_key(gh) {
            v.violations.push(Violation {
                stage: "pending",
                key: key4(gh),
                expected: 0,
                found: 0,
                detail: "still pending when the run ended".into(),
            });
        }
    }
    check_unbilled(inp, &mut v);
    check_injected_records(inp, &mut v);
    v.funnel = funnel(&valid_only(inp));
    v.funnel.injected = injected_endings(inp);
    v.group_hours = v.table.len();
    v.conserved = v.violations.is_empty();
    v
}

/// Every unit that ended unbilled, per group and reason (the reason namespaced by its tier).
pub fn unbilled(inp: &Inputs) -> BTreeMap<(Group, String), u64> {
    let mut out: BTreeMap<(Group, String), u64> = BTreeMap::new();
    for (g, q) in &inp.producer_returned {
        *out.entry((g.clone(), PRODUCER_UNDELIVERED.into()))
            .or_default() += q;
    }
    for ((g, reason), q) in &inp.consumer_rejected {
        *out.entry((g.clone(), format!("{CONSUMER}{reason}")))
            .or_default() += q;
    }
    for ((g, reason), q) in &inp.ingest_refused {
        *out.entry((g.clone(), reason.clone())).or_default() += q;
    }
    for ((gh, reason), q) in &inp.pipeline_terminal {
        *out.entry((group_of(gh), format!("pipeline:{reason}")))
            .or_default() += q;
    }
    out.retain(|_, q| *q > 0);
    out
}

/// Strict: an unbilled unit is a violation unless injected with that reason, and every
/// injected unit must have ended with its reason.
fn check_unbilled(inp: &Inputs, v: &mut Verdict) {
    let ended = unbilled(inp);
    let keys: BTreeSet<&(Group, String)> = ended.keys().chain(inp.injected.keys()).collect();
    for k in keys {
        let (found, injected) = (
            ended.get(k).copied().unwrap_or(0),
            inp.injected.get(k).copied().unwrap_or(0),
        );
        if found == injected {
            continue;
        }
        let detail = if found > injected {
            format!(
                "{} unit(s) of valid events ended unbilled: {}",
                found - injected,
                k.1
            )
        } else {
            format!(
                "{} injected bad unit(s) did not end with their expected reason {}",
                injected - found,
                k.1
            )
        };
        v.violations.push(Violation {
            stage: "unbilled",
            key: key3(&k.0),
            expected: injected,
            found,
            detail,
        });
    }
}

/// Records without a group: every one the consumer rejected must have been injected with
/// that reason, and every injected one must have been rejected so.
fn check_injected_records(inp: &Inputs, v: &mut Verdict) {
    let reasons: BTreeSet<&String> = inp
        .injected_records
        .keys()
        .chain(inp.rejected_records.keys())
        .collect();
    for reason in reasons {
        let injected = inp.injected_records.get(reason).copied().unwrap_or(0);
        let found = inp.rejected_records.get(reason).copied().unwrap_or(0);
        if injected != found {
            v.violations.push(Violation {
                stage: "unbilled",
                key: "records without a group".into(),
                expected: injected,
                found,
                detail: format!("{found} record(s) rejected as {reason}, {injected} injected so"),
            });
        }
    }
}

/// `inp` without its bad-input groups: the funnel is about valid usage.
fn valid_only(inp: &Inputs) -> Inputs {
    let bad = inp.bad_input_groups();
    let keep = |g: &Group| !bad.contains(g);
    let keep_hour = |gh: &GroupHour| keep(&group_of(gh));
    let mut v = inp.clone();
    v.produced.retain(|g, _| keep(g));
    v.producer_returned.retain(|g, _| keep(g));
    v.ingest_refused.retain(|(g, _), _| keep(g));
    v.consumer_rejected.retain(|(g, _), _| keep(g));
    v.injected.retain(|(g, _), _| keep(g));
    v.rows.retain(|gh, _| keep_hour(gh));
    v.aggregated.retain(|gh, _| keep_hour(gh));
    v.billed.retain(|gh, _| keep_hour(gh));
    v.pipeline_terminal.retain(|(gh, _), _| keep_hour(gh));
    v.still_pending.retain(|gh| keep_hour(gh));
    v
}

/// How each injected bad input ended, by reason.
fn injected_endings(inp: &Inputs) -> Vec<InjectedEnding> {
    let ended = unbilled(inp);
    let mut units: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (k, q) in &inp.injected {
        let e = units.entry(k.1.as_str()).or_default();
        e.0 += q;
        e.1 += ended.get(k).copied().unwrap_or(0);
    }
    let mut rows_per_group: BTreeMap<Group, u64> = BTreeMap::new();
    for (gh, q) in &inp.rows {
        *rows_per_group.entry(group_of(gh)).or_default() += q;
    }
    for (g, dup) in &inp.injected_duplicates {
        // Dropped unless the group's rows grew past what was produced.
        let applied = rows_per_group
            .get(g)
            .copied()
            .unwrap_or(0)
            .saturating_sub(inp.produced.get(g).copied().unwrap_or(0));
        let e = units.entry(DEDUP_HIT).or_default();
        e.0 += dup;
        e.1 += dup.saturating_sub(applied);
    }
    let mut out: Vec<InjectedEnding> = units
        .into_iter()
        .map(|(reason, (injected, found))| InjectedEnding {
            reason: reason.to_owned(),
            counted_in: "units",
            injected,
            found,
        })
        .collect();
    for (reason, injected) in &inp.injected_records {
        out.push(InjectedEnding {
            reason: reason.clone(),
            counted_in: "records",
            injected: *injected,
            found: inp.rejected_records.get(reason).copied().unwrap_or(0),
        });
    }
    out
}

/// Ingest: per group, produced = rows over all hours + consumer-rejected + producer-returned.
fn check_ingest(inp: &Inputs, v: &mut Verdict) {
    let mut rows_per_group: BTreeMap<Group, u64> = BTreeMap::new();
    for (gh, q) in &inp.rows {
        *rows_per_group
            .entry((gh.0.clone(), gh.1.clone(), gh.2.clone()))
            .or_default() += q;
    }
    let mut rejected_per_group: BTreeMap<Group, u64> = BTreeMap::new();
    for ((g, reason), q) in &inp.consumer_rejected {
        *rejected_per_group.entry(g.clone()).or_default() += q;
        *v.terminal.entry(format!("consumer:{reason}")).or_default() += q;
    }
    for q in inp.producer_returned.values() {
        *v.terminal.entry("producer:Undelivered".into()).or_default() += q;
    }
    for ((g, reason), q) in &inp.ingest_refused {
        *rejected_per_group.entry(g.clone()).or_default() += q;
        *v.terminal.entry(reason.clone()).or_default() += q;
    }
    let groups: BTreeSet<&Group> = inp
        .produced
        .keys()
        .chain(rows_per_group.keys())
        .chain(rejected_per_group.keys())
        .collect();
    let bad = inp.bad_input_groups();
    for g in groups {
        let produced = inp.produced.get(g).copied().unwrap_or(0);
        let accounted = rows_per_group.get(g).copied().unwrap_or(0)
            + rejected_per_group.get(g).copied().unwrap_or(0)
            + inp.producer_returned.get(g).copied().unwrap_or(0);
        if !bad.contains(g) {
            v.produced += produced;
        }
        if produced != accounted {
            v.violations.push(Violation {
                stage: "ingest",
                key: key3(g),
                expected: produced,
                found: accounted,
                detail: if accounted > produced {
                    "more in rows than produced (a duplicate)".into()
                } else {
                    "units lost between producer and rows".into()
                },
            });
        }
    }
}

/// Billing: per group-hour, accepted = billed + terminal non-billed.
fn check_billing(inp: &Inputs, v: &mut Verdict) {
    let bad = inp.bad_input_groups();
    let hours: BTreeSet<&GroupHour> = inp
        .rows
        .keys()
        .chain(inp.billed.keys())
        .chain(inp.pipeline_terminal.keys().map(|(gh, _)| gh))
        .collect();
    for gh in hours {
        let accepted = inp.rows.get(gh).copied().unwrap_or(0);
        let billed = inp.billed.get(gh).copied().unwrap_or(0);
        let terminal: BTreeMap<String, u64> = inp
            .pipeline_terminal
            .iter()
            .filter(|((k, _), _)| k == gh)
            .map(|((_, reason), q)| (reason.clone(), *q))
            .collect();
        let term_sum: u64 = terminal.values().sum();
        for (reason, q) in &terminal {
            *v.terminal.entry(format!("pipeline:{reason}")).or_default() += q;
        }
        if !bad.contains(&group_of(gh)) {
            v.accepted += accepted;
            v.billed += billed;
        }
        if inp.still_pending.contains(gh) {
            v.violations.push(Violation {
                stage: "pending",
                key: key4(gh),
                expected: accepted,
                found: billed + term_sum,
                detail: "still pending when the run ended (neither billed nor terminal)".into(),
            });
        } else if billed + term_sum != accepted {
            v.violations.push(Violation {
                stage: "billing",
                key: key4(gh),
                expected: accepted,
                found: billed + term_sum,
                detail: if billed > accepted {
                    "billed more than accepted".into()
                } else {
                    "accepted units neither billed nor terminal".into()
                },
            });
        }
        v.table.push(TableRow {
            group_hour: key4(gh),
            accepted,
            billed,
            terminal,
        });
    }
}

/// The funnel: units per stage and, between stages, every exit by reason; what left a stage
/// without a reason is `unexplained` (or `pending`, when the run ended with it in flight).
fn funnel(inp: &Inputs) -> Funnel {
    let total = |m: &BTreeMap<GroupHour, u64>| m.values().sum::<u64>();
    let produced: u64 = inp.produced.values().sum();
    let returned: u64 =
        inp.producer_returned.values().sum::<u64>() + inp.ingest_refused.values().sum::<u64>();
    let mut f = Funnel {
        produced,
        accepted: produced.saturating_sub(returned),
        rows: total(&inp.rows),
        aggregated: total(&inp.aggregated),
        billed: total(&inp.billed),
        exits: Vec::new(),
        injected: Vec::new(),
    };
    let mut by_stage: BTreeMap<(&'static str, String), (u64, u64)> = BTreeMap::new();
    let ended = unbilled(inp);
    for ((g, reason), q) in &ended {
        let between = if reason == PRODUCER_UNDELIVERED || reason.starts_with(METER_INGEST) {
            "produced→accepted"
        } else if reason.starts_with(CONSUMER) {
            "accepted→rows"
        } else if reason.starts_with(PIPELINE_ROW) {
            "rows→aggregated"
        } else {
            "aggregated→billed"
        };
        let injected = inp.injected.get(&(g.clone(), reason.clone())).copied();
        let e = by_stage.entry((between, reason.clone())).or_default();
        e.0 += q;
        e.1 += injected.unwrap_or(0).min(*q);
    }
    let pending_rows: u64 = inp
        .rows
        .iter()
        .filter(|(gh, _)| inp.still_pending.contains(*gh))
        .map(|(gh, q)| q.saturating_sub(inp.aggregated.get(gh).copied().unwrap_or(0)))
        .sum();
    let pending_records: u64 = inp
        .aggregated
        .iter()
        .filter(|(gh, _)| inp.still_pending.contains(*gh))
        .map(|(gh, q)| q.saturating_sub(inp.billed.get(gh).copied().unwrap_or(0)))
        .sum();
    let stages = [
        ("produced→accepted", f.produced, f.accepted),
        ("accepted→rows", f.accepted, f.rows),
        ("rows→aggregated", f.rows, f.aggregated),
        ("aggregated→billed", f.aggregated, f.billed),
    ];
    for (between, from, to) in stages {
        let explained: u64 = by_stage
            .iter()
            .filter(|((b, _), _)| *b == between)
            .map(|(_, (q, _))| q)
            .sum();
        let pending = match between {
            "rows→aggregated" => pending_rows,
            "aggregated→billed" => pending_records,
            _ => 0,
        };
        if pending > 0 {
            by_stage.insert((between, "pending".into()), (pending, 0));
        }
        let rest = from.saturating_sub(to).saturating_sub(explained + pending);
        if rest > 0 {
            by_stage.insert((between, "unexplained".into()), (rest, 0));
        }
    }
    let order = |b: &str| stages.iter().position(|s| s.0 == b).unwrap_or(0);
    let mut exits: Vec<Exit> = by_stage
        .into_iter()
        .map(|((between, reason), (units, injected))| Exit {
            between,
            reason,
            units,
            injected,
        })
        .collect();
    exits.sort_by_key(|e| (order(e.between), e.reason.clone()));
    f.exits = exits;
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(d: &str) -> Group {
        ("lic".into(), "acct".into(), d.into())
    }
    fn gh(d: &str, h: &str) -> GroupHour {
        ("lic".into(), "acct".into(), d.into(), h.into())
    }

    fn clean() -> Inputs {
        let mut i = Inputs::default();
        i.produced.insert(g("a"), 10);
        i.rows.insert(gh("a", "2026-11-30T10"), 6);
        i.rows.insert(gh("a", "2026-11-30T11"), 4);
        i.billed.insert(gh("a", "2026-11-30T10"), 6);
        i.billed.insert(gh("a", "2026-11-30T11"), 4);
        i
    }

    #[test]
    fn exact_billing_conserves() {
        let v = check(&clean());
        assert!(v.conserved, "{:?}", v.violations);
        assert_eq!(
            (v.produced, v.accepted, v.billed, v.group_hours),
            (10, 10, 10, 2)
        );
    }

    #[test]
    fn meter_ingest_refusals_account_for_sent_units_and_are_violations_unless_injected() {
        // 10 units sent through meter-ingest: 7 reached the rows and were billed, 3 refused.
        let mut i = clean();
        i.produced.insert(g("m"), 10);
        i.rows.insert(gh("m", "2026-11-30T10"), 7);
        i.billed.insert(gh("m", "2026-11-30T10"), 7);
        let refused = (g("m"), format!("{METER_INGEST}DimensionNotGranted"));
        i.ingest_refused.insert(refused.clone(), 3);
        let v = check(&i);
        // Accounted for (no ingest violation), but refused units of a valid event are unbilled.
        assert!(
            v.violations.iter().all(|x| x.stage != "ingest"),
            "{:?}",
            v.violations
        );
        let unbilled: Vec<_> = v
            .violations
            .iter()
            .filter(|x| x.stage == "unbilled")
            .collect();
        assert_eq!(unbilled.len(), 1, "{:?}", v.violations);
        assert_eq!((unbilled[0].expected, unbilled[0].found), (0, 3));
        assert_eq!(v.terminal.get(&refused.1), Some(&3));
        assert!(
            v.funnel
                .exits
                .iter()
                .any(|e| e.between == "produced→accepted" && e.reason == refused.1 && e.units == 3),
            "{:?}",
            v.funnel.exits
        );
        // Injected with that reason, it conserves; sent units missing from the rows do not.
        i.injected.insert(refused, 3);
        assert!(check(&i).conserved, "{:?}", check(&i).violations);
        i.rows.insert(gh("m", "2026-11-30T10"), 6);
        i.billed.insert(gh("m", "2026-11-30T10"), 6);
        assert!(check(&i).violations.iter().any(|x| x.stage == "ingest"));
    }

    #[test]
    fn terminal_reasons_account_for_unbilled_units() {
        let mut i = clean();
        i.produced.insert(g("b"), 5);
        i.consumer_rejected
            .insert((g("b"), "StaleTimestamp".into()), 2);
        i.rows.insert(gh("b", "2026-11-30T10"), 3);
        i.pipeline_terminal
            .insert((gh("b", "2026-11-30T10"), "RejectedClientSide".into()), 3);
        // Injected on purpose, with these reasons: the only units allowed to end unbilled.
        i.injected
            .insert((g("b"), "consumer:StaleTimestamp".into()), 2);
        i.injected
            .insert((g("b"), "pipeline:RejectedClientSide".into()), 3);
        let v = check(&i);
        assert!(v.conserved, "{:?}", v.violations);
        assert_eq!(v.terminal["consumer:StaleTimestamp"], 2);
    }

    #[test]
    fn a_unit_of_a_valid_event_that_ends_unbilled_is_a_violation_whatever_its_reason() {
        for reason in [
            "row:Late:LateUsage",
            "record:SubmissionExpired",
            "record:AggregationExpired",
        ] {
            let mut i = clean();
            i.billed.insert(gh("a", "2026-11-30T11"), 3);
            i.pipeline_terminal
                .insert((gh("a", "2026-11-30T11"), reason.into()), 1);
            let v = check(&i);
            assert!(!v.conserved, "{reason}");
            assert_eq!(v.violations.len(), 1, "{reason}: {:?}", v.violations);
            assert_eq!(v.violations[0].stage, "unbilled");
            assert!(v.violations[0].detail.contains(reason));
        }
        let mut i = clean();
        i.produced.insert(g("b"), 4);
        i.consumer_rejected
            .insert((g("b"), "StaleTimestamp".into()), 1);
        i.producer_returned.insert(g("b"), 3);
        let v = check(&i);
        let unbilled: Vec<_> = v
            .violations
            .iter()
            .filter(|x| x.stage == "unbilled")
            .collect();
        assert_eq!(unbilled.len(), 2, "{:?}", v.violations);
    }

    #[test]
    fn an_injected_bad_input_that_ends_otherwise_is_a_violation() {
        let mut i = clean();
        i.injected
            .insert((g("a"), "consumer:Unauthorized".into()), 2);
        let v = check(&i);
        assert!(!v.conserved);
        assert_eq!((v.violations[0].expected, v.violations[0].found), (2, 0));
        assert!(v.violations[0].detail.contains("expected reason"));
    }

    #[test]
    fn the_funnel_shows_every_unit_that_left_it_by_reason() {
        let mut i = clean();
        i.produced.insert(g("a"), 17);
        i.producer_returned.insert(g("a"), 2);
        i.consumer_rejected
            .insert((g("a"), "Unauthorized".into()), 1);
        i.injected
            .insert((g("a"), "consumer:Unauthorized".into()), 1);
        i.aggregated.insert(gh("a", "2026-11-30T10"), 6);
        i.aggregated.insert(gh("a", "2026-11-30T11"), 3);
        i.rows.insert(gh("a", "2026-11-30T11"), 4);
        i.pipeline_terminal
            .insert((gh("a", "2026-11-30T11"), "row:Late:LateUsage".into()), 1);
        i.billed.insert(gh("a", "2026-11-30T11"), 3);
        let f = check(&i).funnel;
        assert_eq!(
            (f.produced, f.accepted, f.rows, f.aggregated, f.billed),
            (17, 15, 10, 9, 9)
        );
        let exits: Vec<(&str, &str, u64, u64)> = f
            .exits
            .iter()
            .map(|e| (e.between, e.reason.as_str(), e.units, e.injected))
            .collect();
        assert_eq!(
            exits,
            vec![
                ("produced→accepted", "producer:Undelivered", 2, 0),
                ("accepted→rows", "consumer:Unauthorized", 1, 1),
                ("accepted→rows", "unexplained", 4, 0),
                ("rows→aggregated", "pipeline:row:Late:LateUsage", 1, 0),
            ]
        );
    }

    #[test]
    fn bad_input_groups_and_records_are_checked_and_listed_apart_from_the_funnel() {
        // GIVEN a valid group, a bad-input group (a refused tag) and three kinds of records
        let mut i = clean();
        i.aggregated.insert(gh("a", "2026-11-30T10"), 6);
        i.aggregated.insert(gh("a", "2026-11-30T11"), 4);
        let tag = "pipeline:row:RejectedClientSide:InvalidTagCharacters";
        i.produced.insert(g("bad-tag"), 13);
        i.injected.insert((g("bad-tag"), tag.into()), 13);
        i.rows.insert(gh("bad-tag", "2026-11-30T10"), 13);
        i.pipeline_terminal.insert(
            (
                gh("bad-tag", "2026-11-30T10"),
                "row:RejectedClientSide:InvalidTagCharacters".into(),
            ),
            13,
        );
        i.injected_records.insert("consumer:InvalidJson".into(), 1);
        i.rejected_records.insert("consumer:InvalidJson".into(), 1);
        i.injected_duplicates.insert(g("a"), 7);
        // WHEN checked, THEN it conserves, the funnel holds only valid usage
        let v = check(&i);
        assert!(v.conserved, "{:?}", v.violations);
        assert_eq!((v.produced, v.accepted, v.billed), (10, 10, 10));
        let f = &v.funnel;
        assert_eq!((f.produced, f.rows, f.billed), (10, 10, 10));
        assert!(f.exits.is_empty(), "{:?}", f.exits);
        // AND the bad inputs are listed by reason, each found as injected
        let endings: Vec<(&str, &str, u64, u64)> = f
            .injected
            .iter()
            .map(|e| (e.reason.as_str(), e.counted_in, e.injected, e.found))
            .collect();
        assert_eq!(
            endings,
            [
                ("consumer:DedupHit", "units", 7, 7),
                (tag, "units", 13, 13),
                ("consumer:InvalidJson", "records", 1, 1),
            ]
        );
        // WHEN a duplicate is applied, a record goes missing and another appears unasked
        let mut j = i.clone();
        j.rows.insert(gh("a", "2026-11-30T11"), 11);
        j.billed.insert(gh("a", "2026-11-30T11"), 11);
        j.rejected_records.clear();
        j.rejected_records
            .insert("consumer:UnknownVersion".into(), 1);
        let v = check(&j);
        // THEN each is a violation, and the duplicate shows as not dropped
        assert!(!v.conserved);
        let stages: Vec<&str> = v.violations.iter().map(|x| x.stage).collect();
        assert_eq!(
            stages,
            ["ingest", "unbilled", "unbilled"],
            "{:?}",
            v.violations
        );
        assert_eq!(v.funnel.injected[0].found, 0, "the duplicate was applied");
    }

    #[test]
    fn a_lost_unit_a_duplicate_and_an_overbill_are_each_reported() {
        let mut i = clean();
        i.rows.insert(gh("a", "2026-11-30T11"), 3); // lost one at ingest
        let v = check(&i);
        assert!(!v.conserved);
        assert!(
            v.violations
                .iter()
                .any(|x| x.stage == "ingest" && x.found == 9)
        );
        assert!(
            v.violations
                .iter()
                .any(|x| x.stage == "billing" && x.detail.contains("billed more"))
        );

        let mut i = clean();
        i.rows.insert(gh("a", "2026-11-30T11"), 5); // duplicate at ingest
        i.billed.insert(gh("a", "2026-11-30T11"), 5);
        let v = check(&i);
        assert_eq!(v.violations.len(), 1);
        assert!(v.violations[0].detail.contains("duplicate"));

        let mut i = clean();
        i.still_pending.insert(gh("a", "2026-11-30T11"));
        i.billed.remove(&gh("a", "2026-11-30T11"));
        let v = check(&i);
        assert_eq!(v.violations[0].stage, "pending");
    }
}
