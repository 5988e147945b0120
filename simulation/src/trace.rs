//! The schedule's trace: one line per step, stamped with the virtual time, and nothing that
//! depends on the wall clock, addresses or hash-map order, so a replay prints it byte for byte.

use chrono::{DateTime, Utc};

/// Lines kept only when tracing (`--trace`); the count always.
#[derive(Debug, Default)]
pub struct Trace {
    /// Keep the lines.
    pub keep: bool,
    lines: Vec<String>,
    steps: u64,
}

impl Trace {
    /// Record one line.
    pub fn push(&mut self, now: DateTime<Utc>, line: &str) {
        self.steps += 1;
        if self.keep {
            self.lines
                .push(format!("{} {line}", now.format("%Y-%m-%dT%H:%M:%SZ")));
        }
    }

    /// The lines kept.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Lines recorded (kept or not).
    pub fn steps(&self) -> u64 {
        self.steps
    }
}
