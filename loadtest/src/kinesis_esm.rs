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
//! - a function error (or a failure at the batch's first record) retries the batch, bisected
//!   when `bisect_on_error` is set;
//! - after `max_retry_attempts` retries the batch is discarded: a failure record (shard,
//!   sequence range, arrival times, size) goes to the on-failure destination queue and the
//!   mapping moves on.
//!
//! Checkpoints (last sequence number done, per shard) persist in a JSON file, so repeated
//! `awsmp-local tick`s continue where the last one stopped. [`KinesisEsm::drain`] takes any
//! `FnMut` handler and drains shards one after another; [`KinesisEsm::drain_concurrent`] takes
//! an `Fn` handler and drains the shards of a generation concurrently (children of a reshard
//! wait for their parents either way).
//!
//! ```no_run
//! # async fn demo(kinesis: aws_sdk_kinesis::Client) -> anyhow::Result<()> {
//! use awsmp_loadtest::kinesis_esm::{EsmOptions, KinesisEsm};
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

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_kinesis::types::{Record, ShardIteratorType};
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// Largest batch Lambda accepts for a Kinesis mapping (`BatchSize`: 1–10,000).
pub const MAX_BATCH_SIZE: usize = 10_000;
/// Most records one `GetRecords` call returns (Kinesis API `Limit`: up to 10,000).
pub const MAX_GET_RECORDS: i32 = 10_000;

/// Longest pause between retries of a failing batch.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// How the mapping behaves (Lambda's event source mapping settings).
#[derive(Debug, Clone)]
pub struct EsmOptions {
    /// `BatchSize` (default 100).
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds`: how long to gather a batch while the shard still has
    /// records (default 1 s). A caught-up shard delivers at once (waiting would only slow a tick).
    pub batching_window: Duration,
    /// `MaximumRetryAttempts` (default 10; `None` = retry until it succeeds).
    pub max_retry_attempts: Option<u32>,
    /// `BisectBatchOnFunctionError` (default true).
    pub bisect_on_error: bool,
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
}

/// What Lambda sends to an on-failure destination for a Kinesis batch (`KinesisBatchInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureRecord {
    /// Shard.
    pub shard_id: String,
    /// First sequence number of the discarded batch.
    pub start_sequence_number: String,
    /// Last sequence number of the discarded batch.
    pub end_sequence_number: String,
    /// Arrival of the first record.
    pub approximate_arrival_of_first_record: String,
    /// Arrival of the last record.
    pub approximate_arrival_of_last_record: String,
    /// Records in the batch.
    pub batch_size: usize,
    /// Stream ARN.
    pub stream_arn: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Checkpoints {
    /// Shard id → last sequence number done.
    shards: BTreeMap<String, String>,
}

/// The mapping for one stream.
pub struct KinesisEsm {
    kinesis: aws_sdk_kinesis::Client,
    stream: String,
    stream_arn: String,
    options: EsmOptions,
    checkpoint_path: PathBuf,
    checkpoints: std::sync::Mutex<Checkpoints>,
}

impl std::fmt::Debug for KinesisEsm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisEsm")
            .field("stream", &self.stream)
            .field("checkpoint_path", &self.checkpoint_path)
            .finish_non_exhaustive()
    }
}

/// A delivered record built exactly as Lambda builds it from a `GetRecords` record.
pub fn lambda_record(stream_arn: &str, shard_id: &str, r: &Record) -> KinesisEventRecord {
    let mut out = KinesisEventRecord::default();
    out.aws_region = stream_arn.split(':').nth(3).map(str::to_owned);
    out.event_id = Some(format!("{shard_id}:{}", r.sequence_number()));
    out.event_name = Some("aws:kinesis:record".into());
    out.event_source = Some("aws:kinesis".into());
    out.event_source_arn = Some(stream_arn.to_owned());
    out.event_version = Some("1.0".into());
    out.invoke_identity_arn = Some("arn:aws:iam::000000000000:role/kinesis-consumer".into());
    out.kinesis.approximate_arrival_timestamp.0 = r
        .approximate_arrival_timestamp()
        .and_then(|t| {
            // Kinesis reports milliseconds; Lambda's event carries them as fractional seconds.
            Utc.timestamp_millis_opt(t.to_millis().ok()?).single()
        })
        .unwrap_or_else(Utc::now);
    out.kinesis.data.0 = r.data().as_ref().to_vec();
    out.kinesis.partition_key = r.partition_key().unwrap_or_default().to_owned();
    out.kinesis.sequence_number = r.sequence_number().to_owned();
    out.kinesis.kinesis_schema_version = Some("1.0".into());
    out
}

