//! The usage event and its validation (pure: no I/O, no clock).

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::limits::marketplace::{MAX_ALLOCATIONS_PER_RECORD, MAX_TAGS_PER_ALLOCATION};

/// Longest accepted event id, in bytes. Our own bound: ids become dedup keys downstream, and
/// DynamoDB keys must stay well under their 1,024-byte sort-key limit.
pub const MAX_EVENT_ID_BYTES: usize = 256;
/// Longest accepted dimension, in bytes. `UsageRecord.Dimension` is 1 to 255 characters
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>),
/// so a longer one can never be billed. Counted in bytes (never fewer than characters), the
/// bound also keeps every key built from a dimension — the usage row's sort key
/// `{account}#{dimension}#{second}`, the aggregated record's, the rejected-event and billing
/// archive keys — under DynamoDB's 1,024-byte sort-key limit
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys>):
/// without it, an event whose row can never be written would fail its batch on every retry.
pub const MAX_DIMENSION_BYTES: usize = 255;
/// Longest accepted license ARN, in bytes: the form's fixed parts take 77, which leaves 179 for
/// the partition (AWS's partition names are a dozen characters at most). Our bound: the ARN is
/// the usage row's and the aggregated record's partition key, which DynamoDB takes up to 2,048
/// bytes
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys>),
/// and it is part of the rejected-event keys beside a row's sort key; bounded this far below,
/// every key built from an event fits.
pub const MAX_LICENSE_ARN_BYTES: usize = 256;

/// One metered usage event: `quantity` units of `dimension` used by the buyer identified by
/// (`license_arn`, `customer_aws_account_id`) at `timestamp`.
///
/// Field names follow the usage-row contract (docs/row-contract.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Idempotency key. Leave empty to let the producer generate one (`p:{epoch}:{lane}:{seq}`,
    /// docs/row-contract.md, "Event ids"); under collapse, only such events are summed.
    pub event_id: String,
    /// The buyer's license, `arn:<partition>:license-manager::<account>:license:l-<32 hex>`.
    pub license_arn: String,
    /// The buyer's 12-digit AWS account id.
    pub customer_aws_account_id: String,
    /// The pricing dimension (non-empty).
    pub dimension: String,
    /// Units used; a non-negative integer by construction.
    pub quantity: u64,
    /// Client clock, millisecond precision (finer digits are dropped at `record()`).
    pub timestamp: DateTime<Utc>,
    /// The producer that emitted the event; filled from the producer's config when `None`.
    pub producer_id: Option<String>,
    /// Optional vendor-metered-tagging breakdown (BatchMeterUsage `UsageAllocation` shape).
    pub usage_allocations: Option<Vec<UsageAllocation>>,
}

/// A share of an event's quantity attributed to a set of tags.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageAllocation {
    /// Units attributed to `tags`.
    #[serde(rename = "AllocatedUsageQuantity")]
    pub allocated_usage_quantity: u64,
    /// 1–5 tags, each with a non-empty key and value.
    #[serde(rename = "Tags")]
    pub tags: Vec<Tag>,
}

/// A seller-defined tag on an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tag {
    /// Tag key (non-empty).
    #[serde(rename = "Key")]
    pub key: String,
    /// Tag value (non-empty).
    #[serde(rename = "Value")]
    pub value: String,
}

impl Tag {
    /// A tag from its key and value.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl UsageAllocation {
    /// An allocation of `quantity` units to `tags`.
    pub fn new(quantity: u64, tags: Vec<Tag>) -> Self {
        UsageAllocation {
            allocated_usage_quantity: quantity,
            tags,
        }
    }
}

impl Event {
    /// An event without id (generated at `record()`), producer id or allocations.
    pub fn new(
        license_arn: impl Into<String>,
        customer_aws_account_id: impl Into<String>,
        dimension: impl Into<String>,
        quantity: u64,
        timestamp: DateTime<Utc>,
    ) -> Self {
        Event {
            event_id: String::new(),
            license_arn: license_arn.into(),
            customer_aws_account_id: customer_aws_account_id.into(),
            dimension: dimension.into(),
            quantity,
            timestamp,
            producer_id: None,
            usage_allocations: None,
        }
    }

    /// Sets the caller's idempotency key.
    pub fn with_event_id(mut self, event_id: impl Into<String>) -> Self {
        self.event_id = event_id.into();
        self
    }

    /// Sets the producer id.
    pub fn with_producer_id(mut self, producer_id: impl Into<String>) -> Self {
        self.producer_id = Some(producer_id.into());
        self
    }

    /// Sets the allocations.
    pub fn with_allocations(mut self, allocations: Vec<UsageAllocation>) -> Self {
        self.usage_allocations = Some(allocations);
        self
    }

