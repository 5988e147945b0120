//! Nested steps: at a port call's preemption point the scheduler runs a step of another
//! stage (`World::nested`, wired through the port wrappers, `simulation/src/world.rs`).

use crate::faults::{NESTED_FRAME, in_frame};
use crate::stages::Step;
use crate::steps::StepFuture;
use crate::world::{World, lock};
use awsmp_contract::keys::GroupKey;
use awsmp_pipeline::handlers::aggregator;
use awsmp_pipeline::handlers::discoverer::DiscovererInput;

/// What a nested step runs: another stage's unit of work at a port call's preemption point.
#[derive(Debug, Clone, Copy)]
enum Nested {
    /// A twin aggregator on the message being aggregated (a redelivery racing the first
    /// delivery); a consumer batch when no message is being aggregated.
    TwinAggregator,
    /// A consumer batch.
    Deliver,
    /// An aggregator batch.
    Aggregate,
    /// A cleanup batch.
    Clean,
    /// An expiry run.
    Expire,
    /// The discoverer's target of the hour before the current one.
    DiscoverLastHour,
}

/// The nested steps, drawn uniformly (the order is the seeds': a reordered table replays
/// every seed differently).
const NESTED: [Nested; 6] = [
    Nested::TwinAggregator,
    Nested::Deliver,
    Nested::Aggregate,
    Nested::Clean,
    Nested::Expire,
    Nested::DiscoverLastHour,
];

impl World {
    /// A step of another stage, run at the preemption point `site` of a port call.
    pub fn nested(&self, site: &'static str) -> StepFuture<'_> {
        Box::pin(in_frame(NESTED_FRAME, async move {
            *lock(&self.interleavings)
                .entry(site.to_owned())
                .or_default() += 1;
            let twin = lock(&self.current_work).clone();
            self.log(format!("interleave at {site}:"));
            if site == "put_if_absent"
                && let Some(group) = twin
                    .as_deref()
                    .and_then(|b| GroupKey::from_work_message(b).ok())
            {
                // Between the aggregator's fold and its commit: a folded row grows.
                self.grow_folded_row(&group);
                for _ in 0..8 {
                    self.deliver().await;
                }
                return;
            }
            match (NESTED[self.pick(NESTED.len())], twin) {
                (Nested::TwinAggregator, Some(body)) => {
                    self.faults.begin(Step::Aggregate.timeout());
                    let out = aggregator::aggregate(&self.svc, &body).await;
                    if self.faults.end() || out.is_err() {
                        let held = GroupKey::from_work_message(&body)
                            .map_or(crate::causes::Held::Every, |g| {
                                crate::causes::Held::Groups([g].into())
                            });
                        crate::causes::note_failure(self, Step::Aggregate, held);
                    }
                    self.log(format!(
                        "  twin aggregator: {}",
                        match out {
                            Ok(o) => format!("{o:?}"),
                            Err(e) => format!("error: {e}"),
                        }
                    ));
                }
                (Nested::TwinAggregator | Nested::Deliver, _) => {
                    self.deliver().await;
                }
                (Nested::Aggregate, _) => {
                    self.aggregate().await;
                }
                (Nested::Clean, _) => {
                    self.clean().await;
                }
                (Nested::Expire, _) => self.expire().await,
                (Nested::DiscoverLastHour, _) => {
                    self.discover(DiscovererInput::Meter { hour_offset: 1 })
                        .await;
                }
            }
        }))
    }
}
