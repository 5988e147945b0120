//! Decoding a BatchMeterUsage awsJson1.1 body into [`BatchRequest`]: size, JSON shape,
//! record count, and each record's required members, ranges and identifier combination (the
//! first step of the check order in [`super`]).

use awsmp_contract::ids::is_valid_account_id;
use awsmp_contract::limits::marketplace::{
    MAX_TAG_KEY_LENGTH, MAX_TAG_VALUE_LENGTH, TAG_PATTERN, matches_tag_pattern,
};
use chrono::{DateTime, TimeZone, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::{
    BatchRequest, MAX_QUANTITY, MAX_REQUEST_BYTES, MAX_USAGE_RECORDS_PER_CALL, RecordIdentity, Tag,
    UsageAllocation, UsageRecord, err,
};
use crate::error::{ApiError, ErrorCode};

#[derive(Deserialize)]
struct WireRequest {
    #[serde(rename = "ProductCode")]
    product_code: Option<String>,
    #[serde(rename = "UsageRecords")]
    usage_records: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct WireRecord {
    #[serde(rename = "Timestamp")]
    timestamp: Option<serde_json::Number>,
    #[serde(rename = "CustomerIdentifier")]
    customer_identifier: Option<String>,
    #[serde(rename = "Dimension")]
    dimension: Option<String>,
    #[serde(rename = "Quantity")]
    quantity: Option<serde_json::Number>,
    /// Newer API models add decimal quantities; the simulator (like the Rust SDK it serves)
    /// bills whole units only, so these are refused rather than read as a missing quantity.
    #[serde(rename = "QuantityAsDecimal")]
    quantity_as_decimal: Option<Value>,
    #[serde(rename = "UsageAllocations")]
    usage_allocations: Option<Vec<WireAllocation>>,
    #[serde(rename = "CustomerAWSAccountId")]
    customer_aws_account_id: Option<String>,
    #[serde(rename = "LicenseArn")]
    license_arn: Option<String>,
}

#[derive(Deserialize)]
struct WireAllocation {
    #[serde(rename = "AllocatedUsageQuantity")]
    allocated_usage_quantity: Option<serde_json::Number>,
    #[serde(rename = "AllocatedUsageQuantityAsDecimal")]
    allocated_usage_quantity_as_decimal: Option<Value>,
    #[serde(rename = "Tags")]
    tags: Option<Vec<WireTag>>,
}

#[derive(Deserialize)]
struct WireTag {
    #[serde(rename = "Key")]
    key: Option<String>,
    #[serde(rename = "Value")]
    value: Option<String>,
}

/// A JSON number that is a whole number in 0..=2147483647, else `None`.
fn quantity_value(n: &serde_json::Number) -> Option<u32> {
    n.as_u64()
        .filter(|&q| q <= MAX_QUANTITY)
        .and_then(|q| u32::try_from(q).ok())
}

/// awsJson1.1 timestamps are epoch seconds, possibly fractional.
fn epoch_seconds_to_utc(n: &serde_json::Number) -> Option<DateTime<Utc>> {
    let secs = n.as_f64()?;
    if !secs.is_finite() {
        return None;
    }
    let millis = (secs * 1000.0).round();
    if millis.abs() > 8.0e15 {
        return None;
    }
    Utc.timestamp_millis_opt(millis as i64).single()
}

/// Decode a BatchMeterUsage body: size, JSON shape, record count, and each record's required
/// members, ranges and identifier combination.
pub fn parse_batch_request(body: &[u8]) -> Result<BatchRequest, ApiError> {
    if body.len() > MAX_REQUEST_BYTES {
        return Err(err(
            ErrorCode::Validation,
            format!(
                "request is {} bytes; the limit is {MAX_REQUEST_BYTES}",
                body.len()
            ),
        ));
    }
    let wire: WireRequest = serde_json::from_slice(body).map_err(|e| {
        err(
            ErrorCode::Serialization,
            format!("cannot decode request: {e}"),
        )
    })?;
    let Some(raw_records) = wire.usage_records else {
        return Err(err(ErrorCode::Validation, "UsageRecords is required"));
    };
    if raw_records.len() > MAX_USAGE_RECORDS_PER_CALL {
        return Err(err(
            ErrorCode::Validation,
            format!(
                "{} UsageRecords; at most {MAX_USAGE_RECORDS_PER_CALL} per call",
                raw_records.len()
            ),
        ));
    }
    let mut records = Vec::with_capacity(raw_records.len());
    for (i, raw) in raw_records.iter().enumerate() {
        records.push(parse_record(i, raw)?);
    }
    Ok(BatchRequest {
        product_code: wire.product_code,
        records,
        raw_records,
    })
}

fn parse_record(i: usize, raw: &Value) -> Result<UsageRecord, ApiError> {
    let wire: WireRecord = serde_json::from_value(raw.clone()).map_err(|e| {
        err(
            ErrorCode::Serialization,
            format!("UsageRecords[{i}]: cannot decode: {e}"),
        )
    })?;
    let timestamp = match &wire.timestamp {
        None => {
            return Err(err(
                ErrorCode::Validation,
                format!("UsageRecords[{i}].Timestamp is required"),
            ));
        }
        Some(n) => epoch_seconds_to_utc(n).ok_or_else(|| {
            err(
                ErrorCode::TimestampOutOfBounds,
                format!("UsageRecords[{i}].Timestamp {n} is not a representable time"),
            )
        })?,
    };
    let dimension = match wire.dimension {
        Some(d) if !d.is_empty() => d,
        _ => {
            return Err(err(
                ErrorCode::Validation,
                format!("UsageRecords[{i}].Dimension is required"),
            ));
        }
    };
    if wire.quantity_as_decimal.is_some() {
        return Err(err(
            ErrorCode::Validation,
            format!(
                "UsageRecords[{i}].QuantityAsDecimal is not supported by marketplace-sim; send Quantity"
            ),
        ));
    }
    // AWS documents Quantity as optional, "defaults to 0 if not specified".
    let quantity = match &wire.quantity {
        None => 0,
        Some(n) => quantity_value(n).ok_or_else(|| {
            err(
                ErrorCode::Validation,
                format!("UsageRecords[{i}].Quantity {n} is outside 0..={MAX_QUANTITY}"),
            )
        })?,
    };
    let identity = parse_identity(
        i,
        wire.customer_identifier,
        wire.customer_aws_account_id,
        wire.license_arn,
    )?;
    let usage_allocations = match wire.usage_allocations {
        None => None,
        Some(list) => Some(parse_allocations(i, list)?),
    };
    Ok(UsageRecord {
        timestamp,
        identity,
        dimension,
        quantity,
        usage_allocations,
    })
}

/// Which customer record `i` names: a license and account (Concurrent Agreements) or a legacy
/// customer identifier, never both.
fn parse_identity(
    i: usize,
    customer_identifier: Option<String>,
    customer_aws_account_id: Option<String>,
    license_arn: Option<String>,
) -> Result<RecordIdentity, ApiError> {
    let identity = match (customer_identifier, customer_aws_account_id, license_arn) {
        (Some(_), Some(_), _) => {
            return Err(err(
                ErrorCode::Validation,
                format!(
                    "UsageRecords[{i}]: CustomerIdentifier and CustomerAWSAccountId are mutually exclusive"
                ),
            ));
        }
        (None, Some(account), Some(license_arn)) => {
            if !is_valid_account_id(&account) {
                return Err(err(
                    ErrorCode::Validation,
                    format!(
                        "UsageRecords[{i}].CustomerAWSAccountId {account:?} is not a 12-digit account id"
                    ),
                ));
            }
            RecordIdentity::Concurrent {
                license_arn,
                customer_aws_account_id: account,
            }
        }
        (None, Some(_), None) => {
            return Err(err(
                ErrorCode::Validation,
                format!("UsageRecords[{i}]: LicenseArn is required with CustomerAWSAccountId"),
            ));
        }
        (None, None, Some(_)) => {
            return Err(err(
                ErrorCode::Validation,
                format!("UsageRecords[{i}]: CustomerAWSAccountId is required with LicenseArn"),
            ));
        }
        (Some(_), None, Some(_)) => {
            return Err(err(
                ErrorCode::Validation,
                format!("UsageRecords[{i}]: CustomerIdentifier cannot be used with LicenseArn"),
            ));
        }
        (Some(customer_identifier), None, None) => RecordIdentity::Legacy {
            customer_identifier,
        },
        (None, None, None) => {
            return Err(err(
                ErrorCode::Validation,
                format!(
                    "UsageRecords[{i}]: CustomerAWSAccountId (or a legacy CustomerIdentifier) is required"
                ),
            ));
        }
    };
    Ok(identity)
}

/// The usage allocations of record `i`.
fn parse_allocations(
    i: usize,
    list: Vec<WireAllocation>,
) -> Result<Vec<UsageAllocation>, ApiError> {
    let mut out = Vec::with_capacity(list.len());
    for (j, a) in list.into_iter().enumerate() {
        if a.allocated_usage_quantity_as_decimal.is_some() {
            return Err(err(
                ErrorCode::Validation,
                format!(
                    "UsageRecords[{i}].UsageAllocations[{j}].AllocatedUsageQuantityAsDecimal is not supported by marketplace-sim"
                ),
            ));
        }
        let Some(n) = a.allocated_usage_quantity else {
            return Err(err(
                ErrorCode::Validation,
                format!(
                    "UsageRecords[{i}].UsageAllocations[{j}].AllocatedUsageQuantity is required"
                ),
            ));
        };
        let allocated_usage_quantity = quantity_value(&n).ok_or_else(|| {
            err(
                ErrorCode::Validation,
                format!(
                    "UsageRecords[{i}].UsageAllocations[{j}].AllocatedUsageQuantity {n} is outside 0..={MAX_QUANTITY}"
                ),
            )
        })?;
        // A missing Key/Value is kept as empty so the tag rule reports it (InvalidTag).
        let tags: Vec<Tag> = a
            .tags
            .unwrap_or_default()
            .into_iter()
            .map(|t| Tag {
                key: t.key.unwrap_or_default(),
                value: t.value.unwrap_or_default(),
            })
            .collect();
        for (k, t) in tags.iter().enumerate() {
            check_tag_text(i, j, k, "Key", &t.key, MAX_TAG_KEY_LENGTH)?;
            check_tag_text(i, j, k, "Value", &t.value, MAX_TAG_VALUE_LENGTH)?;
        }
        out.push(UsageAllocation {
            allocated_usage_quantity,
            tags,
        });
    }
    Ok(out)
}

/// A non-empty tag key or value must fit the API's `Tag` length and pattern
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_Tag.html>); AWS
/// answers a member outside its constraints with `ValidationException`. (An empty one is the
/// tag rule's `InvalidTagException`.)
fn check_tag_text(
    i: usize,
    j: usize,
    k: usize,
    member: &str,
    text: &str,
    max: usize,
) -> Result<(), ApiError> {
    let at = format!("UsageRecords[{i}].UsageAllocations[{j}].Tags[{k}].{member}");
    let length = text.chars().count();
    if length > max {
        return Err(err(
            ErrorCode::Validation,
            format!("{at} has {length} characters; at most {max}"),
        ));
    }
    if length > 0 && !matches_tag_pattern(text) {
        return Err(err(
            ErrorCode::Validation,
            format!("{at} {text:?} does not match {TAG_PATTERN}"),
        ));
    }
    Ok(())
}
