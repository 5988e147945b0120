//! Lambda's delivery rules for one batch of one shard — retries, bisection on function
//! errors, `batchItemFailures` as checkpoints, discarding after `MaximumRetryAttempts` — as a
//! pure function of the handler, and records built exactly as Lambda builds them.

use super::{EsmOptions, EsmReport, MAX_RETRY_BACKOFF};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_kinesis::types::Record;
use chrono::{SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use std::future::Future;

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
        let outcome = invoke(sub, report, handler).await;
        match outcome {
            Outcome::Done => {
                return Delivered {
                    done: hi,
                    discarded: None,
                };
            }
            // A checkpoint inside the batch: what precedes the failure is done.
            Outcome::FailedAt(i) if i > 0 => {
                return Delivered {
                    done: i,
                    discarded: None,
                };
            }
            outcome => {
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
                // A reported failure of the first record is a checkpoint before it: the batch
                // is "bisected at the returned sequence number" and every record retried
                // (https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-batchfailurereporting.html);
                // only a failed invocation halves it.
                if outcome == Outcome::Failed && options.bisect_on_error && hi > 1 {
                    report.bisections += 1;
                    hi = hi.div_ceil(2);
                }
            }
        }
    }
}

/// How one invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Every record is done.
    Done,
    /// `batchItemFailures` named this record (the lowest) first: it and what follows retry.
    FailedAt(usize),
    /// A function error, or a response that fails the whole batch (an identifier naming no
    /// record of it).
    Failed,
}

/// Invoke the handler once with `sub`.
async fn invoke<F, Fut, E>(
    sub: &[KinesisEventRecord],
    report: &mut EsmReport,
    handler: &F,
) -> Outcome
where
    F: Fn(KinesisEvent) -> Fut,
    Fut: Future<Output = std::result::Result<KinesisEventResponse, E>>,
    E: std::fmt::Display,
{
    let mut event = KinesisEvent::default();
    event.records = sub.to_vec();
    report.invocations += 1;
    report.records_delivered += sub.len() as u64;
    match handler(event).await {
        Ok(resp) => {
            let ids: Vec<&str> = resp
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.as_deref().unwrap_or(""))
                .collect();
            if ids.is_empty() {
                return Outcome::Done;
            }
            report.partial_failures += 1;
            // An identifier that names no record of the batch fails the whole batch.
            let positions: Option<Vec<usize>> = ids
                .iter()
                .map(|id| sub.iter().position(|r| r.kinesis.sequence_number == *id))
                .collect();
            positions
                .and_then(|p| p.into_iter().min())
                .map_or(Outcome::Failed, Outcome::FailedAt)
        }
        Err(e) => {
            report.function_errors += 1;
            tracing::warn!(error = %e, records = sub.len(), "handler failed; the mapping retries the batch");
            Outcome::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::time::Duration;

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
    async fn a_failure_of_the_first_record_retries_the_whole_batch_unhalved() {
        let batch = records(4);
        let sizes = RefCell::new(Vec::new());
        let h = |e: KinesisEvent| {
            sizes.borrow_mut().push(e.records.len());
            let first = sizes.borrow().len() == 1;
            async move {
                Ok::<_, String>(if first {
                    fail_ids(&["100", "102"])
                } else {
                    KinesisEventResponse::default()
                })
            }
        };
        let opts = EsmOptions {
            retry_backoff: Duration::ZERO,
            ..EsmOptions::default()
        };
        let mut report = EsmReport::default();
        let d = deliver("arn", &batch, &opts, &mut report, &h).await;
        assert_eq!(*sizes.borrow(), vec![4, 4]);
        assert_eq!((d.done, report.bisections), (4, 0));
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
