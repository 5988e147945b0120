//! The Lambda event source mapping over the [`SimStream`]: per shard (children only after
//! every parent was read to its end), records split into `ParallelizationFactor` lanes by
//! partition key with the order of each key kept; batches of at most `BatchSize` records once
//! the batching window has passed; `ReportBatchItemFailures` checkpoints; on a function error
//! the batch is retried (halved first when `BisectBatchOnFunctionError` is on)
//! (<https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>). A batch that fails
//! `MaximumRetryAttempts` times (splitting it does not count), or whose records grew older
//! than `MaximumRecordAgeInSeconds`, is discarded: its invocation record goes to the on-failure
//! destination (`testkit/src/destination.rs`) and the mapping moves on
//! (<https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html>). Both
//! are −1 (never discard) in the deployed template (`infra/cfn/ingest_stack.py`, whose
//! `ConsumerMaximumRetryAttempts` parameter a seller may set).

use crate::destination::{Condition, Discarded, OnFailureDestination};
use crate::stream::{Shard, SimStream, StoredRecord};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use awsmp_consumer::handler::kinesis_record;
use awsmp_producer::partition::partition_hash;
use chrono::{DateTime, Duration, Utc};
use std::collections::BTreeMap;

/// The stream's ARN as the mapping reports it in each record.
pub const STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:111122223333:stream/awsmp-usage";
/// `r` of shard `shard_id` as the mapping hands it to the function (the re-drive builds the
/// same from the shard it reads).
pub fn delivered(shard_id: &str, r: &StoredRecord) -> KinesisEventRecord {
    kinesis_record(
        STREAM_ARN,
        shard_id,
        &r.sequence_number.to_string(),
        &r.partition_key,
        r.arrival,
        r.data.to_vec(),
    )
}

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
    /// `MaximumRetryAttempts` (`None`: −1, retry until the batch succeeds).
    pub max_retry_attempts: Option<u32>,
    /// `MaximumRecordAgeInSeconds` (`None`: −1, never discard for age).
    pub max_record_age: Option<Duration>,
}

impl MappingConfig {
    /// The deployed template's settings (`infra/cfn/ingest_stack.py`) but for the batch size,
    /// window, parallelization and bisection given: retries and record age unbounded.
    pub fn unbounded(
        batch_size: usize,
        batching_window: Duration,
        parallelization: u32,
        bisect: bool,
    ) -> Self {
        Self {
            batch_size,
            batching_window,
            parallelization,
            bisect,
            max_retry_attempts: None,
            max_record_age: None,
        }
    }
}

/// One lane's position: the index in its shard's records below which this lane is done, the
/// size its next batch may have (halved by bisection), the retries its batch has used and the
/// invocations it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lane {
    next: usize,
    size: usize,
    retries: u32,
    invocations: u32,
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
    /// Batches delivered, retries after a function error, bisections, checkpoint resumes,
    /// batches discarded.
    pub stats: BTreeMap<&'static str, u64>,
    /// Every batch the mapping gave up on (the ground truth the destination is checked against).
    pub discarded: Vec<Discarded>,
    /// The on-failure destination (an SQS queue).
    pub destination: OnFailureDestination,
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
            discarded: Vec::new(),
            destination: OnFailureDestination::default(),
        }
    }

    fn lane(&mut self, key: &(String, u32)) -> Lane {
        let size = self.config.batch_size;
        *self.lanes.entry(key.clone()).or_insert(Lane::at(0, size))
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
            .map(|(i, r)| (i, delivered(&shard.id, r)))
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

    /// Apply how `delivery` ended at `now`: a clean response checkpoints past the batch; a
    /// reported item failure checkpoints just before it; a function error, or a response naming
    /// no record of the batch, checkpoints nothing (and halves the failed batch when bisecting,
    /// which uses no retry). A failed batch whose retries are used up, or whose first record is
    /// older than the maximum record age, is discarded: its invocation record goes to the
    /// on-failure destination and the lane moves past it.
    pub fn complete(&mut self, delivery: &Delivery, completion: &Completion, now: DateTime<Utc>) {
        let batch = self.config.batch_size;
        let outcome = outcome(delivery, completion);
        let lane = self.lanes.get_mut(&delivery.lane).expect("delivered lane");
        lane.invocations += 1;
        match outcome {
            Outcome::Done => {
                let next = delivery.indices.last().map_or(lane.next, |i| i + 1);
                *lane = Lane::at(next, batch);
            }
            Outcome::ResumeAt(k) => {
                // The bisected size stays until a batch succeeds whole.
                *lane = Lane {
                    size: lane.size,
                    ..Lane::at(delivery.indices[k], batch)
                };
                *self.stats.entry("checkpoint-resumes").or_default() += 1;
            }
            Outcome::RetryUnhalved => {
                *self.stats.entry("checkpoint-resumes").or_default() += 1;
                self.retry_or_discard(delivery, now, false);
            }
            Outcome::RetryFailed => {
                *self.stats.entry("function-errors").or_default() += 1;
                // Lambda halves the batch that failed, not the batch size it aimed for.
                let failed = delivery.indices.len();
                let split = self.config.bisect && failed > 1;
                if split {
                    lane.size = failed.div_ceil(2);
                    *self.stats.entry("bisections").or_default() += 1;
                }
                self.retry_or_discard(delivery, now, split);
            }
        }
    }

    /// After a failed invocation: count a retry (a split uses none), or discard the batch.
    fn retry_or_discard(&mut self, delivery: &Delivery, now: DateTime<Utc>, split: bool) {
        let config = self.config;
        let lane = self.lanes.get_mut(&delivery.lane).expect("delivered lane");
        let oldest = delivery
            .event
            .records
            .first()
            .map(|r| r.kinesis.approximate_arrival_timestamp.0);
        let aged = config
            .max_record_age
            .zip(oldest)
            .is_some_and(|(age, at)| at + age < now);
        let exhausted = !split && config.max_retry_attempts.is_some_and(|m| lane.retries >= m);
        if !(aged || exhausted) {
            lane.retries += u32::from(!split);
            return;
        }
        let condition = if aged {
            Condition::RecordAgeExceeded
        } else {
            Condition::RetryAttemptsExhausted
        };
        let invocations = lane.invocations;
        let next = delivery.indices.last().map_or(lane.next, |i| i + 1);
        *lane = Lane::at(next, config.batch_size);
        let discarded = Discarded::of(delivery, condition, invocations);
        *self.stats.entry("batches-discarded").or_default() += 1;
        if !awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::EsmDropsExhaustedBatch) {
            self.destination.send(&discarded.record(now));
        }
        self.discarded.push(discarded);
    }
}

