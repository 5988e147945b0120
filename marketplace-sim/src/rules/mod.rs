//! Pure BatchMeterUsage rules: decode an awsJson1.1 request body, then check it against the
//! catalog and the simulator's clock. Every function here is plain data in, plain data out —
//! no I/O, no clock reads — so each rule is unit-tested directly.
//!
//! Check order (the first failing check names the exception; nothing is billed):
//! 1. body size, JSON shape, record count, per-record required fields and ranges, tag key and
//!    value lengths and pattern (`ValidationException` / `SerializationException`);
//! 2. identifier combinations: CustomerIdentifier with CustomerAWSAccountId, CA mixed with
//!    legacy, ProductCode with LicenseArn records (`ValidationException`);
//! 3. LicenseArn shape and one product per call (`InvalidLicenseException`); legacy product and
//!    customer (`InvalidProductCodeException`, `InvalidCustomerIdentifierException`);
//! 4. dimensions (`InvalidUsageDimensionException`);
//! 5. timestamps (`TimestampOutOfBoundsException`);
//! 6. allocations (`InvalidTagException`, `InvalidUsageAllocationsException`).

use std::collections::BTreeSet;

use awsmp_contract::ids::{is_valid_license_arn, is_valid_product_code};
use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::catalog::{CatalogIndex, Product, SubscriptionStatus};
use super::error::{ApiError, ErrorCode};

mod parse;
pub use parse::parse_batch_request;

/// BatchMeterUsage: "requests must be less than 1MB in size" (API reference); 1 MB = 1,048,576 bytes.
pub const MAX_REQUEST_BYTES: usize = 1_048_576;
/// BatchMeterUsage accepts at most 25 UsageRecords per call (API reference).
pub const MAX_USAGE_RECORDS_PER_CALL: usize = 25;
/// UsageRecord.Quantity valid range is 0..=2147483647 (API reference, Integer).
pub const MAX_QUANTITY: u64 = i32::MAX as u64;
/// A UsageAllocation carries 1 to 5 tags (API reference: UsageAllocation.Tags, 1-5 items).
pub const MAX_TAGS_PER_ALLOCATION: usize = 5;
/// Previous-month usage is accepted until 06:00 UTC on the 1st (AWS month-end grace).
pub const MONTH_END_GRACE_HOURS: u32 = 6;

/// A tag of a usage allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tag {
    /// Tag key.
    #[serde(rename = "Key")]
    pub key: String,
    /// Tag value.
    #[serde(rename = "Value")]
    pub value: String,
}

/// A usage allocation, in the BatchMeterUsage shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageAllocation {
    /// Units attributed to these tags.
    #[serde(rename = "AllocatedUsageQuantity")]
    pub allocated_usage_quantity: u32,
    /// The tags.
    #[serde(rename = "Tags")]
    pub tags: Vec<Tag>,
}

/// Who a record bills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordIdentity {
    /// Concurrent Agreements: LicenseArn + CustomerAWSAccountId.
    Concurrent {
        /// The license.
        license_arn: String,
        /// The buyer account.
        customer_aws_account_id: String,
    },
    /// Legacy: CustomerIdentifier under the request's ProductCode.
    Legacy {
        /// The customer identifier.
        customer_identifier: String,
    },
}

/// One decoded UsageRecord.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRecord {
    /// Usage time (UTC).
    pub timestamp: DateTime<Utc>,
    /// Who is billed.
    pub identity: RecordIdentity,
    /// Dimension API name.
    pub dimension: String,
    /// Units (0..=2147483647; AWS documents 0 when the member is absent).
    pub quantity: u32,
    /// Optional VMT allocations.
    pub usage_allocations: Option<Vec<UsageAllocation>>,
}

/// A decoded BatchMeterUsage request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRequest {
    /// Legacy calls name their product; CA calls must not.
    pub product_code: Option<String>,
    /// The records, in request order.
    pub records: Vec<UsageRecord>,
    /// Each record's JSON as received, echoed back in `Results` / `UnprocessedRecords`.
    pub raw_records: Vec<Value>,
}

