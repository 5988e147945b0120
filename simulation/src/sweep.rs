//! A sweep: many schedules, one per seed, and what they explored together.

use crate::schedule::{Explored, ScheduleReport, run};
use std::collections::BTreeMap;

/// The sweep's result.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// Schedules run.
    pub schedules: u64,
    /// The schedules that broke an invariant.
    pub failures: Vec<ScheduleReport>,
    /// What the schedules explored, summed.
    pub explored: Explored,
}

fn add(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// Run the schedules of seeds `first..first + count`; stop early after `stop_after` failures.
pub fn sweep(first: u64, count: u64, stop_after: usize) -> Sweep {
    let mut out = Sweep::default();
    for seed in first..first + count {
        let report = run(seed, false);
        out.schedules += 1;
        let e = &report.explored;
        add(&mut out.explored.faults, &e.faults);
        add(&mut out.explored.interleavings, &e.interleavings);
        add(&mut out.explored.mapping, &e.mapping);
        out.explored.hours_crossed += e.hours_crossed;
        out.explored.redeliveries += e.redeliveries;
        out.explored.steps += e.steps;
        out.explored.billed += e.billed;
        if !report.violations.is_empty() {
            out.failures.push(report);
            if out.failures.len() >= stop_after {
                break;
            }
        }
    }
    out
}