    /// The group this event meters: (licenseArn, customerAWSAccountId, dimension).
    pub fn group(&self) -> GroupRef<'_> {
        GroupRef {
            license_arn: &self.license_arn,
            customer_aws_account_id: &self.customer_aws_account_id,
            dimension: &self.dimension,
        }
    }

    /// Checks every rule of the v1 event (docs/row-contract.md, "Event payload v1"). An empty `event_id` is accepted here only
    /// when `allow_missing_id` (the producer fills it in); the wire decoder never allows it.
    pub fn validate(&self, allow_missing_id: bool) -> Result<(), ValidationError> {
        self.validate_with(allow_missing_id, |e| validate_group(e.group()))
    }

    /// [`Event::validate`] with the group (license ARN, account id, dimension) checked by
    /// `group` — in the same order, so the same rule refuses the same event.
    pub fn validate_with(
        &self,
        allow_missing_id: bool,
        group: impl FnOnce(&Event) -> Result<(), ValidationError>,
    ) -> Result<(), ValidationError> {
        validate_event_id(&self.event_id, allow_missing_id)?;
        group(self)?;
        validate_timestamp(&self.timestamp)?;
        if let Some(p) = &self.producer_id
            && p.is_empty()
        {
            return Err(ValidationError::EmptyProducerId);
        }
        if let Some(allocs) = &self.usage_allocations {
            validate_allocations(allocs, self.quantity)?;
        }
        Ok(())
    }
}

/// The group's rules: a license ARN of its shape, a 12-digit account id, a non-empty
/// dimension of at most [`MAX_DIMENSION_BYTES`].
#[inline]
pub fn validate_group(group: GroupRef<'_>) -> Result<(), ValidationError> {
    validate_license_arn(group.license_arn)?;
    validate_account_id(group.customer_aws_account_id)?;
    validate_dimension(group.dimension)
}

/// A non-empty dimension of at most [`MAX_DIMENSION_BYTES`] bytes.
#[inline]
pub fn validate_dimension(dimension: &str) -> Result<(), ValidationError> {
    if dimension.is_empty() {
        return Err(ValidationError::EmptyDimension);
    }
    if dimension.len() > MAX_DIMENSION_BYTES {
        return Err(ValidationError::DimensionTooLong(dimension.len()));
    }
    Ok(())
}

/// Borrowed view of a group key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupRef<'a> {
    /// License ARN.
    pub license_arn: &'a str,
    /// Customer account id.
    pub customer_aws_account_id: &'a str,
    /// Dimension.
    pub dimension: &'a str,
}

impl GroupRef<'_> {
    /// The hash of the group's three fields (each followed by a byte no UTF-8 text holds, so
    /// no two groups run together) by a hasher of `state`.
    pub fn hash_with(&self, state: &impl std::hash::BuildHasher) -> u64 {
        use std::hash::Hasher;
        let mut h = state.build_hasher();
        for part in [
            self.license_arn,
            self.customer_aws_account_id,
            self.dimension,
        ] {
            h.write(part.as_bytes());
            h.write_u8(0xff);
        }
        h.finish()
    }
}

/// Check an event id: non-empty (unless `allow_missing`) and within [`MAX_EVENT_ID_BYTES`].
#[inline]
pub fn validate_event_id(id: &str, allow_missing: bool) -> Result<(), ValidationError> {
    if id.is_empty() {
        if allow_missing {
            return Ok(());
        }
        return Err(ValidationError::InvalidEventId("empty".into()));
    }
    if id.len() > MAX_EVENT_ID_BYTES {
        return Err(ValidationError::InvalidEventId(format!(
            "{} bytes, more than {MAX_EVENT_ID_BYTES}",
            id.len()
        )));
    }
    Ok(())
}

/// `arn:<partition>:license-manager::<12 digits>:license:l-<32 lowercase hex>`, at most
/// [`MAX_LICENSE_ARN_BYTES`].
pub fn validate_license_arn(arn: &str) -> Result<(), ValidationError> {
    let bad = || ValidationError::InvalidLicenseArn(arn.to_owned());
    if arn.len() > MAX_LICENSE_ARN_BYTES {
        return Err(bad());
    }
    let rest = arn.strip_prefix("arn:").ok_or_else(bad)?;
    let (partition, rest) = rest.split_once(':').ok_or_else(bad)?;
    if partition.is_empty()
        || !partition
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(bad());
    }
    let rest = rest.strip_prefix("license-manager::").ok_or_else(bad)?;
    let (account, rest) = rest.split_once(':').ok_or_else(bad)?;
    if !is_account_id(account) {
        return Err(bad());
    }
    let id = rest.strip_prefix("license:l-").ok_or_else(bad)?;
    if id.len() != 32
        || !id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(bad());
    }
    Ok(())
}

