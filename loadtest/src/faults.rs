//! Fault classes the load test can switch on, across every tier (docs/local-stack.md, "Fault injection").

use anyhow::{Result, bail};
use std::collections::BTreeSet;
use std::fmt;

/// One fault class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultClass {
    /// Producer: whole PutRecords calls throttled.
    Throttling,
    /// Producer: individual PutRecords entries fail (throttled or internal failure).
    PartialPutRecords,
    /// Producer: a PutRecords call is applied but its response is lost (duplicates on the stream).
    LostResponses,
    /// Consumer: the handler crashes mid-batch (after writing part of it); Lambda replays.
    ConsumerCrashes,
    /// Pipeline: every work and cleanup message is delivered twice.
    DuplicateDeliveries,
    /// Marketplace: throttling, internal errors and UnprocessedRecords from the simulator.
    MarketplaceFaults,
    /// Submitter: BatchMeterUsage applied, then the response fails (a crash after the call).
    SubmitterCrashes,
    /// Clock: pipeline ticks jump forward irregularly instead of every 5 minutes.
    ClockJumps,
}

impl FaultClass {
    /// Every class, in order.
    pub const ALL: [FaultClass; 8] = [
        Self::Throttling,
        Self::PartialPutRecords,
        Self::LostResponses,
        Self::ConsumerCrashes,
        Self::DuplicateDeliveries,
        Self::MarketplaceFaults,
        Self::SubmitterCrashes,
        Self::ClockJumps,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Throttling => "throttling",
            Self::PartialPutRecords => "partial-put-records",
            Self::LostResponses => "lost-responses",
            Self::ConsumerCrashes => "consumer-crashes",
            Self::DuplicateDeliveries => "duplicate-deliveries",
            Self::MarketplaceFaults => "marketplace-faults",
            Self::SubmitterCrashes => "submitter-crashes",
            Self::ClockJumps => "clock-jumps",
        }
    }
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The set of fault classes switched on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults(pub BTreeSet<FaultClass>);

impl Faults {
    /// Parse `--faults`: a comma-separated list of class names, `all`, or `none`.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut set = BTreeSet::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => set.extend(FaultClass::ALL),
                "none" => {}
                name => match FaultClass::ALL.iter().find(|c| c.name() == name) {
                    Some(c) => {
                        set.insert(*c);
                    }
                    None => bail!(
                        "unknown fault class {name:?}; one of: all, none, {}",
                        FaultClass::ALL.map(FaultClass::name).join(", ")
                    ),
                },
            }
        }
        Ok(Self(set))
    }

    /// Whether `class` is on.
    pub fn has(&self, class: FaultClass) -> bool {
        self.0.contains(&class)
    }

    /// Comma-separated names.
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            "none".into()
        } else {
            self.0
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_all_and_none() {
        assert_eq!(Faults::parse("all").unwrap().0.len(), FaultClass::ALL.len());
        assert!(Faults::parse("none").unwrap().0.is_empty());
        let f = Faults::parse("throttling, lost-responses").unwrap();
        assert!(
            f.has(FaultClass::Throttling)
                && f.has(FaultClass::LostResponses)
                && !f.has(FaultClass::ClockJumps)
        );
        assert_eq!(f.describe(), "throttling,lost-responses");
        assert!(Faults::parse("gremlins").is_err());
    }
}
