//! Re-driving a fixed group-hour within the billable window (docs/meterctl.md, "redrive"):
//! an `Error` record (after the catalog fix) goes back to pending for the submitter; the
//! `RejectedClientSide` rows of a group-hour without a record (after the writer fix) go back
//! to pending for the aggregator. Refused outside the window, and for anything AWS accepted.
//! [`plan`] decides (pure); [`apply`] makes the conditional writes.

use crate::sources::HourSources;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::status::{AggregatedStatus, RawStatus};
use awsmp_contract::time::{TimeConfig, is_billable};
use awsmp_pipeline::error::{PipelineError, Result};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

/// What a re-drive will do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Plan {
    /// Put the `Error` record back to pending; the submitter sends it again.
    Record,
    /// Put the group-hour's `RejectedClientSide` rows back to pending; the aggregator folds
    /// them again (and rejects them again if they are still wrong).
    Rows,
}

/// Why a re-drive is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "refusal", rename_all = "camelCase")]
pub enum Refusal {
    /// The hour is outside the billable window: AWS would not accept it.
    #[error("{group} is outside the billable window: AWS no longer accepts it")]
    OutsideWindow {
        /// The group-hour.
        group: String,
    },
    /// AWS accepted usage for the key: re-submitting could only be a duplicate.
    #[error(
        "AWS already accepted {group} (MeteringRecordId {metering_record_id}): not re-submitted"
    )]
    AcceptedByAws {
        /// The group-hour.
        group: String,
        /// The billed id.
        metering_record_id: String,
    },
    /// The record's status is not one a fix can change.
    #[error(
        "{group} is {status}: not re-drivable (only Error records and RejectedClientSide rows are)"
    )]
    NotRedrivable {
        /// The group-hour.
        group: String,
        /// Its status.
        status: String,
    },
    /// Nothing is waiting for a re-drive.
    #[error("{group}: {detail}")]
    NothingToRedrive {
        /// The group-hour.
        group: String,
        /// What was found.
        detail: String,
    },
}

/// Decide the re-drive of `s` at `now`.
pub fn plan(s: &HourSources, now: DateTime<Utc>, time: &TimeConfig) -> Result<Plan, Refusal> {
    let group = s.group.to_string();
    if !is_billable(s.group.hour, now, time) {
        return Err(Refusal::OutsideWindow { group });
    }
    let billed = s.trail.iter().find_map(|t| t.billed_id()).or_else(|| {
        s.record
            .as_ref()
            .filter(|r| r.status == Some(AggregatedStatus::Success))
            .map(|r| r.metering_record_id.as_deref().unwrap_or("?"))
    });
    if let Some(id) = billed {
        return Err(Refusal::AcceptedByAws {
            group,
            metering_record_id: id.to_owned(),
        });
    }
    match &s.record {
        Some(r) => match r.status {
            Some(AggregatedStatus::Error) => Ok(Plan::Record),
            None => Err(Refusal::NothingToRedrive {
                group,
                detail: "the record is already pending submission".into(),
            }),
            Some(other) => Err(Refusal::NotRedrivable {
                group,
                status: other.as_str().into(),
            }),
        },
        None => {
            let rejected = s
                .rows
                .terminal
                .keys()
                .any(|k| k.starts_with(RawStatus::RejectedClientSide.as_str()));
            if rejected {
                Ok(Plan::Rows)
            } else {
                Err(Refusal::NothingToRedrive {
                    group,
                    detail: "no Error record and no RejectedClientSide rows".into(),
                })
            }
        }
    }
}

