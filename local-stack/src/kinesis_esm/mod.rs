//! A local Kinesis event source mapping: plays Lambda's part between a stream and a handler.
//!
//! Polls every shard (`ListShards`, `GetShardIterator`, `GetRecords`), builds batches of at
//! most `batch_size` records in shard order (delivering early when the shard is caught up or
//! the batching window has passed), and hands each batch to the handler as a
//! [`KinesisEvent`] built exactly like Lambda's (base64 data, `partitionKey`,
//! `sequenceNumber`, `approximateArrivalTimestamp`, `eventSourceARN`, `eventID` =
//! `shardId-…:seq`). Like Lambda with `ReportBatchItemFailures`:
//!
//! - `batchItemFailures` are checkpoints: everything before the lowest failed sequence number
//!   is done, delivery resumes at it;
//! - a function error (or a response naming no record of the batch) retries the batch,
//!   bisected when `bisect_on_error` is set; a reported failure of the batch's first record
//!   retries the whole batch, unhalved (the checkpoint is before it);
//! - after `max_retry_attempts` retries the batch is discarded: a failure record (shard,
//!   sequence range, arrival times, size) goes to the on-failure destination queue and the
//!   mapping moves on.
//!
//! Checkpoints (last sequence number done, per shard) persist in a JSON file, so repeated
//! `awsmp-local tick`s continue where the last one stopped. The file records the stream it
//! belongs to (ARN and creation time); checkpoints of another stream, and a sequence number the
//! stream refuses, are reset with a warning (listed in [`EsmReport::checkpoints_reset`]) and the
//! shard is read from its start — the consumer's dedup makes the re-delivery harmless. [`KinesisEsm::drain`] takes any
//! `FnMut` handler and drains shards one after another; [`KinesisEsm::drain_concurrent`] takes
//! an `Fn` handler and drains the shards of a generation concurrently (children of a reshard
//! wait for their parents either way). Within a shard, `parallelization_factor` > 1 runs
//! several batches at once, ordered per partition key ([`deliver_round`]); a shard's
//! checkpoint only ever passes records that are all done.
//!
//! ```no_run
//! # async fn demo(kinesis: aws_sdk_kinesis::Client) -> anyhow::Result<()> {
//! use awsmp_local_stack::kinesis_esm::{EsmOptions, KinesisEsm};
//! use aws_lambda_events::event::streams::KinesisEventResponse;
//! let mut esm = KinesisEsm::new(kinesis, "awsmp-usage-events", EsmOptions::default(),
//!     ".awsmp-local/kinesis-esm.json".into()).await?;
//! let report = esm
//!     .drain(|event| async move {
//!         println!("{} records", event.records.len());
//!         Ok::<_, std::convert::Infallible>(KinesisEventResponse::default())
//!     })
//!     .await?;
//! println!("{report:?}");
//! # Ok(()) }
//! ```

mod checkpoints;
mod deliver;
mod follow;
mod lanes;

pub use checkpoints::StreamIdentity;
pub use deliver::{Delivered, FailureRecord, deliver, lambda_record};
pub use lanes::{BatchDone, MAX_PARALLELIZATION_FACTOR, deliver_round, lane_of};

use checkpoints::Checkpoints;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_kinesis::types::ShardIteratorType;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

/// Says whether the records a followed stream will ever carry are all on it.
type Finished<'a> = dyn Fn() -> bool + Sync + 'a;

/// Largest batch Lambda accepts for a Kinesis mapping (`BatchSize`: 1–10,000).
pub const MAX_BATCH_SIZE: usize = 10_000;
/// Most records one `GetRecords` call returns (Kinesis API `Limit`: up to 10,000).
pub const MAX_GET_RECORDS: i32 = 10_000;

