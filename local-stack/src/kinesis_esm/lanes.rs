//! `ParallelizationFactor`: several concurrent batches per shard, ordered per partition key
//! (https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html). The records read from a
//! shard are split into `factor` lanes by a hash of their partition key; each lane delivers
//! its records in shard order, one batch at a time, so the records of one partition key are
//! never in two in-flight batches. The shard's checkpoint advances only past records that are
//! all done (processed or discarded), whichever lane finished first.

use super::deliver::{FailureRecord, deliver};
use super::{EsmOptions, EsmReport};
use anyhow::Result;
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

/// Most concurrent batches per shard Lambda allows (`ParallelizationFactor`: 1–10,
/// https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html).
pub const MAX_PARALLELIZATION_FACTOR: usize = 10;

/// What one batch of a lane ended with, for the caller to persist in this order: first the
/// discarded sub-batch (to the on-failure destination), then the new checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchDone {
    /// The sub-batch discarded after its retries ran out.
    pub discarded: Option<FailureRecord>,
    /// The shard's new checkpoint (the last sequence number of the done prefix), when the
    /// batch moved it.
    pub checkpoint: Option<String>,
}

/// The lane of `partition_key` among `lanes` (stable for the process: one key, one lane).
pub fn lane_of(partition_key: &str, lanes: usize) -> usize {
    let mut h = DefaultHasher::new();
    partition_key.hash(&mut h);
    (h.finish() % lanes.max(1) as u64) as usize
}

/// Which records of a round are done, and how far the contiguous done prefix reaches.
struct Prefix {
    done: Vec<bool>,
    reach: usize,
}

impl Prefix {
    /// Mark `indices` done; the new prefix length when it grew.
    fn mark(&mut self, indices: &[usize]) -> Option<usize> {
        for &i in indices {
            self.done[i] = true;
        }
        let before = self.reach;
        while self.done.get(self.reach).copied().unwrap_or(false) {
            self.reach += 1;
        }
        (self.reach > before).then_some(self.reach)
    }
}

