//! What AWS accepted, as its audit trail (CloudTrail) records it: one [`TrailRecord`] per usage
//! record of every `BatchMeterUsage` call, and the [`MeteringTrail`] port that reads them
//! (adapters: `crate::cloudtrail`).

use crate::error::MeterctlError;
use async_trait::async_trait;
use awsmp_contract::keys::{GroupKey, HourBucket};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// How AWS answered one usage record of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum TrailOutcome {
    /// `Success`: billed (the first write of its key) or an identical retry of it (same id).
    Success {
        /// `meteringRecordId`.
        metering_record_id: String,
    },
    /// `DuplicateRecord`: a different quantity was billed first; the id is the billed one's.
    DuplicateRecord {
        /// `meteringRecordId`, when AWS returned one.
        metering_record_id: Option<String>,
    },
    /// `CustomerNotSubscribed`: not billed.
    CustomerNotSubscribed,
    /// Returned in `unprocessedRecords`: not applied.
    Unprocessed,
}

/// One usage record of one `BatchMeterUsage` call, with AWS's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrailRecord {
    /// The CloudTrail `eventID` of the call.
    pub event_id: String,
    /// When the call was made (`eventTime`).
    pub event_time: DateTime<Utc>,
    /// The group-hour, keyed as the pipeline keys it (legacy: product code and customer
    /// identifier in the license and account fields, [`GroupKey`]).
    pub group: GroupKey,
    /// The record's `quantity`.
    pub quantity: u64,
    /// AWS's answer.
    pub outcome: TrailOutcome,
}

impl TrailRecord {
    /// The metering record id AWS billed under, for a `Success`.
    pub fn billed_id(&self) -> Option<&str> {
        match &self.outcome {
            TrailOutcome::Success { metering_record_id } => Some(metering_record_id),
            _ => None,
        }
    }
}

/// The hours and the instant a trail query covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrailWindow {
    /// First event time read.
    pub start: DateTime<Utc>,
    /// Last event time read.
    pub end: DateTime<Utc>,
}

impl TrailWindow {
    /// The event times in which the calls for hours `from..=to` can have been made: from the
    /// start of `from` to the end of `to` plus the billable window (AWS accepts an hour that
    /// long), capped at `now`.
    pub fn for_hours(
        from: HourBucket,
        to: HourBucket,
        billable_window_hours: u32,
        now: DateTime<Utc>,
    ) -> Self {
        let end = to.end() + chrono::Duration::hours(i64::from(billable_window_hours));
        Self {
            start: from.start(),
            end: end.min(now),
        }
    }
}

/// The audit trail of `BatchMeterUsage` calls.
#[async_trait]
pub trait MeteringTrail: Send + Sync {
    /// Every usage record of every `BatchMeterUsage` call made in `window`, in any order.
    async fn batch_meter_usage_records(
        &self,
        window: TrailWindow,
    ) -> Result<Vec<TrailRecord>, MeterctlError>;
}