/// How often a caught-up shard is polled again: Lambda "polls each shard in your Kinesis
/// stream for records at a base rate of once per second"
/// (https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html); a shard with records is
/// read again as soon as its batch is done.
pub const SHARD_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Pause between reads of a caught-up shard while a batching window gathers: Kinesis serves
/// five `GetRecords` calls a second per shard
/// (<https://docs.aws.amazon.com/streams/latest/dev/service-sizes-and-limits.html>).
pub const GATHER_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Longest pause between retries of a failing batch.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// How the mapping behaves (Lambda's event source mapping settings).
#[derive(Debug, Clone)]
pub struct EsmOptions {
    /// `BatchSize` (default 100).
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds`: how long to gather a batch (default 1 s). While
    /// following a stream ([`KinesisEsm::follow`]), a batch that has records keeps reading a
    /// caught-up shard until the window passes or the batch is full, as Lambda does; a drain
    /// delivers a caught-up shard at once (it only empties the stream).
    pub batching_window: Duration,
    /// `MaximumRetryAttempts` (default 10; `None` = retry until it succeeds).
    pub max_retry_attempts: Option<u32>,
    /// `BisectBatchOnFunctionError` (default true).
    pub bisect_on_error: bool,
    /// `ParallelizationFactor` (1–10, default 1): concurrent batches per shard, ordered per
    /// partition key (see [`deliver_round`]).
    pub parallelization_factor: usize,
    /// Pause before the first retry of a failing batch, doubling per retry up to 5 s (so a
    /// passing outage does not burn the retry budget in milliseconds).
    pub retry_backoff: Duration,
    /// On-failure destination: an SQS client and queue URL.
    pub failure_destination: Option<(aws_sdk_sqs::Client, String)>,
    /// Function ARN written into failure records.
    pub function_arn: String,
}

impl Default for EsmOptions {
    fn default() -> Self {
        Self {
            batch_size: 100,
            batching_window: Duration::from_secs(1),
            max_retry_attempts: Some(10),
            bisect_on_error: true,
            parallelization_factor: 1,
            retry_backoff: Duration::from_millis(100),
            failure_destination: None,
            function_arn: "arn:aws:lambda:us-east-1:000000000000:function:kinesis-consumer".into(),
        }
    }
}

/// What one `drain` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EsmReport {
    /// Shards polled.
    pub shards: usize,
    /// Handler invocations.
    pub invocations: u64,
    /// Records delivered, counting re-deliveries.
    pub records_delivered: u64,
    /// Records checkpointed as done.
    pub records_done: u64,
    /// Invocations that returned an error.
    pub function_errors: u64,
    /// Invocations that reported batch item failures.
    pub partial_failures: u64,
    /// Times a batch was bisected.
    pub bisections: u64,
    /// Batches discarded to the on-failure destination.
    pub discarded: Vec<FailureRecord>,
    /// Checkpoints that did not belong to the stream and were reset (read again from the
    /// shard's start), with why: the file was recorded on another stream, or the stream
    /// refused a checkpoint's sequence number.
    pub checkpoints_reset: Vec<String>,
}

impl EsmReport {
    /// Add another report's counts (of a shard, a lane or a round) to this one.
    pub fn add(&mut self, r: EsmReport) {
        self.checkpoints_reset.extend(r.checkpoints_reset);
        self.invocations += r.invocations;
        self.records_delivered += r.records_delivered;
        self.records_done += r.records_done;
        self.function_errors += r.function_errors;
        self.partial_failures += r.partial_failures;
        self.bisections += r.bisections;
        self.discarded.extend(r.discarded);
    }
}

/// The mapping for one stream.
pub struct KinesisEsm {
    kinesis: aws_sdk_kinesis::Client,
    stream: String,
    stream_arn: String,
    options: EsmOptions,
    checkpoint_path: PathBuf,
    checkpoints: std::sync::Mutex<Checkpoints>,
    /// Resets found when the checkpoints were read, for the next report.
    resets: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for KinesisEsm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisEsm")
            .field("stream", &self.stream)
            .field("checkpoint_path", &self.checkpoint_path)
            .finish_non_exhaustive()
    }
}

impl KinesisEsm {
    /// A mapping for `stream`, its checkpoints in `checkpoint_path` (created on first save).
    /// Checkpoints recorded on another stream (or unreadable) are reset with a warning.
    pub async fn new(
        kinesis: aws_sdk_kinesis::Client,
        stream: &str,
        options: EsmOptions,
        checkpoint_path: PathBuf,
    ) -> Result<Self> {
        let identity = stream_identity(&kinesis, stream).await?;
        let bytes = Checkpoints::read_file(&checkpoint_path)?;
        let (checkpoints, reset) = Checkpoints::for_stream(bytes.as_deref(), &identity);
        let mut resets = Vec::new();
        if let Some(why) = reset {
            tracing::warn!(file = %checkpoint_path.display(), stream, reason = %why, "resetting the event source mapping's checkpoints: every shard is read from its start");
            resets.push(format!("all shards: {why}"));
        }
        Ok(Self {
            kinesis,
            stream: stream.to_owned(),
            stream_arn: identity.stream_arn,
            options: EsmOptions {
                batch_size: options.batch_size.clamp(1, MAX_BATCH_SIZE),
                parallelization_factor: options
                    .parallelization_factor
                    .clamp(1, MAX_PARALLELIZATION_FACTOR),
                ..options
            },
            checkpoint_path,
            checkpoints: std::sync::Mutex::new(checkpoints),
            resets: std::sync::Mutex::new(resets),
        })
    }

    /// The stream's ARN.
    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// Last sequence number done, per shard.
    pub fn checkpoints(&self) -> BTreeMap<String, String> {
        self.lock().shards.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Checkpoints> {
        // A poisoned lock only means a shard task panicked holding plain data.
        self.checkpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record `seq` as the last done on `shard` (`None`: forget the shard's checkpoint) and
    /// persist every checkpoint.
    fn checkpoint(&self, shard: &str, seq: Option<&str>) -> Result<()> {
        // The lock is held through the write: concurrent shards never interleave files.
        let mut cps = self.lock();
        match seq {
            Some(seq) => cps.shards.insert(shard.to_owned(), seq.to_owned()),
            None => cps.shards.remove(shard),
        };
        cps.save(&self.checkpoint_path)
    }

    /// Every shard as (id, parent ids).
    async fn shards(&self) -> Result<Vec<(String, Vec<String>)>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let req = match &token {
                Some(t) => self.kinesis.list_shards().next_token(t),
                None => self.kinesis.list_shards().stream_name(&self.stream),
            };
            let page = req.send().await.context("ListShards")?;
            out.extend(page.shards().iter().map(|s| {
                let parents = [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                    .into_iter()
                    .flatten()
                    .map(str::to_owned)
                    .collect();
                (s.shard_id().to_owned(), parents)
            }));
            match page.next_token() {
                Some(t) => token = Some(t.to_owned()),
                None => break,
            }
        }
        out.sort();
        Ok(out)
    }

    /// Deliver every shard's records to `handler` until each shard is caught up, one shard
    /// after another (see [`KinesisEsm::drain_concurrent`] for Lambda's one-batch-per-shard
    /// concurrency).
    pub async fn drain<F, Fut, E>(&mut self, handler: F) -> Result<EsmReport>
    where
        F: FnMut(KinesisEvent) -> Fut,
        Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
        E: std::fmt::Display,
    {
        let cell = std::cell::RefCell::new(handler);
        // Shards run one at a time here, so the handler is never borrowed twice.
        let shared = |e: KinesisEvent| (cell.borrow_mut())(e);
        self.run(&shared, false, None).await
    }

    /// Like [`KinesisEsm::drain`], with the shards of one generation drained concurrently
    /// (each still in order, one batch at a time), as Lambda does.
    pub async fn drain_concurrent<F, Fut, E>(&mut self, handler: F) -> Result<EsmReport>
    where
        F: Fn(KinesisEvent) -> Fut,
        Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
        E: std::fmt::Display,
    {
        self.run(&handler, true, None).await
    }

    /// Drain the shards of each generation (concurrently when `concurrent`); with `finished`,
    /// each shard keeps polling as Lambda's poller does until `finished()` holds
    /// ([`KinesisEsm::follow`]).
    async fn run<F, Fut, E>(
        &self,
        handler: &F,
        concurrent: bool,
        finished: Option<&Finished<'_>>,
    ) -> Result<EsmReport>
    where
        F: Fn(KinesisEvent) -> Fut,
        Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
        E: std::fmt::Display,
    {
        let mut pending = self.shards().await?;
        let mut report = EsmReport {
            shards: pending.len(),
            ..EsmReport::default()
        };
        let mut reports = Vec::new();
        // Generations: a child shard starts only once its parents are drained (Lambda's order
        // across a reshard); the shards of one generation run concurrently.
        while !pending.is_empty() {
            let ids: std::collections::HashSet<String> =
                pending.iter().map(|(id, _)| id.clone()).collect();
            let (ready, blocked): (Vec<_>, Vec<_>) = pending
                .into_iter()
                .partition(|(_, parents)| parents.iter().all(|p| !ids.contains(p)));
            anyhow::ensure!(!ready.is_empty(), "shard parents form a cycle");
            pending = blocked;
            if concurrent {
                reports.extend(
                    futures::future::try_join_all(
                        ready
                            .iter()
                            .map(|(shard, _)| self.drain_shard(shard, handler, finished)),
                    )
                    .await?,
                );
            } else {
                for (shard, _) in &ready {
                    reports.push(self.drain_shard(shard, handler, finished).await?);
                }
            }
        }
        report.checkpoints_reset =
            std::mem::take(&mut *self.resets.lock().unwrap_or_else(|e| e.into_inner()));
        for r in reports {
            report.add(r);
        }
        Ok(report)
    }

    /// Deliver one shard's records until it is caught up (with `finished`: until it is caught
    /// up after `finished()` held, polling a caught-up shard every [`SHARD_POLL_INTERVAL`]).
    async fn drain_shard<F, Fut, E>(
        &self,
        shard: &str,
        handler: &F,
        finished: Option<&Finished<'_>>,
    ) -> Result<EsmReport>
    where
        F: Fn(KinesisEvent) -> Fut,
        Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
        E: std::fmt::Display,
    {
        let mut report = EsmReport::default();
        let mut reader = ShardReader {
            iterator: self.shard_iterator(shard, &mut report).await?,
            buffer: VecDeque::new(),
            caught_up: false,
        };
        let on_batch = |done: BatchDone| async move {
            if let Some(rec) = &done.discarded {
                self.send_failure(rec).await?;
            }
            if let Some(seq) = &done.checkpoint {
                self.checkpoint(shard, Some(seq))?;
            }
            anyhow::Ok(())
        };
        loop {
            // Read before the poll: a poll that finds the shard caught up after production
            // finished has seen everything.
            let done_before = finished.is_none_or(|f| f());
            let polled = Instant::now();
            self.fill(shard, &mut reader, finished.is_some()).await?;
            if reader.buffer.is_empty() {
                if done_before || reader.iterator.is_none() {
                    return Ok(report);
                }
                tokio::time::sleep(SHARD_POLL_INTERVAL.saturating_sub(polled.elapsed())).await;
                reader.caught_up = false;
                continue;
            }
            // Every record read goes out in this round, over the shard's lanes.
            let round: Vec<KinesisEventRecord> = reader.buffer.drain(..).collect();
            let done =
                deliver_round(&self.stream_arn, &round, &self.options, handler, &on_batch).await?;
            report.add(done);
            if finished.is_some() {
                // What arrived during the round is read at once, as Lambda's poller does.
                reader.caught_up = false;
            }
        }
    }

    /// An iterator after the shard's checkpoint, or at its start without one. A checkpoint
    /// the stream refuses (`InvalidArgumentException`: a sequence number of another stream)
    /// is reset with a warning, and the shard read from its start.
    async fn shard_iterator(&self, shard: &str, report: &mut EsmReport) -> Result<Option<String>> {
        let req = || {
            self.kinesis
                .get_shard_iterator()
                .stream_name(&self.stream)
                .shard_id(shard)
        };
        let start = self.lock().shards.get(shard).cloned();
        if let Some(seq) = start {
            let after = req()
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(&seq)
                .send()
                .await;
            match after {
                Ok(out) => return Ok(out.shard_iterator),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_invalid_argument_exception()) =>
                {
                    let why = aws_sdk_kinesis::error::DisplayErrorContext(&e).to_string();
                    tracing::warn!(shard, sequence = %seq, error = %why, "the stream refuses this shard's checkpoint; resetting it: the shard is read from its start");
                    report
                        .checkpoints_reset
                        .push(format!("{shard}: sequence number {seq} refused: {why}"));
                    self.checkpoint(shard, None)?;
                }
                Err(e) => return Err(e).with_context(|| format!("GetShardIterator {shard}")),
            }
        }
        Ok(req()
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .with_context(|| format!("GetShardIterator {shard}"))?
            .shard_iterator)
    }

    /// Fill the reader's buffer: until a batch is full, the shard is caught up, or the
    /// batching window has passed. With `gather` (following a stream), a buffer that holds
    /// records keeps reading a caught-up shard every [`GATHER_POLL_INTERVAL`] until the window
    /// passes, as Lambda's batching window does
    /// (<https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>).
    async fn fill(&self, shard: &str, reader: &mut ShardReader, gather: bool) -> Result<()> {
        let window_start = Instant::now();
        let window = self.options.batching_window;
        let round = self.options.batch_size * self.options.parallelization_factor;
        while reader.buffer.len() < round {
            if reader.caught_up {
                let left = window.saturating_sub(window_start.elapsed());
                let gathering = gather && !reader.buffer.is_empty() && reader.iterator.is_some();
                if !gathering || left.is_zero() {
                    break;
                }
                tokio::time::sleep(GATHER_POLL_INTERVAL.min(left)).await;
                reader.caught_up = false;
            }
            let Some(it) = reader.iterator.take() else {
                reader.caught_up = true; // closed shard, fully read
                break;
            };
            let want = (round - reader.buffer.len()).min(MAX_GET_RECORDS as usize);
            let out = self
                .kinesis
                .get_records()
                .shard_iterator(&it)
                .limit(want as i32)
                .send()
                .await
                .with_context(|| format!("GetRecords {shard}"))?;
            let got = out.records().len();
            reader.buffer.extend(
                out.records()
                    .iter()
                    .map(|r| lambda_record(&self.stream_arn, shard, r)),
            );
            reader.iterator = out.next_shard_iterator().map(str::to_owned);
            if got == 0 && out.millis_behind_latest().unwrap_or(0) == 0 {
                reader.caught_up = true;
            }
            if window_start.elapsed() >= window && !reader.buffer.is_empty() {
                break;
            }
        }
        Ok(())
    }

    async fn send_failure(&self, rec: &FailureRecord) -> Result<()> {
        tracing::error!(shard = %rec.shard_id, start = %rec.start_sequence_number, end = %rec.end_sequence_number, "retries exhausted; batch sent to the on-failure destination");
        let Some((sqs, url)) = &self.options.failure_destination else {
            return Ok(());
        };
        let now: DateTime<Utc> = Utc::now();
        let body = serde_json::json!({
            "requestContext": {
                "requestId": uuid::Uuid::new_v4().to_string(),
                "functionArn": self.options.function_arn,
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": self.options.max_retry_attempts.unwrap_or(0) + 1,
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": now.to_rfc3339_opts(SecondsFormat::Millis, true),
            "KinesisBatchInfo": rec,
        });
        sqs.send_message()
            .queue_url(url)
            .message_body(body.to_string())
            .send()
            .await
            .context("SendMessage to the on-failure destination")?;
        Ok(())
    }
}

/// Where one shard's reading stands.
struct ShardReader {
    iterator: Option<String>,
    /// Records read, not yet done.
    buffer: VecDeque<KinesisEventRecord>,
    caught_up: bool,
}

/// The stream's ARN and creation time (`DescribeStreamSummary`).
async fn stream_identity(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<StreamIdentity> {
    let summary = kinesis
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .with_context(|| format!("DescribeStreamSummary {stream}"))?;
    let s = summary
        .stream_description_summary()
        .context("DescribeStreamSummary without a summary")?;
    Ok(StreamIdentity {
        stream_arn: s.stream_arn().to_owned(),
        created_millis: s.stream_creation_timestamp().to_millis().unwrap_or(0),
    })
}
