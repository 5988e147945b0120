//! The Lambda event source mapping over the [`SimStream`]: per shard (children only after
//! every parent was read to its end), records split into `ParallelizationFactor` lanes by
//! partition key with the order of each key kept; batches of at most `BatchSize` records once
//! the batching window has passed; `ReportBatchItemFailures` checkpoints; on a function error
//! the batch is retried (halved first when `BisectBatchOnFunctionError` is on)
//! (<https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>). Retries are unbounded
//! (`MaximumRetryAttempts` −1, the default), so nothing reaches an on-failure destination.

use crate::stream::{Shard, SimStream};
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use awsmp_consumer::handler::kinesis_record;
use awsmp_producer::partition::partition_hash;
use chrono::{DateTime, Duration, Utc};
use std::collections::BTreeMap;

/// The stream's ARN as the mapping reports it in each record.
pub const STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:111122223333:stream/awsmp-usage";
/// The stream's name (the partition of its ingest watermarks).
pub const STREAM_NAME: &str = "awsmp-usage";

/// The mapping's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingConfig {
    /// `BatchSize`.
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds`.
    pub batching_window: Duration,
    /// `ParallelizationFactor` (1–10).
    pub parallelization: u32,
    /// `BisectBatchOnFunctionError`.
    pub bisect: bool,
}

/// One lane's position: the index in its shard's records below which this lane is done, and
/// the size its next batch may have (halved by bisection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lane {
    next: usize,
    size: usize,
}

/// A delivered batch, to be completed with [`EventSourceMapping::complete`].
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Shard and lane.
    pub lane: (String, u32),
    /// The event as Lambda passes it.
    pub event: KinesisEvent,
    /// Index in the shard of each delivered record.
    indices: Vec<usize>,
}

/// How an invocation ended, as the mapping sees it.
#[derive(Debug, Clone)]
pub enum Completion {
    /// The function returned this response.
    Response(KinesisEventResponse),
    /// A function error (crash, timeout): the whole batch is retried.
    FunctionError,
}

/// The mapping's state.
#[derive(Debug)]
pub struct EventSourceMapping {
    config: MappingConfig,
    lanes: BTreeMap<(String, u32), Lane>,
    /// Batches delivered, retries after a function error, bisections, checkpoint resumes.
    pub stats: BTreeMap<&'static str, u64>,
}

fn lane_of(partition_key: &str, parallelization: u32) -> u32 {
    (partition_hash(partition_key) % u128::from(parallelization.max(1))) as u32
}

impl EventSourceMapping {
    /// A mapping with `config`, at the start of every shard (`TRIM_HORIZON`).
    pub fn new(config: MappingConfig) -> Self {
        Self {
            config,
            lanes: BTreeMap::new(),
            stats: BTreeMap::new(),
        }
    }

    fn lane(&mut self, key: &(String, u32)) -> Lane {
        let size = self.config.batch_size;
        *self
            .lanes
            .entry(key.clone())
            .or_insert(Lane { next: 0, size })
    }

    /// True when every lane of `shard` is past its last record.
    fn shard_done(&self, shard: &Shard) -> bool {
        (0..self.config.parallelization).all(|l| {
            let next = self.lanes.get(&(shard.id.clone(), l)).map_or(0, |x| x.next);
            shard.records[next.min(shard.records.len())..]
                .iter()
                .all(|r| lane_of(&r.partition_key, self.config.parallelization) != l)
        })
    }

    /// Closed shards read to their end: their watermark is final.
    pub fn drained(&self, stream: &SimStream) -> Vec<String> {
        stream.with_shards(|shards| {
            shards
                .iter()
                .filter(|s| s.closed && self.shard_done(s))
                .map(|s| s.id.clone())
                .collect()
        })
    }

    /// The lanes that have a batch to deliver at `now`, in a stable order.
    pub fn ready(&mut self, stream: &SimStream, now: DateTime<Utc>) -> Vec<(String, u32)> {
        stream.with_shards(|shards| self.ready_in(shards, now))
    }

    fn ready_in(&mut self, shards: &[Shard], now: DateTime<Utc>) -> Vec<(String, u32)> {
        let done: BTreeMap<&str, bool> = shards
            .iter()
            .map(|s| (s.id.as_str(), s.closed && self.shard_done(s)))
            .collect();
        let mut out = Vec::new();
        for shard in shards {
            if !shard
                .parents
                .iter()
                .all(|p| done.get(p.as_str()) == Some(&true))
            {
                continue; // Lambda reads a child only after its parents
            }
            for l in 0..self.config.parallelization {
                let key = (shard.id.clone(), l);
                let lane = self.lane(&key);
                let pf = self.config.parallelization;
                let mut pending = shard.records[lane.next.min(shard.records.len())..]
                    .iter()
                    .filter(|r| lane_of(&r.partition_key, pf) == l);
                let Some(first) = pending.next() else {
                    continue;
                };
                if 1 + pending.take(lane.size).count() >= lane.size
                    || first.arrival + self.config.batching_window <= now
                    || shard.closed
                {
                    out.push(key);
                }
            }
        }
        out
    }

    /// The next batch of `lane`.
    pub fn deliver(&mut self, stream: &SimStream, lane: &(String, u32)) -> Option<Delivery> {
        stream.with_shards(|shards| self.deliver_in(shards, lane))
    }

    fn deliver_in(&mut self, shards: &[Shard], lane: &(String, u32)) -> Option<Delivery> {
        let shard = shards.iter().find(|s| s.id == lane.0)?;
        let state = self.lane(lane);
        let pf = self.config.parallelization;
        let (indices, records): (Vec<usize>, Vec<_>) = shard
            .records
            .iter()
            .enumerate()
            .skip(state.next)
            .filter(|(_, r)| lane_of(&r.partition_key, pf) == lane.1)
            .take(state.size.max(1))
            .map(|(i, r)| {
                let rec = kinesis_record(
                    STREAM_ARN,
                    &shard.id,
                    &r.sequence_number.to_string(),
                    &r.partition_key,
                    r.arrival,
                    r.data.to_vec(),
                );
                (i, rec)
            })
            .unzip();
        if records.is_empty() {
            return None;
        }
        *self.stats.entry("batches").or_default() += 1;
        let mut event = KinesisEvent::default();
        event.records = records;
        Some(Delivery {
            lane: lane.clone(),
            event,
            indices,
        })
    }

    /// Apply how `delivery` ended: a clean response checkpoints past the batch; a reported
    /// item failure checkpoints just before it; a function error, or a response naming no
    /// record of the batch, checkpoints nothing (and halves the failed batch when bisecting).
    pub fn complete(&mut self, delivery: &Delivery, completion: &Completion) {
        let batch = self.config.batch_size;
        let bisect = self.config.bisect;
        let lane = self.lanes.get_mut(&delivery.lane).expect("delivered lane");
        // An identifier naming no record of the batch (or none at all) fails the whole batch,
        // as a function error does (the local mapping, `awsmp_loadtest::kinesis_esm`, agrees).
        let names_none = |resp: &KinesisEventResponse| {
            resp.batch_item_failures.iter().any(|f| {
                f.item_identifier.as_deref().is_none_or(|id| {
                    !delivery
                        .event
                        .records
                        .iter()
                        .any(|r| r.kinesis.sequence_number == id)
                })
            })
        };
        match completion {
            Completion::Response(resp) if !names_none(resp) => {
                let failed = resp
                    .batch_item_failures
                    .iter()
                    .filter_map(|f| f.item_identifier.as_deref())
                    .filter_map(|id| {
                        delivery
                            .event
                            .records
                            .iter()
                            .position(|r| r.kinesis.sequence_number == id)
                    })
                    .min();
                match failed {
                    Some(0) => {
                        *self.stats.entry("checkpoint-resumes").or_default() += 1;
                    }
                    Some(k) => {
                        lane.next = delivery.indices[k];
                        *self.stats.entry("checkpoint-resumes").or_default() += 1;
                    }
                    None => {
                        lane.next = delivery.indices.last().map_or(lane.next, |i| i + 1);
                        lane.size = batch;
                    }
                }
            }
            _ => {
                *self.stats.entry("function-errors").or_default() += 1;
                // Lambda halves the batch that failed, not the batch size it aimed for.
                let failed = delivery.indices.len();
                if bisect && failed > 1 {
                    lane.size = failed.div_ceil(2);
                    *self.stats.entry("bisections").or_default() += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultPlan, Rates};
    use aws_lambda_events::event::streams::KinesisBatchItemFailure;
    use awsmp_pipeline::domain::clock::FixedClock;
    use bytes::Bytes;
    use std::sync::Arc;

    fn setup(pf: u32) -> (SimStream, EventSourceMapping, DateTime<Utc>) {
        let now: DateTime<Utc> = "2026-11-30T10:00:00Z".parse().unwrap();
        let clock = Arc::new(FixedClock::new(now));
        let stream = SimStream::new(1, clock, Arc::new(FaultPlan::new(1, Rates::default())));
        let esm = EventSourceMapping::new(MappingConfig {
            batch_size: 4,
            batching_window: Duration::seconds(1),
            parallelization: pf,
            bisect: true,
        });
        (stream, esm, now)
    }

    #[test]
    fn item_failures_resume_and_function_errors_bisect() {
        let (stream, mut esm, now) = setup(1);
        for i in 0..6 {
            stream.put(&format!("k{i}"), None, Bytes::from_static(b"x"));
        }
        let later = now + Duration::seconds(5);
        let lane = esm.ready(&stream, later).remove(0);
        let d = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(d.event.records.len(), 4);
        esm.complete(&d, &Completion::FunctionError);
        let d = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(d.event.records.len(), 2);
        let mut resp = KinesisEventResponse::default();
        let mut f = KinesisBatchItemFailure::default();
        f.item_identifier = Some(d.event.records[1].kinesis.sequence_number.clone());
        resp.batch_item_failures.push(f);
        esm.complete(&d, &Completion::Response(resp));
        let again = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(
            again.event.records[0].kinesis.sequence_number,
            d.event.records[1].kinesis.sequence_number
        );
        let ok = Completion::Response(KinesisEventResponse::default());
        esm.complete(&again, &ok);
        // A clean batch restores the full batch size: the last three records in one batch.
        let rest = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(rest.event.records.len(), 3);
        esm.complete(&rest, &ok);
        assert!(esm.deliver(&stream, &lane).is_none());
    }

    #[test]
    fn children_wait_for_their_parent_and_lanes_keep_key_order() {
        let (stream, mut esm, now) = setup(2);
        stream.put("a", None, Bytes::from_static(b"1"));
        stream.split(0).unwrap();
        stream.put("a", None, Bytes::from_static(b"2"));
        let later = now + Duration::seconds(5);
        let ready = esm.ready(&stream, later);
        assert_eq!(ready.len(), 1, "only the parent's lane: {ready:?}");
        let d = esm.deliver(&stream, &ready[0]).unwrap();
        assert_eq!(d.event.records[0].kinesis.data.0, b"1");
        esm.complete(&d, &Completion::Response(KinesisEventResponse::default()));
        assert_eq!(esm.drained(&stream).len(), 1);
        let ready = esm.ready(&stream, later);
        assert_eq!(ready.len(), 1);
        let d = esm.deliver(&stream, &ready[0]).unwrap();
        assert_eq!(d.event.records[0].kinesis.data.0, b"2");
    }
}