/// Catalog-derived limits the rules need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Metering window in hours.
    pub window_hours: u32,
    /// Cap on allocations per record.
    pub max_allocations_per_record: u32,
}

/// The customer half of the dedup key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CustomerKey {
    /// CA buyer account.
    Account(String),
    /// Legacy customer identifier.
    Identifier(String),
}

/// The product half of the dedup key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScopeKey {
    /// CA license.
    License(String),
    /// Legacy product code.
    Product(String),
}

/// First-write-wins dedup key: (customer, license or product, dimension, UTC hour).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DedupKey {
    /// Customer account or identifier.
    pub customer: CustomerKey,
    /// License or product.
    pub scope: ScopeKey,
    /// Dimension.
    pub dimension: String,
    /// Start of the record's UTC hour.
    pub hour: DateTime<Utc>,
}

/// What a valid record will do once applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Billable under `product_code` (subject to dedup).
    Billable {
        /// The product the usage is billed to.
        product_code: String,
    },
    /// Unknown/ended license, wrong account, or ended legacy customer.
    NotSubscribed,
}

/// A record that passed every request-level check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedRecord {
    /// The record.
    pub record: UsageRecord,
    /// Its dedup key.
    pub key: DedupKey,
    /// Billable or not subscribed.
    pub disposition: Disposition,
}

fn err(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

/// Start of the UTC hour containing `t`.
pub fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(t.year(), t.month(), t.day(), t.hour(), 0, 0)
        .single()
        .unwrap_or(t)
}

/// True when `t` lies in the calendar month (UTC) before `now`'s.
fn is_previous_month(t: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    let (y, m) = if now.month() == 1 {
        (now.year() - 1, 12)
    } else {
        (now.year(), now.month() - 1)
    };
    t.year() == y && t.month() == m
}

/// The metering window: `now - window_hours <= t <= now`; plus the month-end grace, which
/// also accepts a previous-month `t` while `now` is before 06:00 UTC on the 1st, as long as
/// `t` is no older than `window_hours + 6` hours.
pub fn timestamp_in_window(t: DateTime<Utc>, now: DateTime<Utc>, window_hours: u32) -> bool {
    if t > now {
        return false;
    }
    if t >= now - Duration::hours(i64::from(window_hours)) {
        return true;
    }
    let in_grace = now.day() == 1 && now.hour() < MONTH_END_GRACE_HOURS;
    in_grace
        && is_previous_month(t, now)
        && t >= now - Duration::hours(i64::from(window_hours + MONTH_END_GRACE_HOURS))
}

/// Check allocations of one record: non-empty, at most `max`, 1–5 tags each with non-empty key
/// and value, quantities summing to the record's quantity.
pub fn check_allocations(i: usize, record: &UsageRecord, max: u32) -> Result<(), ApiError> {
    let Some(allocs) = &record.usage_allocations else {
        return Ok(());
    };
    if allocs.is_empty() {
        return Err(err(
            ErrorCode::InvalidUsageAllocations,
            format!("UsageRecords[{i}].UsageAllocations is empty"),
        ));
    }
    if allocs.len() > max as usize {
        return Err(err(
            ErrorCode::InvalidUsageAllocations,
            format!(
                "UsageRecords[{i}] has {} allocations; at most {max}",
                allocs.len()
            ),
        ));
    }
    for (j, a) in allocs.iter().enumerate() {
        if a.tags.is_empty() || a.tags.len() > MAX_TAGS_PER_ALLOCATION {
            return Err(err(
                ErrorCode::InvalidTag,
                format!(
                    "UsageRecords[{i}].UsageAllocations[{j}] has {} tags; 1 to {MAX_TAGS_PER_ALLOCATION} allowed",
                    a.tags.len()
                ),
            ));
        }
        if a.tags
            .iter()
            .any(|t| t.key.is_empty() || t.value.is_empty())
        {
            return Err(err(
                ErrorCode::InvalidTag,
                format!(
                    "UsageRecords[{i}].UsageAllocations[{j}] has a tag with an empty Key or Value"
                ),
            ));
        }
    }
    let sum: u64 = allocs
        .iter()
        .map(|a| u64::from(a.allocated_usage_quantity))
        .sum();
    if sum != u64::from(record.quantity) {
        return Err(err(
            ErrorCode::InvalidUsageAllocations,
            format!(
                "UsageRecords[{i}]: allocations sum to {sum}, Quantity is {}",
                record.quantity
            ),
        ));
    }
    Ok(())
}

