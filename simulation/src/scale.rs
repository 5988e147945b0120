//! The scale class: schedules that reach the limits the others stop short of — many licenses
//! and dimensions, enough usage per hour that one submitter run fills 25-record
//! `BatchMeterUsage` calls and stops at its per-run cap (set low here, so the next run must
//! pick up the rest), a hot group-hour with more than 100 rows so its cleanup is split into
//! 100-key messages, and dedup lanes that outgrow the owners they keep (set low here too), so
//! their ranges are compacted.
//!
//! Each limit reached is counted as the schedule runs (`limit-*` in [`crate::schedule::Explored`]'s
//! limits): `limit-25-record-call` in [`crate::ports::FaultyMetering`], `limit-cleanup-chunk` in
//! the cleanup queue (`testkit/src/queue.rs`), `limit-submitter-cap` after a submitter run,
//! `limit-dedup-compaction` in the dedup lane's wrapper (`testkit/src/ports/consumer.rs`).

use crate::faults::mix;
use crate::names::ALL_DIMENSIONS;
use crate::world::{Setup, World, lock};
use awsmp_contract::Event;
use awsmp_contract::clock::Clock;
use awsmp_pipeline::handlers::submitter::SubmitterOutput;
use chrono::Duration;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Schedules of the scale class, per thousand (outside the poison, discard and race classes).
const SCALE_PER_MILLE: u32 = 120;
/// The submitter's per-run cap in the class: above one call's 25 records, below an hour's
/// groups once several hours are pending.
const SCALE_SUBMITTER_CAP: std::ops::RangeInclusive<usize> = 30..=40;
/// Owned ranges a dedup lane keeps in the class. A replay comes back before its lane's next
/// batch (one shard per lane, batches of at most [`SCALE_BATCH_SIZES`] records), so it finds
/// its owner among the last few.
const SCALE_OWNED_RANGES: usize = 8;
/// The mapping's batch sizes in the class.
const SCALE_BATCH_SIZES: [usize; 2] = [3, 10];
/// Active steps in one hundred that record a burst.
const BURST_PER_CENT: u32 = 25;
/// Flushes of a burst, one second apart: the hot group's rows of an hour (one per second of
/// arrival, the billing time) pass 100 after four or five bursts.
const HOT_SECONDS: std::ops::RangeInclusive<usize> = 20..=30;

/// The scale class, drawn from an RNG of its own so every other schedule stays as it was:
/// 6–8 licenses × 5 dimensions, one or two shards (so a dedup lane is read from one shard at a
/// time and a replay finds its owner), batches of 3 or 10 records, the submitter's cap and the
/// dedup lanes' owners set low.
pub(crate) fn scale_class(seed: u64, mut setup: Setup) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed ^ 0x5ca1_e000));
    let drawn = r.random_range(0..1000) < SCALE_PER_MILLE;
    let other =
        setup.poison_from.is_some() || setup.mapping.max_retry_attempts.is_some() || setup.race;
    if !drawn || other {
        return setup;
    }
    setup.scale = true;
    setup.licenses = r.random_range(6..=8);
    setup.dimensions = ALL_DIMENSIONS.len();
    setup.shards = r.random_range(1..=2);
    setup.mapping.batch_size = SCALE_BATCH_SIZES[r.random_range(0..SCALE_BATCH_SIZES.len())];
    setup.submitter_cap = Some(r.random_range(SCALE_SUBMITTER_CAP));
    setup.lane_owned_ranges = Some(SCALE_OWNED_RANGES);
    setup
}

impl World {
    /// In the scale class, at some active steps while usage flows: a burst of usage — one
    /// event in each of 8–16 groups, then, one second apart, 20–30 flushes of an event of the
    /// hot group (the last license's third dimension), so its hour gathers more rows than one
    /// cleanup message holds (a row is a second of arrival).
    pub(crate) async fn scale_step(&self, producing: bool) {
        if !self.setup.scale || !producing || lock(&self.rng).random_range(0..100) >= BURST_PER_CENT
        {
            return;
        }
        // As before every produce step: every producer timer due by now fires first.
        tokio::time::sleep(std::time::Duration::from_secs(
            crate::steps::PRODUCER_SETTLE_SECS,
        ))
        .await;
        let now = self.clock.now();
        let (groups, seconds) = {
            let mut rng = lock(&self.rng);
            (rng.random_range(8..=16), rng.random_range(HOT_SECONDS))
        };
        let mut batch = Vec::new();
        for _ in 0..groups {
            let (l, d, q) = {
                let mut rng = lock(&self.rng);
                let l = rng.random_range(0..self.setup.licenses);
                (
                    l,
                    rng.random_range(0..self.setup.dimensions),
                    rng.random_range(1..=5),
                )
            };
            batch.push(self.counted(l, d, q, now));
        }
        let hot = self.setup.licenses - 1;
        for _ in 0..seconds {
            batch.push(self.counted(hot, 2, 1, self.clock.now()));
            self.record_burst(std::mem::take(&mut batch)).await;
            self.advance(Duration::seconds(1));
        }
    }

