//! The conservation check: every unit produced is billed exactly once, or has a terminal
//! reason. Pure: it takes what each tier reports and returns a verdict with the offending
//! groups / group-hours listed.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A group: (license ARN, buyer account, dimension).
pub type Group = (String, String, String);
/// A group-hour: the group and its UTC hour bucket `YYYY-MM-DDTHH`.
pub type GroupHour = (String, String, String, String);

/// What every tier reports, summed.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Quantity accepted by `record()`, per group (the producer side of the ledger).
    pub produced: BTreeMap<Group, u64>,
    /// Quantity the producer handed back as undeliverable, per group (terminal at the producer).
    pub producer_returned: BTreeMap<Group, u64>,
    /// Quantity written into usage rows, per group-hour (what the consumer accepted).
    pub rows: BTreeMap<GroupHour, u64>,
    /// Quantity the consumer rejected, per group and reason (rejected-events store, late usage).
    pub consumer_rejected: BTreeMap<(Group, String), u64>,
    /// Quantity billed by the simulator, per group-hour (its ledger).
    pub billed: BTreeMap<GroupHour, u64>,
    /// Quantity of group-hours that reached a terminal non-billed state in the pipeline, per
    /// group-hour and status/reason (RejectedClientSide, AggregationExpired, late rows, Error,
    /// CustomerNotSubscribed, SubmissionExpired, DuplicateRecord…).
    pub pipeline_terminal: BTreeMap<(GroupHour, String), u64>,
    /// Group-hours whose aggregated record or raw rows are still pending.
    pub still_pending: BTreeSet<GroupHour>,
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// `ingest` (producer → rows) or `billing` (rows → ledger) or `pending`.
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

/// The verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// True when nothing was lost, duplicated or left unaccounted.
    pub conserved: bool,
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

/// Check conservation.
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
    v.group_hours = v.table.len();
    v.conserved = v.violations.is_empty();
    v
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
    let groups: BTreeSet<&Group> = inp
        .produced
        .keys()
        .chain(rows_per_group.keys())
        .chain(rejected_per_group.keys())
        .collect();
    for g in groups {
        let produced = inp.produced.get(g).copied().unwrap_or(0);
        let accounted = rows_per_group.get(g).copied().unwrap_or(0)
            + rejected_per_group.get(g).copied().unwrap_or(0)
            + inp.producer_returned.get(g).copied().unwrap_or(0);
        v.produced += produced;
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
        v.accepted += accepted;
        v.billed += billed;
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
    fn terminal_reasons_account_for_unbilled_units() {
        let mut i = clean();
        i.produced.insert(g("b"), 5);
        i.consumer_rejected
            .insert((g("b"), "StaleTimestamp".into()), 2);
        i.rows.insert(gh("b", "2026-11-30T10"), 3);
        i.pipeline_terminal
            .insert((gh("b", "2026-11-30T10"), "RejectedClientSide".into()), 3);
        let v = check(&i);
        assert!(v.conserved, "{:?}", v.violations);
        assert_eq!(v.terminal["consumer:StaleTimestamp"], 2);
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