/// Apply every request-level rule that needs the catalog and the clock; on success, say for
/// each record how it will be applied. See the module docs for the check order.
pub fn validate_batch(
    req: &BatchRequest,
    catalog: &CatalogIndex,
    now: DateTime<Utc>,
    limits: Limits,
) -> Result<Vec<ValidatedRecord>, ApiError> {
    let is_ca = |r: &UsageRecord| matches!(r.identity, RecordIdentity::Concurrent { .. });
    let ca = req.records.iter().filter(|r| is_ca(r)).count();
    let legacy = req.records.len() - ca;
    if ca > 0 && legacy > 0 {
        return Err(err(
            ErrorCode::Validation,
            "LicenseArn/CustomerAWSAccountId records and CustomerIdentifier records cannot be mixed in one call",
        ));
    }
    if ca > 0 && req.product_code.is_some() {
        return Err(err(
            ErrorCode::Validation,
            "ProductCode must not be sent with LicenseArn records",
        ));
    }
    // Resolve identities: which product the call is for, and each record's disposition.
    let resolved = if ca > 0 {
        resolve_concurrent(req, catalog)?
    } else if legacy > 0 {
        resolve_legacy(req, catalog)?
    } else {
        Resolved::default()
    };
    check_dimensions(req, catalog, resolved.product)?;
    check_timestamps(req, now, limits.window_hours)?;
    for (i, r) in req.records.iter().enumerate() {
        check_allocations(i, r, limits.max_allocations_per_record)?;
    }
    Ok(req
        .records
        .iter()
        .zip(resolved.records)
        .map(|(r, (disposition, (customer, scope)))| ValidatedRecord {
            key: DedupKey {
                customer,
                scope,
                dimension: r.dimension.clone(),
                hour: hour_of(r.timestamp),
            },
            record: r.clone(),
            disposition,
        })
        .collect())
}

/// The product a call is for, and each record's disposition and dedup identity.
#[derive(Default)]
struct Resolved<'a> {
    product: Option<&'a Product>,
    records: Vec<(Disposition, (CustomerKey, ScopeKey))>,
}

/// Concurrent Agreements records: well-formed license ARNs, of one product at most; a record
/// is billable when its license is active and the account is the license's.
fn resolve_concurrent<'a>(
    req: &BatchRequest,
    catalog: &'a CatalogIndex,
) -> Result<Resolved<'a>, ApiError> {
    let mut products = BTreeSet::new();
    for (i, r) in req.records.iter().enumerate() {
        let RecordIdentity::Concurrent { license_arn, .. } = &r.identity else {
            continue;
        };
        if !is_valid_license_arn(license_arn) {
            return Err(err(
                ErrorCode::InvalidLicense,
                format!("UsageRecords[{i}].LicenseArn {license_arn:?} is malformed"),
            ));
        }
        if let Some(info) = catalog.license(license_arn) {
            products.insert(info.product.product_code.as_str());
        }
    }
    if products.len() > 1 {
        return Err(err(
            ErrorCode::InvalidLicense,
            format!(
                "LicenseArns of {} products in one call; each call is for one product",
                products.len()
            ),
        ));
    }
    let product = products.first().and_then(|code| catalog.product(code));
    let mut records = Vec::with_capacity(req.records.len());
    for r in &req.records {
        let RecordIdentity::Concurrent {
            license_arn,
            customer_aws_account_id,
        } = &r.identity
        else {
            continue;
        };
        let disposition = match catalog.license(license_arn) {
            Some(info)
                if info.license.status == SubscriptionStatus::Active
                    && info.license.customer_aws_account_id == *customer_aws_account_id =>
            {
                Disposition::Billable {
                    product_code: info.product.product_code.clone(),
                }
            }
            _ => Disposition::NotSubscribed,
        };
        let key = (
            CustomerKey::Account(customer_aws_account_id.clone()),
            ScopeKey::License(license_arn.clone()),
        );
        records.push((disposition, key));
    }
    Ok(Resolved { product, records })
}