/// How one delivery round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Records at the front of the batch that are done (processed or discarded).
    pub done: usize,
    /// The discarded sub-batch, if retries ran out.
    pub discarded: Option<FailureRecord>,
}

fn failure_record(stream_arn: &str, batch: &[KinesisEventRecord]) -> FailureRecord {
    let shard = batch
        .first()
        .and_then(|r| r.event_id.as_deref())
        .and_then(|id| id.split_once(':'))
        .map(|(s, _)| s.to_owned())
        .unwrap_or_default();
    let at = |r: Option<&KinesisEventRecord>| {
        r.map(|r| {
            r.kinesis
                .approximate_arrival_timestamp
                .0
                .to_rfc3339_opts(SecondsFormat::Millis, true)
        })
        .unwrap_or_default()
    };
    FailureRecord {
        shard_id: shard,
        start_sequence_number: batch
            .first()
            .map(|r| r.kinesis.sequence_number.clone())
            .unwrap_or_default(),
        end_sequence_number: batch
            .last()
            .map(|r| r.kinesis.sequence_number.clone())
            .unwrap_or_default(),
        approximate_arrival_of_first_record: at(batch.first()),
        approximate_arrival_of_last_record: at(batch.last()),
        batch_size: batch.len(),
        stream_arn: stream_arn.to_owned(),
    }
}

/// Deliver `batch` (one shard, in order) until some prefix of it is done: Lambda's retry,
/// bisection and partial-failure rules, without any I/O but the handler. Never returns
/// `done == 0` for a non-empty batch.
pub async fn deliver<F, Fut, E>(
    stream_arn: &str,
    batch: &[KinesisEventRecord],
    options: &EsmOptions,
    report: &mut EsmReport,
    handler: &F,
) -> Delivered
where
    F: Fn(KinesisEvent) -> Fut,
    Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
    E: std::fmt::Display,
{
    let mut hi = batch.len();
    let mut retries: u32 = 0;
    loop {
        let sub = &batch[..hi];
        let mut event = KinesisEvent::default();
        event.records = sub.to_vec();
        report.invocations += 1;
        report.records_delivered += hi as u64;
        // Index of the first record to retry, or None when the whole sub-batch is done.
        let failed_at = match handler(event).await {
            Ok(resp) => {
                let ids: Vec<&str> = resp
                    .batch_item_failures
                    .iter()
                    .map(|f| f.item_identifier.as_deref().unwrap_or(""))
                    .collect();
                if ids.is_empty() {
                    None
                } else {
                    report.partial_failures += 1;
                    // An identifier that names no record of the batch fails the whole batch.
                    let positions: Option<Vec<usize>> = ids
                        .iter()
                        .map(|id| sub.iter().position(|r| r.kinesis.sequence_number == *id))
                        .collect();
                    Some(positions.and_then(|p| p.into_iter().min()).unwrap_or(0))
                }
            }
            Err(e) => {
                report.function_errors += 1;
                tracing::warn!(error = %e, records = hi, "handler failed; the mapping retries the batch");
                Some(0)
            }
        };
        match failed_at {
            None => {
                return Delivered {
                    done: hi,
                    discarded: None,
                };
            }
            // A checkpoint inside the batch: what precedes the failure is done.
            Some(i) if i > 0 => {
                return Delivered {
                    done: i,
                    discarded: None,
                };
            }
            Some(_) => {
                if options.max_retry_attempts.is_some_and(|max| retries >= max) {
                    let rec = failure_record(stream_arn, sub);
                    report.discarded.push(rec.clone());
                    return Delivered {
                        done: hi,
                        discarded: Some(rec),
                    };
                }
                let pause = options
                    .retry_backoff
                    .saturating_mul(1 << retries.min(16))
                    .min(MAX_RETRY_BACKOFF);
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                retries += 1;
                if options.bisect_on_error && hi > 1 {
                    report.bisections += 1;
                    hi = hi.div_ceil(2);
                }
            }
        }
    }
}

