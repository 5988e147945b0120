//! Reading one CloudTrail event of a `BatchMeterUsage` call (the `CloudTrailEvent` string of a
//! `LookupEvents` answer) into [`TrailRecord`]s. The shape is AWS Marketplace's documented
//! log entry (<https://docs.aws.amazon.com/marketplace/latest/userguide/cloudtrail-logging.html>):
//! `requestParameters.usageRecords`, `responseElements.results` (`usageRecord`,
//! `meteringRecordId`, `status`) and `responseElements.unprocessedRecords`, record timestamps
//! in the human-readable form `Apr 19, 2018 4:32:50 PM` (UTC). Pure.

use crate::error::MeterctlError;
use crate::trail::{TrailOutcome, TrailRecord};
use awsmp_contract::keys::{GroupKey, HourBucket};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Deserialize;

/// The event source of the Marketplace Metering Service in CloudTrail.
pub const METERING_EVENT_SOURCE: &str = "metering-marketplace.amazonaws.com";
/// The event name of the call the ledger reads.
pub const BATCH_METER_USAGE_EVENT: &str = "BatchMeterUsage";
/// The format of a usage record's `timestamp` in the event (chrono `strftime`).
pub const RECORD_TIMESTAMP_FORMAT: &str = "%b %-d, %Y %-I:%M:%S %p";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(rename = "eventID", default)]
    event_id: String,
    event_time: String,
    #[serde(default)]
    event_source: String,
    #[serde(default)]
    event_name: String,
    #[serde(default)]
    error_code: Option<String>,
    #[serde(default)]
    request_parameters: Option<Request>,
    #[serde(default)]
    response_elements: Option<Response>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    #[serde(default)]
    product_code: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    results: Vec<ResultEntry>,
    #[serde(default)]
    unprocessed_records: Vec<UsageRecord>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResultEntry {
    usage_record: UsageRecord,
    #[serde(default)]
    metering_record_id: Option<String>,
    status: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageRecord {
    dimension: String,
    timestamp: String,
    #[serde(default)]
    quantity: Option<u64>,
    #[serde(default)]
    customer_identifier: Option<String>,
    /// Spelled `customerAWSAccountID` in AWS's example; `customerAWSAccountId` accepted too.
    #[serde(
        rename = "customerAWSAccountID",
        alias = "customerAWSAccountId",
        default
    )]
    customer_aws_account_id: Option<String>,
    #[serde(default)]
    license_arn: Option<String>,
}

/// Parse a record timestamp (`Apr 19, 2018 4:32:50 PM`, UTC).
pub fn parse_record_timestamp(s: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(s.trim(), RECORD_TIMESTAMP_FORMAT)
        .ok()
        .map(|t| t.and_utc())
}

/// Format a record timestamp as CloudTrail does.
pub fn format_record_timestamp(t: DateTime<Utc>) -> String {
    t.format(RECORD_TIMESTAMP_FORMAT).to_string()
}

/// The usage records of one CloudTrail event. An event of another source or name, or of a
/// call that failed (`errorCode`: nothing is recorded as applied), yields none.
pub fn parse_event(json: &str) -> Result<Vec<TrailRecord>, MeterctlError> {
    let malformed = |event_id: &str, detail: String| MeterctlError::Malformed {
        event_id: event_id.to_owned(),
        detail,
    };
    let event: Event = serde_json::from_str(json).map_err(|e| malformed("?", e.to_string()))?;
    if event.event_source != METERING_EVENT_SOURCE
        || event.event_name != BATCH_METER_USAGE_EVENT
        || event.error_code.is_some()
    {
        return Ok(Vec::new());
    }
    let id = event.event_id.as_str();
    let event_time = DateTime::parse_from_rfc3339(&event.event_time)
        .map_err(|e| malformed(id, format!("eventTime {:?}: {e}", event.event_time)))?
        .with_timezone(&Utc);
    let product = event
        .request_parameters
        .and_then(|r| r.product_code)
        .unwrap_or_default();
    let Some(response) = event.response_elements else {
        return Ok(Vec::new());
    };
    let record = |u: &UsageRecord, outcome: TrailOutcome| -> Result<TrailRecord, MeterctlError> {
        let at = parse_record_timestamp(&u.timestamp)
            .ok_or_else(|| malformed(id, format!("record timestamp {:?}", u.timestamp)))?;
        let (partition, customer) = match (&u.license_arn, &u.customer_aws_account_id) {
            (Some(l), Some(a)) => (l.clone(), a.clone()),
            _ => (
                product.clone(),
                u.customer_identifier
                    .clone()
                    .ok_or_else(|| malformed(id, "a record without a customer".into()))?,
            ),
        };
        Ok(TrailRecord {
            event_id: id.to_owned(),
            event_time,
            group: GroupKey::new(
                partition,
                customer,
                &u.dimension,
                HourBucket::containing(at),
            ),
            quantity: u.quantity.unwrap_or(0),
            outcome,
        })
    };
    let mut out = Vec::with_capacity(response.results.len() + response.unprocessed_records.len());
    for r in &response.results {
        let outcome = match (r.status.as_str(), &r.metering_record_id) {
            ("Success", Some(m)) => TrailOutcome::Success {
                metering_record_id: m.clone(),
            },
            ("DuplicateRecord", m) => TrailOutcome::DuplicateRecord {
                metering_record_id: m.clone(),
            },
            ("CustomerNotSubscribed", _) => TrailOutcome::CustomerNotSubscribed,
            (status, _) => {
                return Err(malformed(
                    id,
                    format!("result status {status:?} without an id or unknown"),
                ));
            }
        };
        out.push(record(&r.usage_record, outcome)?);
    }
    for u in &response.unprocessed_records {
        out.push(record(u, TrailOutcome::Unprocessed)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