/// Legacy records: a well-formed, known ProductCode and customers of it; a record is billable
/// when its customer is active.
fn resolve_legacy<'a>(
    req: &BatchRequest,
    catalog: &'a CatalogIndex,
) -> Result<Resolved<'a>, ApiError> {
    let Some(code) = &req.product_code else {
        return Err(err(
            ErrorCode::Validation,
            "ProductCode is required with CustomerIdentifier records",
        ));
    };
    if !is_valid_product_code(code) {
        return Err(err(
            ErrorCode::Validation,
            format!("ProductCode {code:?} is malformed"),
        ));
    }
    let Some(product) = catalog.product(code) else {
        return Err(err(
            ErrorCode::InvalidProductCode,
            format!("ProductCode {code:?} is not a product of this seller"),
        ));
    };
    let mut records = Vec::with_capacity(req.records.len());
    for (i, r) in req.records.iter().enumerate() {
        let RecordIdentity::Legacy {
            customer_identifier,
        } = &r.identity
        else {
            continue;
        };
        let Some(customer) = product
            .legacy_customers
            .iter()
            .find(|c| c.customer_identifier == *customer_identifier)
        else {
            return Err(err(
                ErrorCode::InvalidCustomerIdentifier,
                format!(
                    "UsageRecords[{i}].CustomerIdentifier {customer_identifier:?} is not a customer of {code}"
                ),
            ));
        };
        let disposition = match customer.status {
            SubscriptionStatus::Active => Disposition::Billable {
                product_code: code.clone(),
            },
            SubscriptionStatus::Ended => Disposition::NotSubscribed,
        };
        let key = (
            CustomerKey::Identifier(customer_identifier.clone()),
            ScopeKey::Product(code.clone()),
        );
        records.push((disposition, key));
    }
    Ok(Resolved {
        product: Some(product),
        records,
    })
}

fn check_dimensions(
    req: &BatchRequest,
    catalog: &CatalogIndex,
    product: Option<&Product>,
) -> Result<(), ApiError> {
    for (i, r) in req.records.iter().enumerate() {
        // With no known license in the call there is no product to check against; the
        // dimension must then at least exist somewhere in the catalog.
        let known = match product {
            Some(p) => p.dimensions.contains(&r.dimension),
            None => catalog.any_product_has_dimension(&r.dimension),
        };
        if !known {
            return Err(err(
                ErrorCode::InvalidUsageDimension,
                format!(
                    "UsageRecords[{i}].Dimension {:?} is not a dimension of the product",
                    r.dimension
                ),
            ));
        }
    }
    Ok(())
}

fn check_timestamps(
    req: &BatchRequest,
    now: DateTime<Utc>,
    window_hours: u32,
) -> Result<(), ApiError> {
    for (i, r) in req.records.iter().enumerate() {
        if !timestamp_in_window(r.timestamp, now, window_hours) {
            return Err(err(
                ErrorCode::TimestampOutOfBounds,
                format!(
                    "UsageRecords[{i}].Timestamp {} is outside the {}-hour window ending {}",
                    r.timestamp.to_rfc3339(),
                    window_hours,
                    now.to_rfc3339()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