impl KinesisEsm {
    /// A mapping for `stream`, its checkpoints in `checkpoint_path` (created on first save).
    pub async fn new(
        kinesis: aws_sdk_kinesis::Client,
        stream: &str,
        options: EsmOptions,
        checkpoint_path: PathBuf,
    ) -> Result<Self> {
        let summary = kinesis
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .with_context(|| format!("DescribeStreamSummary {stream}"))?;
        let stream_arn = summary
            .stream_description_summary()
            .map(|s| s.stream_arn().to_owned())
            .context("stream summary without an ARN")?;
        let checkpoints = match std::fs::read(&checkpoint_path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("reading {}", checkpoint_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Checkpoints::default(),
            Err(e) => return Err(e).context(format!("reading {}", checkpoint_path.display())),
        };
        Ok(Self {
            kinesis,
            stream: stream.to_owned(),
            stream_arn,
            options: EsmOptions {
                batch_size: options.batch_size.clamp(1, MAX_BATCH_SIZE),
                ..options
            },
            checkpoint_path,
            checkpoints: std::sync::Mutex::new(checkpoints),
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

    /// Record `seq` as the last done on `shard` and persist every checkpoint.
    fn checkpoint(&self, shard: &str, seq: &str) -> Result<()> {
        // The lock is held through the write: concurrent shards never interleave files.
        let mut cps = self.lock();
        cps.shards.insert(shard.to_owned(), seq.to_owned());
        if let Some(dir) = self.checkpoint_path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self.checkpoint_path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&*cps)?)?;
        // Rename is atomic: a killed tick never leaves a torn checkpoint file.
        std::fs::rename(&tmp, &self.checkpoint_path)
            .with_context(|| format!("writing {}", self.checkpoint_path.display()))
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
        self.run(&shared, false).await
    }

    /// Like [`KinesisEsm::drain`], with the shards of one generation drained concurrently
    /// (each still in order, one batch at a time), as Lambda does.
    pub async fn drain_concurrent<F, Fut, E>(&mut self, handler: F) -> Result<EsmReport>
    where
        F: Fn(KinesisEvent) -> Fut,
        Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
        E: std::fmt::Display,
    {
        self.run(&handler, true).await
    }

    async fn run<F, Fut, E>(&self, handler: &F, concurrent: bool) -> Result<EsmReport>
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
                            .map(|(shard, _)| self.drain_shard(shard, handler)),
                    )
                    .await?,
                );
            } else {
                for (shard, _) in &ready {
                    reports.push(self.drain_shard(shard, handler).await?);
                }
            }
        }
        for r in reports {
            report.invocations += r.invocations;
            report.records_delivered += r.records_delivered;
            report.records_done += r.records_done;
            report.function_errors += r.function_errors;
            report.partial_failures += r.partial_failures;
            report.bisections += r.bisections;
            report.discarded.extend(r.discarded);
        }
        Ok(report)
    }

    async fn drain_shard<F, Fut, E>(&self, shard: &str, handler: &F) -> Result<EsmReport>
    where
        F: Fn(KinesisEvent) -> Fut,
        Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
        E: std::fmt::Display,
    {
        let req = self
            .kinesis
            .get_shard_iterator()
            .stream_name(&self.stream)
            .shard_id(shard);
        let mut report = EsmReport::default();
        let start = self.lock().shards.get(shard).cloned();
        let req = match start {
            Some(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(seq),
            None => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        let mut iterator = req
            .send()
            .await
            .with_context(|| format!("GetShardIterator {shard}"))?
            .shard_iterator
            .map(|s| s.to_owned());
        let mut buffer: VecDeque<KinesisEventRecord> = VecDeque::new();
        let mut caught_up = false;
        let mut window_start = Instant::now();
        loop {
            // Fill the batch: until full, caught up, or the batching window has passed.
            while buffer.len() < self.options.batch_size && !caught_up {
                let Some(it) = iterator.take() else {
                    caught_up = true; // closed shard, fully read
                    break;
                };
                let want = (self.options.batch_size - buffer.len()).min(MAX_GET_RECORDS as usize);
                let out = self
                    .kinesis
                    .get_records()
                    .shard_iterator(&it)
                    .limit(want as i32)
                    .send()
                    .await
                    .with_context(|| format!("GetRecords {shard}"))?;
                let got = out.records().len();
                buffer.extend(
                    out.records()
                        .iter()
                        .map(|r| lambda_record(&self.stream_arn, shard, r)),
                );
                iterator = out.next_shard_iterator().map(str::to_owned);
                if got == 0 && out.millis_behind_latest().unwrap_or(0) == 0 {
                    caught_up = true;
                }
                if window_start.elapsed() >= self.options.batching_window && !buffer.is_empty() {
                    break;
                }
            }
            if buffer.is_empty() {
                return Ok(report);
            }
            let n = buffer.len().min(self.options.batch_size);
            let batch: Vec<KinesisEventRecord> = buffer.iter().take(n).cloned().collect();
            let delivered = deliver(
                &self.stream_arn,
                &batch,
                &self.options,
                &mut report,
                handler,
            )
            .await;
            if let Some(rec) = &delivered.discarded {
                self.send_failure(rec).await?;
            }
            let last_done = &batch[delivered.done - 1].kinesis.sequence_number;
            self.checkpoint(shard, last_done)?;
            report.records_done += delivered.done as u64;
            buffer.drain(..delivered.done);
            window_start = Instant::now();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn records(n: usize) -> Vec<KinesisEventRecord> {
        (0..n)
            .map(|i| {
                let mut r = KinesisEventRecord::default();
                r.event_id = Some(format!("shardId-000000000000:{}", 100 + i));
                r.kinesis.sequence_number = (100 + i).to_string();
                r
            })
            .collect()
    }

    fn fail_ids(ids: &[&str]) -> KinesisEventResponse {
        let mut r = KinesisEventResponse::default();
        for id in ids {
            r.add_failure(*id);
        }
        r
    }

    #[tokio::test]
    async fn a_partial_failure_checkpoints_before_the_lowest_failed_record() {
        let batch = records(5);
        let mut report = EsmReport::default();
        let h = |_e: KinesisEvent| async { Ok::<_, String>(fail_ids(&["104", "102"])) };
        let d = deliver("arn", &batch, &EsmOptions::default(), &mut report, &h).await;
        assert_eq!(d.done, 2);
        assert_eq!(report.partial_failures, 1);
    }

    #[tokio::test]
    async fn a_function_error_bisects_until_the_failing_record_is_alone_then_discards() {
        let batch = records(8);
        let sizes = RefCell::new(Vec::new());
        let h = |e: KinesisEvent| {
            sizes.borrow_mut().push(e.records.len());
            async { Err::<KinesisEventResponse, _>("boom") }
        };
        let opts = EsmOptions {
            max_retry_attempts: Some(4),
            retry_backoff: Duration::ZERO,
            ..EsmOptions::default()
        };
        let mut report = EsmReport::default();
        let d = deliver("arn", &batch, &opts, &mut report, &h).await;
        assert_eq!(*sizes.borrow(), vec![8, 4, 2, 1, 1]);
        assert_eq!(d.done, 1, "only the isolated record is discarded");
        let rec = d.discarded.unwrap();
        assert_eq!(
            (rec.start_sequence_number.as_str(), rec.batch_size),
            ("100", 1)
        );
        assert_eq!(rec.shard_id, "shardId-000000000000");
    }

    #[tokio::test]
    async fn an_unknown_failure_identifier_retries_the_whole_batch() {
        let batch = records(3);
        let calls = RefCell::new(0);
        let h = |_e: KinesisEvent| {
            *calls.borrow_mut() += 1;
            let first = *calls.borrow() == 1;
            async move {
                Ok::<_, String>(if first {
                    fail_ids(&["999"])
                } else {
                    KinesisEventResponse::default()
                })
            }
        };
        let opts = EsmOptions {
            bisect_on_error: false,
            retry_backoff: Duration::ZERO,
            ..EsmOptions::default()
        };
        let mut report = EsmReport::default();
        let d = deliver("arn", &batch, &opts, &mut report, &h).await;
        assert_eq!((d.done, *calls.borrow()), (3, 2));
    }
}
