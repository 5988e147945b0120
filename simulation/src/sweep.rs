//! A sweep: many schedules, one per seed, and what they explored together.

use crate::schedule::{Explored, ScheduleReport, run};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Run `run` on the seeds of `first..end` over [`SWEEP_THREADS`] threads, each taking the next
/// seed not yet taken (a thread never waits on another's long schedule), until `stop` says a
/// seed is past what is wanted; what each thread returned, unordered.
fn spread<R: Send>(
    first: u64,
    end: u64,
    stop: &(dyn Fn(u64) -> bool + Sync),
    run: &(dyn Fn(u64) -> Option<R> + Sync),
) -> Vec<R> {
    let next = AtomicU64::new(first);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..SWEEP_THREADS)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= end || stop(seed) {
                            return out;
                        }
                        out.extend(run(seed));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a schedule panicked"))
            .collect()
    })
}

/// Run the schedules of seeds `first..first + count`, on [`SWEEP_THREADS`] threads; the
/// result does not depend on how they were spread.
pub fn sweep(first: u64, count: u64) -> Sweep {
    let mut reports = spread(first, first + count, &|_| false, &|seed| {
        Some(run(seed, false))
    });
    reports.sort_by_key(|r| r.seed);
    let mut out = Sweep::default();
    for report in reports {
        out.schedules += 1;
        let e = &report.explored;
        add(&mut out.explored.faults, &e.faults);
        add(&mut out.explored.interleavings, &e.interleavings);
        add(&mut out.explored.mapping, &e.mapping);
        for (limit, n) in &e.limits {
            *out.explored.limits.entry(limit.clone()).or_default() += u64::from(*n > 0);
        }
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

/// The first schedule of seeds `first..first + count` that breaks an invariant, if any (used
/// to show a mutant is caught): the same schedule a search in seed order finds, whatever the
/// thread count. Threads take seeds in order and none takes a seed past the lowest failing
/// one found so far; every lower seed was taken before it and is run to its end, so the
/// lowest failing seed of the range is among those found. At most one schedule per thread
/// runs past it.
pub fn first_failure(first: u64, count: u64) -> Option<ScheduleReport> {
    lowest_failing(first, first + count, &|seed| {
        Some(run(seed, false)).filter(|r| !r.violations.is_empty())
    })
    .map(|(_, report)| report)
}

/// The lowest seed of `first..end` that `fails` (its answer with it), run as
/// [`first_failure`] runs schedules.
fn lowest_failing<R: Send>(
    first: u64,
    end: u64,
    fails: &(dyn Fn(u64) -> Option<R> + Sync),
) -> Option<(u64, R)> {
    let lowest = AtomicU64::new(u64::MAX);
    let found = spread(
        first,
        end,
        &|seed| seed > lowest.load(Ordering::Relaxed),
        &|seed| {
            let failure = fails(seed)?;
            lowest.fetch_min(seed, Ordering::Relaxed);
            Some((seed, failure))
        },
    );
    found.into_iter().min_by_key(|(seed, _)| *seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lowest failing seed, however long the lower seeds take and whichever thread finds a
    /// higher one first; the seeds past it are mostly never run.
    #[test]
    fn the_search_returns_the_lowest_failing_seed() {
        let ran = AtomicU64::new(0);
        let fails = |seed: u64| {
            ran.fetch_add(1, Ordering::Relaxed);
            // Low seeds are slow, so a higher failing seed is found first.
            std::thread::sleep(std::time::Duration::from_millis(40u64.saturating_sub(seed)));
            [13, 21, 30].contains(&seed).then_some(seed * 10)
        };
        assert_eq!(lowest_failing(10, 1000, &fails), Some((13, 130)));
        assert!(
            ran.load(Ordering::Relaxed) < 20,
            "searched on past the failure"
        );
        assert_eq!(lowest_failing(31, 60, &fails), None);
        assert_eq!(lowest_failing(14, 60, &fails), Some((21, 210)));
    }

    #[test]
    fn a_search_finds_nothing_on_the_real_code_and_counts_every_seed() {
        assert!(first_failure(3, 5).is_none());
        assert_eq!(sweep(3, 5).schedules, 5);
    }
}
