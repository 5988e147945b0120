//! The progress bar of a run (none with `--quiet` or `--json`).

use super::RunSpec;
use crate::report::Sample;

/// The progress bar.
#[derive(Clone)]
pub(super) struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    pub(super) fn new(spec: &RunSpec) -> Self {
        if !spec.progress {
            return Self(None);
        }
        let total = spec.produce.events.or_else(|| {
            spec.produce
                .duration
                .map(|d| (d * spec.produce.rate) as u64)
        });
        let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} events  {msg}",
            )
            .expect("valid template"),
        );
        Self(Some(bar))
    }

    pub(super) fn update(&self, s: &Sample) {
        if let Some(b) = &self.0 {
            b.set_position(s.produced);
            b.set_message(format!(
                "acked {}  consumed {}  rows {}  billed {}",
                s.acked, s.consumed, s.rows_written, s.billed
            ));
        }
    }

    pub(super) fn phase(&self, phase: &str) {
        if let Some(b) = &self.0 {
            b.set_prefix(phase.to_owned());
            b.println(format!("== {phase}"));
        }
    }

    pub(super) fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