fn is_account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Exactly 12 ASCII digits.
#[inline]
pub fn validate_account_id(id: &str) -> Result<(), ValidationError> {
    if is_account_id(id) {
        Ok(())
    } else {
        Err(ValidationError::InvalidAccountId(id.to_owned()))
    }
}

/// The v1 payload writes `YYYY-MM-DDTHH:MM:SS.mmmZ`; years outside 1970–9999 cannot be
/// written that way (or are nonsense for metering). The rule is [`second_in_range`], the
/// one every recording path checks; the refusal names the year.
#[inline]
pub fn validate_timestamp(ts: &DateTime<Utc>) -> Result<(), ValidationError> {
    if second_in_range(ts.timestamp()) {
        return Ok(());
    }
    let y = ts.naive_utc().year();
    Err(ValidationError::MalformedTimestamp(format!(
        "year {y} outside 1970-9999"
    )))
}

/// Epoch seconds of 10000-01-01T00:00:00Z: a timestamp is in years 1970–9999 exactly when
/// its UTC second lies in `0..YEAR_10000_SECONDS`.
const YEAR_10000_SECONDS: i64 = 253_402_300_800;

/// The timestamp rule, written once: the UTC second of a timestamp in years 1970–9999 (a
/// comparison, no calendar arithmetic, so the hot paths check it per event as
/// [`validate_timestamp`] does). Inline: the producer checks it per event, from another crate.
#[inline]
pub fn second_in_range(second: i64) -> bool {
    (0..YEAR_10000_SECONDS).contains(&second)
}

/// Drops sub-millisecond digits (the payload carries milliseconds; the second is unchanged).
#[inline]
pub fn truncate_to_millis(ts: DateTime<Utc>) -> DateTime<Utc> {
    // UTC: the naive UTC time is the local one (no offset to apply, as `nanosecond()` would),
    // so the naive time is truncated and read back as UTC, with no time zone arithmetic.
    let naive = ts.naive_utc();
    let nanos = naive.nanosecond();
    if nanos.is_multiple_of(1_000_000) {
        // Already whole milliseconds: nothing to drop.
        return ts;
    }
    naive
        .with_nanosecond(nanos - nanos % 1_000_000)
        .map_or(ts, |n| n.and_utc())
}