impl Lane {
    /// A fresh batch at `next`.
    fn at(next: usize, size: usize) -> Self {
        Self {
            next,
            size,
            retries: 0,
            invocations: 0,
        }
    }
}

/// How an invocation ended, as the mapping reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Every record done.
    Done,
    /// The lowest reported failure is the batch's `k`-th record (`k` > 0): resume there.
    ResumeAt(usize),
    /// The first record reported failed: the whole batch again, unhalved.
    RetryUnhalved,
    /// A function error, or a response naming no record of the batch.
    RetryFailed,
}

fn outcome(delivery: &Delivery, completion: &Completion) -> Outcome {
    let Completion::Response(resp) = completion else {
        return Outcome::RetryFailed;
    };
    // An identifier naming no record of the batch (or none at all) fails the whole batch,
    // as a function error does (the local mapping, `awsmp_local_stack::kinesis_esm`, agrees).
    let position = |id: Option<&str>| {
        let id = id?;
        delivery
            .event
            .records
            .iter()
            .position(|r| r.kinesis.sequence_number == id)
    };
    let positions: Option<Vec<usize>> = resp
        .batch_item_failures
        .iter()
        .map(|f| position(f.item_identifier.as_deref()))
        .collect();
    match positions.map(|p| p.into_iter().min()) {
        None => Outcome::RetryFailed,
        Some(None) => Outcome::Done,
        Some(Some(0)) => Outcome::RetryUnhalved,
        Some(Some(k)) => Outcome::ResumeAt(k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultPlan, Rates};
    use aws_lambda_events::event::streams::KinesisBatchItemFailure;
    use awsmp_contract::clock::FixedClock;
    use bytes::Bytes;
    use std::sync::Arc;

    fn setup(pf: u32) -> (SimStream, EventSourceMapping, DateTime<Utc>) {
        let now: DateTime<Utc> = "2026-11-30T10:00:00Z".parse().unwrap();
        let clock = Arc::new(FixedClock::new(now));
        let stream = SimStream::new(1, clock, Arc::new(FaultPlan::new(1, Rates::default())));
        let esm =
            EventSourceMapping::new(MappingConfig::unbounded(4, Duration::seconds(1), pf, true));
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
        esm.complete(&d, &Completion::FunctionError, later);
        let d = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(d.event.records.len(), 2);
        let mut resp = KinesisEventResponse::default();
        let mut f = KinesisBatchItemFailure::default();
        f.item_identifier = Some(d.event.records[1].kinesis.sequence_number.clone());
        resp.batch_item_failures.push(f);
        esm.complete(&d, &Completion::Response(resp), later);
        let again = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(
            again.event.records[0].kinesis.sequence_number,
            d.event.records[1].kinesis.sequence_number
        );
        let ok = Completion::Response(KinesisEventResponse::default());
        esm.complete(&again, &ok, later);
        // A clean batch restores the full batch size: the last three records in one batch.
        let rest = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(rest.event.records.len(), 3);
        esm.complete(&rest, &ok, later);
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
        esm.complete(
            &d,
            &Completion::Response(KinesisEventResponse::default()),
            later,
        );
        assert_eq!(esm.drained(&stream).len(), 1);
        let ready = esm.ready(&stream, later);
        assert_eq!(ready.len(), 1);
        let d = esm.deliver(&stream, &ready[0]).unwrap();
        assert_eq!(d.event.records[0].kinesis.data.0, b"2");
    }

    fn bounded(retries: Option<u32>, age: Option<Duration>, bisect: bool) -> MappingConfig {
        MappingConfig {
            max_retry_attempts: retries,
            max_record_age: age,
            ..MappingConfig::unbounded(4, Duration::seconds(1), 1, bisect)
        }
    }

    /// Deliver and fail the lane's batch until it is discarded; the batch sizes seen.
    fn fail_until_discarded(
        esm: &mut EventSourceMapping,
        stream: &SimStream,
        at: DateTime<Utc>,
    ) -> Vec<usize> {
        let lane = esm.ready(stream, at).remove(0);
        let mut sizes = Vec::new();
        while esm.discarded.is_empty() {
            let d = esm.deliver(stream, &lane).unwrap();
            sizes.push(d.event.records.len());
            esm.complete(&d, &Completion::FunctionError, at);
        }
        sizes
    }

    #[test]
    fn exhausted_retries_discard_the_batch_to_the_destination_and_move_on() {
        let (stream, _, now) = setup(1);
        let mut esm = EventSourceMapping::new(bounded(Some(2), None, false));
        for i in 0..5 {
            stream.put(&format!("k{i}"), None, Bytes::from(format!("r{i}")));
        }
        let later = now + Duration::seconds(5);
        // The first try and two retries, then the batch is discarded.
        assert_eq!(fail_until_discarded(&mut esm, &stream, later), [4, 4, 4]);
        let body = esm.destination.receive().expect("an invocation record");
        let rec: crate::destination::InvocationRecord = serde_json::from_str(&body).unwrap();
        assert_eq!(rec.request_context.condition, "RetryAttemptsExhausted");
        assert_eq!(rec.request_context.approximate_invoke_count, 3);
        assert_eq!(rec.kinesis_batch_info.batch_size, 4);
        let seqs: Vec<u128> =
            stream.with_shards(|s| s[0].records.iter().map(|r| r.sequence_number).collect());
        assert_eq!(
            rec.kinesis_batch_info.start_sequence_number,
            seqs[0].to_string()
        );
        assert_eq!(
            rec.kinesis_batch_info.end_sequence_number,
            seqs[3].to_string()
        );
        // The mapping moved on: the fifth record is next, with a fresh retry budget.
        let lane = esm.ready(&stream, later).remove(0);
        let d = esm.deliver(&stream, &lane).unwrap();
        assert_eq!(d.event.records[0].kinesis.data.0, b"r4");
    }

    #[test]
    fn splitting_uses_no_retry_and_isolates_the_failing_record() {
        let (stream, _, now) = setup(1);
        let mut esm = EventSourceMapping::new(bounded(Some(1), None, true));
        for i in 0..4 {
            stream.put(&format!("k{i}"), None, Bytes::from_static(b"x"));
        }
        let later = now + Duration::seconds(5);
        assert_eq!(fail_until_discarded(&mut esm, &stream, later), [4, 2, 1, 1]);
        assert_eq!(esm.discarded[0].records, 1);
        assert_eq!(esm.destination.depth(), 1);
    }

    #[test]
    fn a_record_older_than_the_maximum_age_is_discarded_on_its_failure() {
        let (stream, _, now) = setup(1);
        let mut esm = EventSourceMapping::new(bounded(None, Some(Duration::seconds(60)), false));
        stream.put("k", None, Bytes::from_static(b"x"));
        let lane = esm.ready(&stream, now + Duration::seconds(5)).remove(0);
        let d = esm.deliver(&stream, &lane).unwrap();
        esm.complete(&d, &Completion::FunctionError, now + Duration::seconds(30));
        assert!(esm.discarded.is_empty(), "young enough: retried");
        let d = esm.deliver(&stream, &lane).unwrap();
        esm.complete(&d, &Completion::FunctionError, now + Duration::seconds(61));
        assert_eq!(esm.discarded[0].condition, Condition::RecordAgeExceeded);
        assert!(esm.deliver(&stream, &lane).is_none());
    }

    #[test]
    fn unbounded_retries_never_discard() {
        let (stream, mut esm, now) = setup(1);
        stream.put("k", None, Bytes::from_static(b"x"));
        let later = now + Duration::days(30);
        let lane = esm.ready(&stream, later).remove(0);
        for _ in 0..50 {
            let d = esm.deliver(&stream, &lane).unwrap();
            esm.complete(&d, &Completion::FunctionError, later);
        }
        assert!(esm.discarded.is_empty() && esm.destination.depth() == 0);
    }
}