    /// An event of license `l`, dimension `d`, stamped `at`, counted as produced.
    fn counted(&self, l: usize, d: usize, q: u64, at: chrono::DateTime<chrono::Utc>) -> Event {
        let e = Event::new(
            crate::names::license(l),
            crate::names::account(l),
            crate::names::dimension(d),
            q,
            at,
        );
        let mut truth = lock(&self.truth);
        truth.events += 1;
        *truth
            .produced
            .entry((
                e.license_arn.clone(),
                e.customer_aws_account_id.clone(),
                e.dimension.clone(),
            ))
            .or_default() += q;
        e
    }

    /// Record `batch` and flush; what the producer hands back is re-recorded at the next
    /// produce step, as there.
    async fn record_burst(&self, batch: Vec<Event>) {
        let n = batch.len();
        for e in batch {
            if let Err(err) = self.producer.record(e).await {
                self.log(format!("scale burst: record refused: {err}"));
            }
        }
        let undelivered = match self.producer.flush().await {
            Ok(out) => out.undelivered,
            Err(err) => {
                self.log(format!("scale burst: flush failed: {err}"));
                Vec::new()
            }
        };
        self.log(format!(
            "scale burst: {n} events, {} handed back",
            undelivered.len()
        ));
        lock(&self.truth)
            .handed_back
            .extend(undelivered.into_iter().map(|u| u.event));
    }

    /// After a submitter run that began with `pending` records pending: the per-run cap was
    /// reached when the run read at least its cap while more were pending (the next run reads
    /// the rest). Counted; its note for the trace line.
    pub(crate) fn note_submitter_cap(&self, pending: usize, out: &SubmitterOutput) -> &'static str {
        match self.setup.submitter_cap {
            Some(cap) if pending > cap && out.records_read >= cap => {
                self.faults.count("limit-submitter-cap");
                " [per-run cap reached]"
            }
            _ => "",
        }
    }

    /// Aggregated records pending now (the submitter's cap counts them).
    pub(crate) fn pending_records(&self) -> usize {
        if self.setup.submitter_cap.is_none() {
            return 0;
        }
        self.aggregated.items().iter().filter(|i| i.pending).count()
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::setup_for;

    /// About one schedule in thirteen of the default sweep is in the scale class, each with at
    /// least 30 groups an hour, a cap above one call's 25 records, and a short owner list; no
    /// other schedule has any of it. About one in eight is in the lock-edge class.
    #[test]
    fn a_share_of_the_default_sweep_is_in_the_scale_class() {
        let setups: Vec<_> = (0..1000).map(setup_for).collect();
        let scale: Vec<_> = setups.iter().filter(|s| s.scale).collect();
        eprintln!("{} schedules of 1,000 in the scale class", scale.len());
        assert!((50..=150).contains(&scale.len()), "{}", scale.len());
        for s in &scale {
            assert!(s.licenses * s.dimensions >= 30, "{s:?}");
            assert!(s.submitter_cap.is_some_and(|c| c > 25), "{s:?}");
            assert!(s.lane_owned_ranges.is_some() && s.shards <= 2 && s.mapping.batch_size <= 10);
            assert!(s.poison_from.is_none() && !s.race && s.mapping.max_retry_attempts.is_none());
        }
        let others = setups.iter().filter(|s| !s.scale);
        for s in others {
            assert!(
                s.submitter_cap.is_none() && s.lane_owned_ranges.is_none() && s.dimensions == 2
            );
        }
        let edge = setups.iter().filter(|s| s.lock_edge).count();
        eprintln!("{edge} schedules of 1,000 in the lock-edge class");
        assert!((50..=200).contains(&edge), "{edge}");
    }
}
