//! The consumer mapping's on-failure destination: the SQS queue `awsmp-consumer-failures`
//! (`infra/resources.json`) that receives, for each batch the event source mapping discards,
//! the invocation record Lambda documents at
//! <https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html> — its
//! metadata (shard, sequence range, arrival times, size), never the records themselves. The
//! operator re-drives from it (`simulation/src/redrive.rs`; docs/operations.md, "Re-driving
//! the consumer's on-failure queue").

use crate::esm::{Delivery, STREAM_ARN};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The consumer function's ARN, as the record names it.
pub const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:111122223333:function:kinesis-consumer";

/// Why the mapping gave up on a batch (`requestContext.condition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// `MaximumRetryAttempts` used up.
    RetryAttemptsExhausted,
    /// A record older than `MaximumRecordAgeInSeconds`.
    RecordAgeExceeded,
}

impl Condition {
    /// Its spelling in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::RetryAttemptsExhausted => "RetryAttemptsExhausted",
            Condition::RecordAgeExceeded => "RecordAgeExceeded",
        }
    }
}

/// `requestContext` of an invocation record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    /// The last invocation's request id.
    pub request_id: String,
    /// The function.
    pub function_arn: String,
    /// `RetryAttemptsExhausted` or `RecordAgeExceeded`.
    pub condition: String,
    /// Invocations of the batch.
    pub approximate_invoke_count: u32,
}

/// `responseContext`: how the last invocation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseContext {
    /// 200: the function ran (and failed).
    pub status_code: u16,
    /// `$LATEST`.
    pub executed_version: String,
    /// `Unhandled`.
    pub function_error: String,
}

/// `KinesisBatchInfo`: the discarded batch, the same record the local event source mapping
/// sends (`local-stack/src/kinesis_esm/deliver.rs`).
pub use awsmp_local_stack::kinesis_esm::FailureRecord as KinesisBatchInfo;

/// One message of the destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationRecord {
    /// Which invocation, and why the batch was discarded.
    pub request_context: RequestContext,
    /// How it ended.
    pub response_context: ResponseContext,
    /// `1.0`.
    pub version: String,
    /// When the batch was discarded.
    pub timestamp: String,
    /// The batch.
    #[serde(rename = "KinesisBatchInfo")]
    pub kinesis_batch_info: KinesisBatchInfo,
}

/// A batch the mapping discarded: the mapping's own account, against which the destination's
/// messages are checked (`simulation/src/invariants.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discarded {
    /// Shard.
    pub shard_id: String,
    /// First and last sequence numbers.
    pub range: (u128, u128),
    /// Records.
    pub records: usize,
    /// Why.
    pub condition: Condition,
    /// Invocations of the batch.
    pub invocations: u32,
    /// First and last arrivals.
    pub arrivals: (DateTime<Utc>, DateTime<Utc>),
}

fn millis(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl Discarded {
    /// The discarded `delivery`.
    pub fn of(delivery: &Delivery, condition: Condition, invocations: u32) -> Self {
        let recs = &delivery.event.records;
        let seq = |i: usize| recs[i].kinesis.sequence_number.parse::<u128>().unwrap_or(0);
        let at = |i: usize| recs[i].kinesis.approximate_arrival_timestamp.0;
        let last = recs.len().saturating_sub(1);
        Self {
            shard_id: delivery.lane.0.clone(),
            range: (seq(0), seq(last)),
            records: recs.len(),
            condition,
            invocations,
            arrivals: (at(0), at(last)),
        }
    }

    /// Its invocation record, discarded at `now`.
    pub fn record(&self, now: DateTime<Utc>) -> InvocationRecord {
        InvocationRecord {
            request_context: RequestContext {
                request_id: format!("{}-{}-{}", self.shard_id, self.range.0, self.invocations),
                function_arn: FUNCTION_ARN.to_owned(),
                condition: self.condition.as_str().to_owned(),
                approximate_invoke_count: self.invocations,
            },
            response_context: ResponseContext {
                status_code: 200,
                executed_version: "$LATEST".to_owned(),
                function_error: "Unhandled".to_owned(),
            },
            version: "1.0".to_owned(),
            timestamp: millis(now),
            kinesis_batch_info: KinesisBatchInfo {
                shard_id: self.shard_id.clone(),
                start_sequence_number: self.range.0.to_string(),
                end_sequence_number: self.range.1.to_string(),
                approximate_arrival_of_first_record: millis(self.arrivals.0),
                approximate_arrival_of_last_record: millis(self.arrivals.1),
                batch_size: self.records,
                stream_arn: STREAM_ARN.to_owned(),
            },
        }
    }
}

/// The destination queue: messages in the order sent. Lambda's own send is not faulted (it
/// retries it internally); the operator's re-drive receives and deletes.
#[derive(Debug, Default)]
pub struct OnFailureDestination {
    messages: VecDeque<String>,
    sent: u64,
    /// Messages re-driven and deleted.
    pub redriven: Vec<InvocationRecord>,
}

impl OnFailureDestination {
    /// Send `record` (as its JSON body).
    pub fn send(&mut self, record: &InvocationRecord) {
        let body = serde_json::to_string(record).expect("an invocation record serializes");
        self.messages.push_back(body);
        self.sent += 1;
    }

    /// The oldest message, received (and out of the queue until [`Self::put_back`]).
    pub fn receive(&mut self) -> Option<String> {
        self.messages.pop_front()
    }

    /// A message whose re-drive failed, visible again.
    pub fn put_back(&mut self, body: String) {
        self.messages.push_front(body);
    }

    /// Messages waiting.
    pub fn depth(&self) -> usize {
        self.messages.len()
    }

    /// Messages sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_has_the_documented_shape() {
        let t: DateTime<Utc> = "2026-11-30T10:00:00.250Z".parse().unwrap();
        let d = Discarded {
            shard_id: "shardId-000000000000".into(),
            range: (10, 12),
            records: 3,
            condition: Condition::RetryAttemptsExhausted,
            invocations: 3,
            arrivals: (t, t),
        };
        let json = serde_json::to_value(d.record(t)).unwrap();
        assert_eq!(
            json["requestContext"]["condition"],
            "RetryAttemptsExhausted"
        );
        assert_eq!(json["requestContext"]["approximateInvokeCount"], 3);
        assert_eq!(json["responseContext"]["functionError"], "Unhandled");
        let info = &json["KinesisBatchInfo"];
        assert_eq!(info["shardId"], "shardId-000000000000");
        assert_eq!(info["startSequenceNumber"], "10");
        assert_eq!(info["endSequenceNumber"], "12");
        assert_eq!(info["batchSize"], 3);
        assert_eq!(
            info["approximateArrivalOfFirstRecord"],
            "2026-11-30T10:00:00.250Z"
        );
        assert_eq!(info["streamArn"], STREAM_ARN);
        let mut q = OnFailureDestination::default();
        q.send(&d.record(t));
        let body = q.receive().unwrap();
        let back: InvocationRecord = serde_json::from_str(&body).unwrap();
        assert_eq!(back, d.record(t));
        assert_eq!((q.depth(), q.sent()), (0, 1));
    }
}