/// Deliver `records` (one shard, in order) over `options.parallelization_factor` lanes, every
/// record to the end: each batch's outcome goes to `on_batch` before the lane goes on.
pub async fn deliver_round<F, Fut, E, S, SFut>(
    stream_arn: &str,
    records: &[KinesisEventRecord],
    options: &EsmOptions,
    handler: &F,
    on_batch: &S,
) -> Result<EsmReport>
where
    F: Fn(KinesisEvent) -> Fut,
    Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
    E: std::fmt::Display,
    S: Fn(BatchDone) -> SFut,
    SFut: Future<Output = Result<()>>,
{
    let factor = options
        .parallelization_factor
        .clamp(1, MAX_PARALLELIZATION_FACTOR);
    let mut lanes: Vec<Vec<usize>> = vec![Vec::new(); factor];
    for (i, r) in records.iter().enumerate() {
        lanes[lane_of(&r.kinesis.partition_key, factor)].push(i);
    }
    let prefix = Mutex::new(Prefix {
        done: vec![false; records.len()],
        reach: 0,
    });
    let lane = |indices: Vec<usize>| {
        let prefix = &prefix;
        async move {
            let mut report = EsmReport::default();
            let mut at = 0;
            while at < indices.len() {
                let take = &indices[at..indices.len().min(at + options.batch_size)];
                let batch: Vec<KinesisEventRecord> =
                    take.iter().map(|&i| records[i].clone()).collect();
                let delivered = deliver(stream_arn, &batch, options, &mut report, handler).await;
                let reach = prefix
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .mark(&take[..delivered.done]);
                on_batch(BatchDone {
                    discarded: delivered.discarded,
                    checkpoint: reach.map(|n| records[n - 1].kinesis.sequence_number.clone()),
                })
                .await?;
                report.records_done += delivered.done as u64;
                at += delivered.done;
            }
            anyhow::Ok(report)
        }
    };
    let reports =
        futures::future::try_join_all(lanes.into_iter().filter(|l| !l.is_empty()).map(lane))
            .await?;
    let mut total = EsmReport::default();
    for r in reports {
        total.add(r);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    /// `n` records over `keys` partition keys, sequence numbers 100…
    fn records(n: usize, keys: usize) -> Vec<KinesisEventRecord> {
        (0..n)
            .map(|i| {
                let mut r = KinesisEventRecord::default();
                r.event_id = Some(format!("shardId-000000000000:{}", 100 + i));
                r.kinesis.sequence_number = (100 + i).to_string();
                r.kinesis.partition_key = format!("key-{}", i % keys);
                r
            })
            .collect()
    }

    /// What the handler saw: keys in flight, records processed (in order), batches started.
    #[derive(Default)]
    struct Seen {
        in_flight: BTreeSet<String>,
        max_in_flight_batches: usize,
        in_flight_batches: usize,
        processed: Vec<(String, u64)>,
        overlaps: Vec<String>,
    }

    /// The handler: notes the batch's keys in flight (and any already in flight), fails a
    /// batch holding record 117 while `failures_left` lasts, else records what it processed.
    async fn handle(
        seen: &Mutex<Seen>,
        failures_left: &Mutex<u32>,
        e: KinesisEvent,
    ) -> std::result::Result<KinesisEventResponse, &'static str> {
        let keys: BTreeSet<String> = e
            .records
            .iter()
            .map(|r| r.kinesis.partition_key.clone())
            .collect();
        {
            let mut s = seen.lock().unwrap();
            for k in &keys {
                if !s.in_flight.insert(k.clone()) {
                    s.overlaps.push(k.clone());
                }
            }
            s.in_flight_batches += 1;
            s.max_in_flight_batches = s.max_in_flight_batches.max(s.in_flight_batches);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let fail = e.records.iter().any(|r| r.kinesis.sequence_number == "117") && {
            let mut left = failures_left.lock().unwrap();
            let fail = *left > 0;
            *left = left.saturating_sub(1);
            fail
        };
        let mut s = seen.lock().unwrap();
        s.in_flight_batches -= 1;
        for k in &keys {
            s.in_flight.remove(k);
        }
        if fail {
            return Err("injected function error");
        }
        for r in &e.records {
            s.processed.push((
                r.kinesis.partition_key.clone(),
                r.kinesis.sequence_number.parse().unwrap(),
            ));
        }
        Ok(KinesisEventResponse::default())
    }

    #[tokio::test]
    async fn concurrent_batches_keep_per_key_order_and_checkpoint_only_done_records() {
        // GIVEN 60 records over 7 keys, factor 4, batches of 5, and a batch holding record
        // 117 that fails twice as a function error
        let recs = records(60, 7);
        let seen = Mutex::new(Seen::default());
        let failures_left = Mutex::new(2_u32);
        let handler = |e: KinesisEvent| handle(&seen, &failures_left, e);
        let checkpoints = Mutex::new(Vec::new());
        let on_batch = |done: BatchDone| {
            let (seen, checkpoints) = (&seen, &checkpoints);
            async move {
                if let Some(cp) = done.checkpoint {
                    let cp: u64 = cp.parse().unwrap();
                    let s = seen.lock().unwrap();
                    let processed: BTreeSet<u64> = s.processed.iter().map(|p| p.1).collect();
                    assert!(
                        (100..=cp).all(|q| processed.contains(&q)),
                        "checkpoint {cp} passes a record not yet processed"
                    );
                    checkpoints.lock().unwrap().push(cp);
                }
                anyhow::Ok(())
            }
        };
        let options = EsmOptions {
            batch_size: 5,
            parallelization_factor: 4,
            retry_backoff: Duration::ZERO,
            ..EsmOptions::default()
        };
        // WHEN the round is delivered
        let report = deliver_round("arn", &recs, &options, &handler, &on_batch)
            .await
            .unwrap();
        // THEN batches ran concurrently, never two holding one key, each key in order
        let s = seen.lock().unwrap();
        assert!(s.max_in_flight_batches > 1, "batches overlapped");
        assert!(
            s.overlaps.is_empty(),
            "a key in two in-flight batches: {:?}",
            s.overlaps
        );
        let mut per_key: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for (k, q) in &s.processed {
            per_key.entry(k).or_default().push(*q);
        }
        for (k, qs) in &per_key {
            assert!(
                qs.windows(2).all(|w| w[0] < w[1]),
                "{k} out of order: {qs:?}"
            );
        }
        assert_eq!(s.processed.len(), 60, "every record processed exactly once");
        // AND checkpoints only moved forward, ending at the last record
        let cps = checkpoints.lock().unwrap();
        assert!(cps.windows(2).all(|w| w[0] < w[1]), "{cps:?}");
        assert_eq!(cps.last(), Some(&159));
        assert_eq!((report.function_errors, report.records_done), (2, 60));
    }

    #[test]
    fn one_key_always_maps_to_one_lane_and_factor_one_is_one_lane() {
        for k in ["a", "b", "license|account"] {
            assert_eq!(lane_of(k, 7), lane_of(k, 7));
            assert_eq!(lane_of(k, 1), 0);
        }
        let lanes: BTreeSet<usize> = (0..100).map(|i| lane_of(&format!("k{i}"), 10)).collect();
        assert!(lanes.len() > 5, "keys spread over lanes: {lanes:?}");
    }
}
