//! The consumer's invocation taken apart: per invocation, the wall time of each of its steps
//! ([`awsmp_consumer::PhaseTimes`]) and its size (events, rows, `UpdateItem` calls), so the
//! report's "invocation" row says from the run's own figures which step bounds it.

use super::emulator_cpu::ProcessCpu;
use super::timings::histogram;
use awsmp_consumer::{BatchReport, PhaseTimes};
use std::fmt::Write as _;
use std::time::Duration;

/// The steps of an invocation as the report names them, in the order they run.
const STEPS: [&str; 8] = [
    "decode",
    "claims",
    "refusals",
    "fold",
    "finalized lookup",
    "rows",
    "archive",
    "watermark",
];

/// Per-invocation figures of a run.
#[derive(Debug)]
pub(super) struct Invocations {
    /// Wall time per step, microseconds, indexed like [`STEPS`].
    steps: Vec<hdrhistogram::Histogram<u64>>,
    /// Events accepted per invocation.
    events: hdrhistogram::Histogram<u64>,
    /// Distinct rows per invocation.
    rows: hdrhistogram::Histogram<u64>,
    /// `UpdateItem` calls per invocation.
    update_items: hdrhistogram::Histogram<u64>,
}

impl Default for Invocations {
    fn default() -> Self {
        Self {
            steps: STEPS.iter().map(|_| histogram()).collect(),
            events: histogram(),
            rows: histogram(),
            update_items: histogram(),
        }
    }
}

/// `phases` as durations indexed like [`STEPS`].
fn step_times(p: &PhaseTimes) -> [Duration; 8] {
    [
        p.decode,
        p.claims,
        p.refusals,
        p.fold,
        p.finalized,
        p.rows,
        p.archive,
        p.watermark,
    ]
}

fn ms(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

impl Invocations {
    /// Add one invocation's report.
    pub(super) fn observe(&mut self, report: &BatchReport) {
        for (h, d) in self.steps.iter_mut().zip(step_times(&report.phases)) {
            let _ = h.record(d.as_micros() as u64);
        }
        let _ = self.events.record(report.events_accepted);
        let _ = self.rows.record(report.rows as u64);
        let _ = self.update_items.record(report.update_items);
    }

    /// What bounds the invocation, from the run's figures: each step's p50 / p99 per
    /// invocation and the invocation's size; the step with the largest p99 is named. `None`
    /// when no invocation was observed.
    pub(super) fn bound(
        &self,
        concurrency: usize,
        emulator: Option<ProcessCpu>,
        this_process: Option<ProcessCpu>,
    ) -> Option<String> {
        if self.events.is_empty() {
            return None;
        }
        let mut text = format!(
            "the consumer, per invocation (p50 / p99): {} / {} events, {} / {} rows, {} / {} UpdateItems, at most {concurrency} store calls at once; its steps",
            self.events.value_at_quantile(0.5),
            self.events.value_at_quantile(0.99),
            self.rows.value_at_quantile(0.5),
            self.rows.value_at_quantile(0.99),
            self.update_items.value_at_quantile(0.5),
            self.update_items.value_at_quantile(0.99),
        );
        let mut longest: Option<(&str, f64)> = None;
        for (name, h) in STEPS.iter().zip(&self.steps) {
            let (p50, p99) = (ms(h, 0.5), ms(h, 0.99));
            if p99 < 0.05 {
                continue; // a step that did not run (no archive, nothing refused)
            }
            let _ = write!(text, " {name} {p50:.0} / {p99:.0} ms,");
            if longest.is_none_or(|(_, l)| p99 > l) {
                longest = Some((name, p99));
            }
        }
        text.pop();
        if let Some((name, _)) = longest {
            let _ = write!(
                text,
                "; the longest: {name}, each store call a round trip to the local DynamoDB (one Node process answering one request at a time, shared with the pipeline's ticks)"
            );
        }
        if let Some(cpu) = emulator {
            let _ = write!(text, "; {}", cpu.describe());
        }
        if let Some(cpu) = this_process {
            // The other end of every store call: the SDK client, the producers and the mapping.
            let _ = write!(
                text,
                "; the load test's own process (producers, mapping, consumer, pipeline ticks) used {:.0} % of one CPU",
                cpu.cores * 100.0
            );
        }
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_step_is_named_and_steps_that_did_not_run_are_left_out() {
        let mut inv = Invocations::default();
        assert_eq!(inv.bound(16, None, None), None);
        // GIVEN invocations whose rows take longest and which archive nothing
        for i in 1..=10_u64 {
            let report = BatchReport {
                events_accepted: 100 * i,
                rows: 20,
                update_items: 25,
                phases: PhaseTimes {
                    decode: Duration::from_millis(2),
                    claims: Duration::from_millis(30),
                    rows: Duration::from_millis(40 + i),
                    watermark: Duration::from_millis(5),
                    ..PhaseTimes::default()
                },
                ..BatchReport::default()
            };
            inv.observe(&report);
        }
        // WHEN the bound is written
        let text = inv.bound(16, None, None).expect("observed");
        // THEN it gives the sizes, the steps that ran, and names the longest
        assert!(text.contains("500 / 1000 events"), "{text}");
        assert!(text.contains("at most 16 store calls"), "{text}");
        assert!(text.contains("claims 30 / 30 ms"), "{text}");
        assert!(!text.contains("archive"), "{text}");
        assert!(text.contains("the longest: rows"), "{text}");
    }
}