/// 1–2,500 allocations, each with 1–5 tags of non-empty key and value, summing to `quantity`.
pub fn validate_allocations(
    allocs: &[UsageAllocation],
    quantity: u64,
) -> Result<(), ValidationError> {
    if allocs.is_empty() {
        return Err(ValidationError::MalformedAllocations(
            "usageAllocations is empty (omit it instead)".into(),
        ));
    }
    if allocs.len() > MAX_ALLOCATIONS_PER_RECORD {
        return Err(ValidationError::TooManyAllocations(allocs.len()));
    }
    let mut sum: u128 = 0;
    for (i, a) in allocs.iter().enumerate() {
        if a.tags.is_empty() {
            return Err(ValidationError::MalformedAllocations(format!(
                "allocation {i} has no tags"
            )));
        }
        if a.tags.len() > MAX_TAGS_PER_ALLOCATION {
            return Err(ValidationError::TooManyTags {
                allocation: i,
                tags: a.tags.len(),
            });
        }
        if a.tags
            .iter()
            .any(|t| t.key.is_empty() || t.value.is_empty())
        {
            return Err(ValidationError::MissingTagKeyOrValue { allocation: i });
        }
        sum += u128::from(a.allocated_usage_quantity);
    }
    if sum != u128::from(quantity) {
        return Err(ValidationError::AllocationSumMismatch { sum, quantity });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    pub(crate) const ARN: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    fn ev() -> Event {
        Event::new(
            ARN,
            "123456789012",
            "requests",
            10,
            Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap(),
        )
    }

    #[test]
    fn well_formed_event_is_valid() {
        assert_eq!(ev().validate(true), Ok(()));
        assert_eq!(
            ev().validate(false).unwrap_err().reason(),
            "InvalidEventId",
            "the wire form always carries an id"
        );
    }

    #[test]
    fn license_arn_shapes() {
        for good in [
            ARN,
            "arn:aws-us-gov:license-manager::000000000000:license:l-ffffffffffffffffffffffffffffffff",
            "arn:aws-cn:license-manager::123456789012:license:l-00000000000000000000000000000000",
        ] {
            assert_eq!(validate_license_arn(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "arn::license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:AWS:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager:us-east-1:123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::12345678901:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::123456789012:license:l-0123456789ABCDEF0123456789abcdef",
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcde",
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef0",
            "arn:aws:license-manager::123456789012:license:0123456789abcdef0123456789abcdef",
            "prod-abc123",
        ] {
            assert_eq!(
                validate_license_arn(bad).unwrap_err().reason(),
                "InvalidLicenseArn",
                "{bad}"
            );
        }
    }

    #[test]
    fn account_id_must_be_twelve_digits() {
        for bad in [
            "",
            "12345678901",
            "1234567890123",
            "12345678901a",
            "１２３４５６７８９０１２",
        ] {
            let mut e = ev();
            e.customer_aws_account_id = bad.into();
            assert_eq!(e.validate(true).unwrap_err().reason(), "InvalidAccountId");
        }
    }

    #[test]
    fn empty_dimension_is_rejected() {
        let mut e = ev();
        e.dimension.clear();
        assert_eq!(e.validate(true).unwrap_err().reason(), "EmptyDimension");
    }

    #[test]
    fn a_dimension_longer_than_the_limit_is_rejected() {
        let mut e = ev();
        e.dimension = "x".repeat(MAX_DIMENSION_BYTES);
        assert_eq!(e.validate(true), Ok(()));
        e.dimension.push('x');
        assert_eq!(e.validate(true).unwrap_err().reason(), "DimensionTooLong");
        // Counted in bytes: 128 two-byte characters are 256 bytes.
        e.dimension = "é".repeat(128);
        assert_eq!(e.validate(true).unwrap_err().reason(), "DimensionTooLong");
    }

    #[test]
    fn a_license_arn_longer_than_the_limit_is_rejected() {
        let arn = |partition: &str| {
            format!(
                "arn:{partition}:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
            )
        };
        let longest = arn(&"a".repeat(MAX_LICENSE_ARN_BYTES - arn("").len()));
        assert_eq!(longest.len(), MAX_LICENSE_ARN_BYTES);
        assert_eq!(validate_license_arn(&longest), Ok(()));
        let longer = arn(&"a".repeat(MAX_LICENSE_ARN_BYTES + 1 - arn("").len()));
        assert_eq!(
            validate_license_arn(&longer).unwrap_err().reason(),
            "InvalidLicenseArn"
        );
    }

    #[test]
    fn allocation_rules() {
        let t = |k: &str, v: &str| Tag::new(k, v);
        let ok = vec![
            UsageAllocation::new(4, vec![t("team", "a")]),
            UsageAllocation::new(6, vec![t("team", "b"), t("env", "prod")]),
        ];
        assert_eq!(ev().with_allocations(ok).validate(true), Ok(()));

        let cases: Vec<(Vec<UsageAllocation>, &str)> = vec![
            (vec![], "MalformedAllocations"),
            (
                vec![UsageAllocation::new(10, vec![])],
                "MalformedAllocations",
            ),
            (
                vec![UsageAllocation::new(
                    10,
                    (0..6).map(|i| t(&i.to_string(), "v")).collect(),
                )],
                "TooManyTags",
            ),
            (
                vec![UsageAllocation::new(10, vec![t("", "v")])],
                "MissingTagKeyOrValue",
            ),
            (
                vec![UsageAllocation::new(10, vec![t("k", "")])],
                "MissingTagKeyOrValue",
            ),
            (
                vec![UsageAllocation::new(9, vec![t("k", "v")])],
                "AllocationSumMismatch",
            ),
            (
                vec![UsageAllocation::new(1, vec![t("k", "v")]); MAX_ALLOCATIONS_PER_RECORD + 1],
                "TooManyAllocations",
            ),
        ];
        for (allocs, reason) in cases {
            assert_eq!(
                ev().with_allocations(allocs.clone())
                    .validate(true)
                    .unwrap_err()
                    .reason(),
                reason,
                "{allocs:?}"
            );
        }
    }

    #[test]
    fn allocation_sum_cannot_overflow_into_a_match() {
        let allocs = vec![
            UsageAllocation::new(u64::MAX, vec![Tag::new("a", "1")]),
            UsageAllocation::new(11, vec![Tag::new("a", "2")]),
        ];
        // u64::MAX + 11 wraps to 10 in u64 arithmetic; the check must not be fooled.
        assert_eq!(
            ev().with_allocations(allocs)
                .validate(true)
                .unwrap_err()
                .reason(),
            "AllocationSumMismatch"
        );
    }

    #[test]
    fn truncation_keeps_milliseconds_and_second() {
        let ts = Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap();
        let t = truncate_to_millis(ts);
        assert_eq!(t.timestamp(), 1_700_000_000);
        assert_eq!(t.timestamp_subsec_nanos(), 123_000_000);
        // A leap second keeps its second and its run past 999 ms.
        let leap = Utc.timestamp_opt(1_483_228_799, 1_500_123_456).unwrap();
        let t = truncate_to_millis(leap);
        assert_eq!(
            (t.timestamp(), t.timestamp_subsec_nanos()),
            (1_483_228_799, 1_500_000_000)
        );
        assert_eq!(truncate_to_millis(t), t);
    }
}
