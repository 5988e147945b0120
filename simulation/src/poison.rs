//! The poison-batch schedule class: at `Setup::poison_from`, a few valid events reach the
//! stream whose every delivery fails (a function error before the consumer writes anything,
//! as a record that crashes the function does) for as long as faults are on. With the
//! template's unbounded retries the shard waits until the fault-free drain; with a finite
//! `MaximumRetryAttempts` the mapping discards the batch to its on-failure destination and
//! moves on, and the operator re-drives it (`simulation/src/redrive.rs`).

use crate::esm::{Completion, Delivery};
use crate::faults::hash;
use crate::steps::{DIMENSIONS, account, license};
use crate::world::{World, lock};
use awsmp_contract::Event;
use awsmp_contract::clock::Clock;
use bytes::Bytes;

/// Events in the poison batch.
const POISON_EVENTS: u64 = 3;

/// The poison events' Kinesis partition key: their own, or the producer's for their group
/// (half the poison schedules of the default sweep each). With the producer's, later records of
/// the same shard and key write the same per-second rows before the re-drive, whose records
/// then lie below the rows' watermarks: the rows' spans prove them new
/// (docs/guarantees.md, "Consumer: per-row, per-lane coverage";
/// `simulation/tests/integration/on_failure_destination.rs`).
fn poison_partition_key(e: &Event, own_lane: bool) -> String {
    if own_lane {
        return format!("poison-batch-{}", e.event_id);
    }
    awsmp_producer::partition::partition_key(
        &e.license_arn,
        &e.customer_aws_account_id,
        &e.dimension,
    )
}

impl World {
    /// Put the poison batch once its instant has come (no draw from the scheduler's RNG, so
    /// the schedules of other classes are unchanged).
    pub fn poison_step(&self) {
        let now = self.clock.now();
        let due = self.setup.poison_from.is_some_and(|from| from <= now);
        if !due || !lock(&self.truth).poisoned.is_empty() {
            return;
        }
        let own_lane = self.setup.poison_own_lane;
        for i in 0..POISON_EVENTS {
            let h = hash(self.setup.seed, &["poison-batch", &i.to_string()]);
            let l = (h % self.setup.licenses as u64) as usize;
            let d = ((h >> 8) % DIMENSIONS.len() as u64) as usize;
            let q = 1 + (h >> 16) % 20;
            let e = Event::new(license(l), account(l), DIMENSIONS[d], q, now)
                .with_event_id(format!("poison-batch-{i}"));
            let pk = poison_partition_key(&e, own_lane);
            let data = Bytes::from(awsmp_contract::wire::encode_event(&e));
            let shard = self.stream.put(&pk, None, data);
            let seq = self.stream.with_shards(|shards| {
                shards
                    .iter()
                    .find(|s| s.id == shard)
                    .and_then(|s| s.records.last())
                    .map(|r| r.sequence_number)
            });
            let mut truth = lock(&self.truth);
            let group = (
                e.license_arn.clone(),
                e.customer_aws_account_id.clone(),
                e.dimension.clone(),
            );
            *truth.produced.entry(group).or_default() += q;
            truth.poisoned.extend(seq.map(|s| (shard.clone(), s)));
        }
        self.faults.count("poison-batch");
        self.log("poison batch: 3 events whose deliveries fail while faults are on");
    }

    /// When `delivery` holds a poison record and faults are on: the invocation fails before
    /// the consumer runs, and the mapping takes it as a function error. True when it did.
    pub fn fail_poisoned(&self, delivery: &Delivery) -> bool {
        if !self.faults.enabled() {
            return false;
        }
        let poisoned = {
            let truth = lock(&self.truth);
            delivery.event.records.iter().any(|r| {
                r.kinesis
                    .sequence_number
                    .parse::<u128>()
                    .is_ok_and(|s| truth.poisoned.contains(&(delivery.lane.0.clone(), s)))
            })
        };
        if !poisoned {
            return false;
        }
        self.faults.count("poison-batch-failure");
        crate::causes::note_lane_failure(
            self,
            crate::stages::Step::ConsumerBatch,
            &delivery.lane.0,
        );
        let now = self.clock.now();
        let mut esm = lock(&self.esm);
        let before = esm.discarded.len();
        esm.complete(delivery, &Completion::FunctionError, now);
        let discarded = esm.discarded.len() > before;
        drop(esm);
        self.log(format!(
            "consume {}#{}: {} records [function error on a poison record]{}",
            delivery.lane.0,
            delivery.lane.1,
            delivery.event.records.len(),
            if discarded {
                " [batch discarded to the on-failure destination]"
            } else {
                ""
            }
        ));
        true
    }
}
