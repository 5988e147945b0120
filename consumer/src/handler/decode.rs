//! Step 1: every delivered record parsed ([`stream_record`]) and decoded and verified
//! ([`decode_records`]: the aggregates' MD5 trailers checked together), one [`Slot`] per record,
//! in delivery order, the batch's group names interned once ([`Interner`], kept for the next
//! batch by the consumer's `NameCache`).

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use awsmp_contract::stream::HEARTBEAT_MARKER;
use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::domain::intern::Interner;
use crate::domain::record::{DecodedRecord, StreamRecord, decode_records};
use crate::domain::seq::SeqNum;
use crate::domain::verify::VerifyPolicy;

/// One delivered record after parsing.
pub(super) struct Slot {
    /// The record, or why it is not a usable stream record.
    pub(super) record: Result<StreamRecord, String>,
    /// Identifier for `batchItemFailures` (the sequence number as delivered).
    pub(super) item_id: String,
    /// The decoded record (`None` when `record` is an error or a heartbeat marker, or once
    /// folded).
    pub(super) decoded: Option<DecodedRecord>,
    /// Another record (earlier in this batch, or in an earlier batch) claimed its dedup key.
    pub(super) duplicate: bool,
}

/// One [`Slot`] per delivered record, names interned in `names` (the instance's cached ones).
pub(super) fn decode_slots(
    event: &KinesisEvent,
    verify: &VerifyPolicy,
    names: &mut Interner,
) -> Vec<Slot> {
    let records: Vec<Result<StreamRecord, String>> =
        event.records.iter().map(stream_record).collect();
    // A heartbeat marker is no usage: no claim, no refusal, no row; only its arrival counts,
    // for the shard's watermark.
    let usage: Vec<&StreamRecord> = records
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter(|rec| rec.data != HEARTBEAT_MARKER)
        .collect();
    let mut decoded = decode_records(&usage, verify, names).into_iter();
    event
        .records
        .iter()
        .zip(records)
        .map(|(r, record)| {
            let decoded = match &record {
                Ok(rec) if rec.data != HEARTBEAT_MARKER => decoded.next(),
                _ => None,
            };
            Slot {
                item_id: r.kinesis.sequence_number.clone(),
                record,
                decoded,
                duplicate: false,
            }
        })
        .collect()
}

/// The largest client-clock skew among the batch's decoded events.
pub(super) fn largest_client_skew(slots: &[Slot]) -> Option<chrono::Duration> {
    slots
        .iter()
        .filter_map(|s| s.decoded.as_ref()?.largest_client_skew)
        .max()
}

/// Stream name from `arn:aws:kinesis:<region>:<account>:stream/<name>`.
pub(super) fn stream_name(arn: Option<&str>) -> String {
    arn.and_then(|a| a.rsplit_once(":stream/").map(|(_, n)| n.to_owned()))
        .unwrap_or_else(|| "unknown-stream".to_owned())
}

/// Turn a delivered record into a [`StreamRecord`].
pub fn stream_record(r: &KinesisEventRecord) -> Result<StreamRecord, String> {
    let shard_id = r
        .event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(shard, _)| shard.to_owned())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("eventID {:?} has no shard id", r.event_id))?;
    Ok(StreamRecord {
        stream: stream_name(r.event_source_arn.as_deref()),
        shard_id,
        sequence_number: SeqNum::parse(&r.kinesis.sequence_number)?,
        partition_key: r.kinesis.partition_key.clone(),
        arrival: r.kinesis.approximate_arrival_timestamp.0,
        data: Bytes::from(r.kinesis.data.0.clone()),
    })
}

/// A delivered record built exactly as Lambda builds it (base64 data, partition key,
/// sequence number, arrival time, `eventSourceARN`, `eventID` = `shardId-…:seq`).
pub fn kinesis_record(
    stream_arn: &str,
    shard_id: &str,
    sequence_number: &str,
    partition_key: &str,
    arrival: DateTime<Utc>,
    data: Vec<u8>,
) -> KinesisEventRecord {
    let mut r = KinesisEventRecord::default();
    r.aws_region = stream_arn.split(':').nth(3).map(str::to_owned);
    r.event_id = Some(format!("{shard_id}:{sequence_number}"));
    r.event_name = Some("aws:kinesis:record".into());
    r.event_source = Some("aws:kinesis".into());
    r.event_source_arn = Some(stream_arn.to_owned());
    r.event_version = Some("1.0".into());
    r.kinesis.approximate_arrival_timestamp.0 = arrival;
    r.kinesis.data.0 = data;
    r.kinesis.partition_key = partition_key.to_owned();
    r.kinesis.sequence_number = sequence_number.to_owned();
    r.kinesis.kinesis_schema_version = Some("1.0".into());
    r
}