fn dynamo(
    operation: &'static str,
    table: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> PipelineError {
    PipelineError::DynamoDb {
        operation,
        resource: table.to_owned(),
        retryable: false,
        source: Box::new(e),
    }
}

/// Put an `Error` record back to pending, only while it is still `Error` with no
/// MeteringRecordId. True when it changed.
pub async fn reset_record(
    client: &Client,
    table: &str,
    group: &GroupKey,
    now: DateTime<Utc>,
) -> Result<bool> {
    let result = client
        .update_item()
        .table_name(table)
        .key(a::LICENSE_ARN, Av::S(group.license_arn.clone()))
        .key(a::AGGREGATED_SORT_KEY, Av::S(group.aggregated_sort_key()))
        .update_expression("SET #p = :h, #u = :now REMOVE #s, #r, #aq, #at")
        .condition_expression("#s = :error AND attribute_not_exists(#id)")
        .expression_attribute_names("#p", a::METERING_PENDING)
        .expression_attribute_names("#u", a::UPDATED_AT)
        .expression_attribute_names("#s", a::METERING_STATUS)
        .expression_attribute_names("#r", a::METERING_STATUS_REASON)
        .expression_attribute_names("#aq", a::ATTEMPTED_QUANTITY)
        .expression_attribute_names("#at", a::SUBMISSION_ATTEMPTED_AT)
        .expression_attribute_names("#id", a::METERING_RECORD_ID)
        .expression_attribute_values(":h", Av::S(group.hour.to_string()))
        .expression_attribute_values(
            ":now",
            Av::S(now.to_rfc3339_opts(SecondsFormat::Millis, true)),
        )
        .expression_attribute_values(":error", Av::S(AggregatedStatus::Error.as_str().into()))
        .send()
        .await;
    match result {
        Ok(_) => Ok(true),
        Err(e) if awsmp_aws::dynamodb::is_conditional_failure(&e) => Ok(false),
        Err(e) => Err(dynamo("UpdateItem", table, e)),
    }
}

/// Put every `RejectedClientSide` row of `group` back to pending, each only while it is still
/// `RejectedClientSide`. Returns how many changed.
pub async fn reset_rows(
    client: &Client,
    table: &str,
    group: &GroupKey,
    now: DateTime<Utc>,
) -> Result<u32> {
    let mut keys = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .query()
            .table_name(table)
            .key_condition_expression("#l = :l AND begins_with(#sk, :p)")
            .filter_expression("#s = :rejected")
            .expression_attribute_names("#l", a::LICENSE_ARN)
            .expression_attribute_names("#sk", a::USAGE_SORT_KEY)
            .expression_attribute_names("#s", a::METERING_STATUS)
            .expression_attribute_values(":l", Av::S(group.license_arn.clone()))
            .expression_attribute_values(":p", Av::S(group.usage_prefix()))
            .expression_attribute_values(
                ":rejected",
                Av::S(RawStatus::RejectedClientSide.as_str().into()),
            )
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| dynamo("Query", table, e))?;
        for item in page.items() {
            if let Some(Av::S(sk)) = item.get(a::USAGE_SORT_KEY) {
                keys.push(sk.clone());
            }
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    let mut changed = 0;
    for sk in keys {
        let result = client
            .update_item()
            .table_name(table)
            .key(a::LICENSE_ARN, Av::S(group.license_arn.clone()))
            .key(a::USAGE_SORT_KEY, Av::S(sk))
            .update_expression("SET #p = :h, #u = :now REMOVE #s, #r")
            .condition_expression("#s = :rejected")
            .expression_attribute_names("#p", a::METERING_PENDING)
            .expression_attribute_names("#u", a::UPDATED_AT)
            .expression_attribute_names("#s", a::METERING_STATUS)
            .expression_attribute_names("#r", a::METERING_STATUS_REASON)
            .expression_attribute_values(":h", Av::S(group.hour.to_string()))
            .expression_attribute_values(
                ":now",
                Av::S(now.to_rfc3339_opts(SecondsFormat::Millis, true)),
            )
            .expression_attribute_values(
                ":rejected",
                Av::S(RawStatus::RejectedClientSide.as_str().into()),
            )
            .send()
            .await;
        match result {
            Ok(_) => changed += 1,
            Err(e) if awsmp_aws::dynamodb::is_conditional_failure(&e) => {}
            Err(e) => return Err(dynamo("UpdateItem", table, e)),
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests;
