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

/// Threads a sweep runs schedules on (each schedule is single-threaded and independent).
pub const SWEEP_THREADS: u64 = 2;

/// Run the schedules of seeds `first..first + count`, on [`SWEEP_THREADS`] threads; the
/// result does not depend on how they were spread.
pub fn sweep(first: u64, count: u64) -> Sweep {
    let mut reports: Vec<ScheduleReport> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..SWEEP_THREADS)
            .map(|t| {
                scope.spawn(move || {
                    (first + t..first + count)
                        .step_by(SWEEP_THREADS as usize)
                        .map(|seed| run(seed, false))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a schedule panicked"))
            .collect()
    });
    reports.sort_by_key(|r| r.seed);
    let mut out = Sweep::default();
    for report in reports {
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
        }
    }
    out
}

/// Seeds each thread runs per round of [`first_failure`]: a round stops a search soon after
/// its first failure while keeping both threads busy.
const SEARCH_ROUND_PER_THREAD: u64 = 4;

/// The first schedule of seeds `first..first + count` that breaks an invariant, if any (used
/// to show a mutant is caught). Rounds of seeds run on [`SWEEP_THREADS`] threads and the
/// lowest failing seed of the first round with a failure is returned: the same schedule a
/// search in seed order finds, whatever the thread count.
pub fn first_failure(first: u64, count: u64) -> Option<ScheduleReport> {
    let end = first + count;
    let round = SWEEP_THREADS * SEARCH_ROUND_PER_THREAD;
    let mut from = first;
    while from < end {
        let to = (from + round).min(end);
        let found = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..SWEEP_THREADS)
                .map(|t| {
                    scope.spawn(move || {
                        (from + t..to)
                            .step_by(SWEEP_THREADS as usize)
                            .map(|seed| run(seed, false))
                            .find(|r| !r.violations.is_empty())
                    })
                })
                .collect();
            workers
                .into_iter()
                .filter_map(|w| w.join().expect("a schedule panicked"))
                .min_by_key(|r| r.seed)
        });
        if found.is_some() {
            return found;
        }
        from = to;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_finds_nothing_on_the_real_code_and_counts_every_seed() {
        assert!(first_failure(3, 5).is_none());
        assert_eq!(sweep(3, 5).schedules, 5);
    }
}
