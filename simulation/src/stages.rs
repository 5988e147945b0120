//! The simulation's stages: each Lambda of `infra/stages.json` (the one list,
//! `awsmp_contract::stages`) mapped to the step that calls its handler here, or to the reason it
//! has none. A stage added to the list without a line here fails
//! `every_stage_of_the_list_is_simulated_or_says_why_not`.
//!
//! Each step's Lambda timeout is its stage's in the list: Lambda stops an invocation at its
//! timeout (<https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html>), so a
//! call the virtual clock reaches past it fails, and so does every later one
//! (`testkit/src/faults.rs`).

use awsmp_contract::stages;

/// A stage's unit of work as the scheduler runs it (`simulation/src/steps.rs`,
/// `simulation/src/lifecycle.rs`, `simulation/src/ingest.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// One consumer batch through the event source mapping (`World::deliver`), and the
    /// operator's re-drive of an on-failure message (`World::redrive_failures`).
    ConsumerBatch,
    /// One async invoke of meter-ingest by a module (`World::ingest_step`).
    MeterIngest,
    /// One heartbeat run (`World::heartbeat`).
    Heartbeat,
    /// One discoverer target (`World::discover`).
    Discover,
    /// One aggregator batch, of the work or the deprovision-work queue (`World::aggregate`).
    Aggregate,
    /// One cleanup batch (`World::clean`).
    Cleanup,
    /// One submitter run (`World::submit`).
    Submit,
    /// One expiry run (`World::expire`).
    Expire,
    /// One subscription batch (`World::lifecycle_step`).
    Subscription,
    /// One deprovision-cleanup run (`World::lifecycle_step`).
    DeprovisionCleanup,
}

/// How the simulation runs a stage of the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simulated {
    /// By this step.
    By(Step),
    /// Not at all, for this reason.
    Not(&'static str),
}

/// Every stage of the list, by name, and how the simulation runs it.
pub const TABLE: [(&str, Simulated); 11] = [
    ("kinesis-consumer", Simulated::By(Step::ConsumerBatch)),
    ("meter-ingest", Simulated::By(Step::MeterIngest)),
    ("stream-heartbeat", Simulated::By(Step::Heartbeat)),
    ("discoverer", Simulated::By(Step::Discover)),
    ("aggregator", Simulated::By(Step::Aggregate)),
    ("cleanup", Simulated::By(Step::Cleanup)),
    ("submitter", Simulated::By(Step::Submit)),
    ("expiry", Simulated::By(Step::Expire)),
    (
        "register",
        Simulated::Not(
            "metering never reads registration state (docs/lifecycle.md); its handler runs in \
             lifecycle's tests and the local runner",
        ),
    ),
    ("subscription", Simulated::By(Step::Subscription)),
    (
        "deprovision-cleanup",
        Simulated::By(Step::DeprovisionCleanup),
    ),
];

impl Step {
    /// The stage of the list this step runs.
    pub fn stage(self) -> &'static stages::Stage {
        let name = TABLE
            .iter()
            .find(|(_, s)| *s == Simulated::By(self))
            .map(|(name, _)| *name)
            .expect("every step is in the table");
        stages::named(name)
    }

    /// Its function's Lambda timeout, as deployed.
    pub fn timeout(self) -> chrono::Duration {
        self.stage().timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_stage_of_the_list_is_simulated_or_says_why_not() {
        let listed: BTreeSet<&str> = stages::all().iter().map(|s| s.name.as_str()).collect();
        let here: BTreeSet<&str> = TABLE.iter().map(|(name, _)| *name).collect();
        assert_eq!(here.len(), TABLE.len(), "a stage twice in the table");
        assert_eq!(listed, here, "infra/stages.json and the simulation's table");
    }

    #[test]
    fn each_step_runs_under_its_stages_timeout() {
        assert_eq!(Step::Aggregate.timeout(), chrono::Duration::seconds(20));
        assert_eq!(Step::Submit.timeout(), chrono::Duration::seconds(300));
        assert_eq!(Step::ConsumerBatch.stage().name, "kinesis-consumer");
        assert_eq!(
            Step::DeprovisionCleanup.timeout(),
            chrono::Duration::seconds(60)
        );
    }
}
