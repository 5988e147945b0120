//! Keys and formats: hour buckets, whole-second timestamps, the usage / aggregated sort keys,
//! the group key and the work message the discoverer sends to the aggregator.
//!
//! ```
//! use awsmp_contract::keys::{GroupKey, HourBucket};
//! let hour: HourBucket = "2026-11-30T12".parse().unwrap();
//! let group = GroupKey::new(
//!     "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
//!     "210987654321", "api_calls", hour);
//! assert_eq!(group.usage_prefix(), "210987654321#api_calls#2026-11-30T12");
//! assert_eq!(group.aggregated_sort_key(), "210987654321#api_calls#2026-11-30T12");
//! assert_eq!(group.usage_sort_key_at(3599), "210987654321#api_calls#2026-11-30T12:59:59");
//! let json = group.to_work_message();
//! assert_eq!(GroupKey::from_work_message(&json).unwrap(), group);
//! ```

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeZone, Timelike, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::DomainError;

/// Seconds in an hour bucket; also the most raw rows one group can have (one per second).
pub const SECONDS_PER_HOUR: u32 = 3600;

/// Separator between the segments of both sort keys.
pub const SORT_KEY_SEPARATOR: char = '#';

/// One UTC hour, the unit of metering (`BatchMeterUsage` de-duplicates per hour).
///
/// Stored as whole hours since the Unix epoch, so ordering and arithmetic are integer
/// operations; displayed and parsed as `YYYY-MM-DDTHH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HourBucket(i64);

impl HourBucket {
    /// The bucket containing `t` (floor to the hour).
    pub fn containing(t: DateTime<Utc>) -> Self {
        Self(t.timestamp().div_euclid(3600))
    }

    /// The bucket with this many hours since 1970-01-01T00.
    pub const fn from_index(hours_since_epoch: i64) -> Self {
        Self(hours_since_epoch)
    }

    /// Hours since 1970-01-01T00.
    pub const fn index(self) -> i64 {
        self.0
    }

    /// First instant of the hour (`HH:00:00`); also the `Timestamp` sent to `BatchMeterUsage`.
    pub fn start(self) -> DateTime<Utc> {
        Utc.timestamp_opt(self.0 * 3600, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// First instant after the hour (the next bucket's start).
    pub fn end(self) -> DateTime<Utc> {
        self.plus_hours(1).start()
    }

    /// The bucket `hours` earlier.
    pub const fn minus_hours(self, hours: i64) -> Self {
        Self(self.0 - hours)
    }

    /// The bucket `hours` later.
    pub const fn plus_hours(self, hours: i64) -> Self {
        Self(self.0 + hours)
    }

    /// Whole hours from `earlier` to `self` (negative when `earlier` is later).
    pub const fn hours_since(self, earlier: HourBucket) -> i64 {
        self.0 - earlier.0
    }

    /// True when `t` falls inside this hour.
    pub fn contains(self, t: DateTime<Utc>) -> bool {
        Self::containing(t) == self
    }

    /// Second of the hour (0–3599) of `t`, when `t` falls inside this hour.
    pub fn second_of(self, t: DateTime<Utc>) -> Option<u32> {
        let offset = t.timestamp() - self.0 * 3600;
        (0..i64::from(SECONDS_PER_HOUR))
            .contains(&offset)
            .then_some(offset as u32)
    }

    /// The instant `second` seconds into the hour.
    pub fn at_second(self, second: u32) -> DateTime<Utc> {
        self.start() + chrono::Duration::seconds(i64::from(second))
    }

    /// UTC calendar `(year, month)` of the hour.
    pub fn year_month(self) -> (i32, u32) {
        let s = self.start();
        (s.year(), s.month())
    }

    /// True when both buckets are in the same UTC calendar month.
    pub fn same_month_as(self, other: HourBucket) -> bool {
        self.year_month() == other.year_month()
    }

    /// True when this bucket lies in the calendar month immediately before `other`'s month
    /// (December 2027 is the month before January 2028).
    pub fn is_in_month_before(self, other: HourBucket) -> bool {
        let (y, m) = self.year_month();
        let (oy, om) = other.year_month();
        if om == 1 {
            y == oy - 1 && m == 12
        } else {
            y == oy && m == om - 1
        }
    }
}

impl fmt::Display for HourBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.start();
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}",
            s.year(),
            s.month(),
            s.day(),
            s.hour()
        )
    }
}

impl FromStr for HourBucket {
    type Err = DomainError;

    /// Parses exactly `YYYY-MM-DDTHH`; anything longer or shorter is refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || DomainError::InvalidHourBucket(s.to_owned());
        let b = s.as_bytes();
        if b.len() != 13 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
            return Err(err());
        }
        let year = digits(&b[0..4]).ok_or_else(err)?;
        let month = digits(&b[5..7]).ok_or_else(err)?;
        let day = digits(&b[8..10]).ok_or_else(err)?;
        let hour = digits(&b[11..13]).ok_or_else(err)?;
        let date = NaiveDate::from_ymd_opt(year as i32, month, day).ok_or_else(err)?;
        let time = NaiveTime::from_hms_opt(hour, 0, 0).ok_or_else(err)?;
        Ok(Self::containing(date.and_time(time).and_utc()))
    }
}

impl Serialize for HourBucket {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HourBucket {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Parse ASCII digits into a number; `None` for anything else (signs, spaces, empty).
fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() {
        return None;
    }
    b.iter().try_fold(0u32, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

/// Parse a raw-row timestamp: exactly `YYYY-MM-DDTHH:MM:SS`, UTC, whole second.
///
/// Refuses fractions (`.000`, `.123`), zone suffixes (`Z`, `+00:00`), hour-truncated values
/// (`2026-11-30T12`), leap second `:60`, and anything not zero-padded.
///
/// ```
/// use awsmp_contract::keys::parse_usage_timestamp;
/// assert!(parse_usage_timestamp("2026-11-30T12:34:56").is_ok());
/// for bad in ["2026-11-30T12:34:56.000", "2026-11-30T12:34:56Z", "2026-11-30T12"] {
///     assert!(parse_usage_timestamp(bad).is_err());
/// }
/// ```
pub fn parse_usage_timestamp(s: &str) -> Result<DateTime<Utc>, DomainError> {
    let err = || DomainError::InvalidTimestamp(s.to_owned());
    let b = s.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(err());
    }
    let year = digits(&b[0..4]).ok_or_else(err)?;
    let month = digits(&b[5..7]).ok_or_else(err)?;
    let day = digits(&b[8..10]).ok_or_else(err)?;
    let hour = digits(&b[11..13]).ok_or_else(err)?;
    let minute = digits(&b[14..16]).ok_or_else(err)?;
    let second = digits(&b[17..19]).ok_or_else(err)?;
    let date = NaiveDate::from_ymd_opt(year as i32, month, day).ok_or_else(err)?;
    // from_hms_opt refuses second 60, so a leap second never sneaks in.
    let time = NaiveTime::from_hms_opt(hour, minute, second).ok_or_else(err)?;
    Ok(date.and_time(time).and_utc())
}

/// Format an instant as a raw-row timestamp `YYYY-MM-DDTHH:MM:SS` (any fraction is dropped,
/// i.e. the instant is floored to its second).
pub fn format_usage_timestamp(t: DateTime<Utc>) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Usage-table sort key `{account}#{dimension}#{YYYY-MM-DDTHH:MM:SS}` for the second containing `t`.
pub fn usage_sort_key(account: &str, dimension: &str, t: DateTime<Utc>) -> String {
    format!("{account}#{dimension}#{}", format_usage_timestamp(t))
}

/// Aggregated-usage sort key `{account}#{dimension}#{YYYY-MM-DDTHH}`.
pub fn aggregated_sort_key(account: &str, dimension: &str, hour: HourBucket) -> String {
    format!("{account}#{dimension}#{hour}")
}

/// The three segments of a usage sort key, borrowed from it.
///
/// The account is everything before the first `#` and the timestamp everything after the
/// last `#`, so a dimension that itself contains `#` still splits unambiguously.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortKeySegments<'a> {
    /// Account (or legacy customer identifier) segment.
    pub account: &'a str,
    /// Dimension segment.
    pub dimension: &'a str,
    /// Timestamp segment (not yet validated).
    pub timestamp: &'a str,
}

/// Split a usage sort key into its segments; `None` when it is empty or has fewer than three
/// `#`-separated segments (the `MalformedSortKey` condition).
pub fn split_usage_sort_key(sk: &str) -> Option<SortKeySegments<'_>> {
    let (account, rest) = sk.split_once(SORT_KEY_SEPARATOR)?;
    let (dimension, timestamp) = rest.rsplit_once(SORT_KEY_SEPARATOR)?;
    Some(SortKeySegments {
        account,
        dimension,
        timestamp,
    })
}

/// Parse an aggregated-usage sort key into `(account, dimension, hour)`.
pub fn parse_aggregated_sort_key(sk: &str) -> Option<(&str, &str, HourBucket)> {
    let (account, rest) = sk.split_once(SORT_KEY_SEPARATOR)?;
    let (dimension, hour) = rest.rsplit_once(SORT_KEY_SEPARATOR)?;
    Some((account, dimension, hour.parse().ok()?))
}

/// One aggregation group: `(licenseArn, customerAWSAccountId, dimension, hour)`, exactly one
/// `BatchMeterUsage` record. Its JSON form is the work message the discoverer enqueues and the
/// aggregator reads:
/// `{"licenseArn":"…","customerAWSAccountId":"…","dimension":"…","hourBucket":"YYYY-MM-DDTHH"}`.
///
/// For a legacy (pre-Concurrent-Agreements) row the license field holds the product code and
/// the account field holds the customer identifier, exactly as the row's keys do.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupKey {
    /// Partition key of the rows: the license ARN (legacy: the product code).
    #[serde(rename = "licenseArn")]
    pub license_arn: String,
    /// First sort-key segment: the buyer account id (legacy: the customer identifier).
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// Pricing dimension.
    #[serde(rename = "dimension")]
    pub dimension: String,
    /// The UTC hour.
    #[serde(rename = "hourBucket")]
    pub hour: HourBucket,
}

impl GroupKey {
    /// A group key from its parts.
    pub fn new(
        license_arn: impl Into<String>,
        customer_aws_account_id: impl Into<String>,
        dimension: impl Into<String>,
        hour: HourBucket,
    ) -> Self {
        Self {
            license_arn: license_arn.into(),
            customer_aws_account_id: customer_aws_account_id.into(),
            dimension: dimension.into(),
            hour,
        }
    }

    /// The `begins_with` prefix that reads this group's raw rows:
    /// `{account}#{dimension}#{YYYY-MM-DDTHH}` (docs/row-contract.md).
    ///
    /// Deliberately *without* a trailing `:`: hours are zero-padded, so no other well-formed
    /// hour can match, while malformed keys of this group-hour (hour-truncated
    /// `…T12`, `…T12Z`) are still read and rejected as `MalformedTimestamp` instead of staying
    /// invisible until they age out. The only foreign keys it can match belong to a dimension
    /// that itself contains `#YYYY-MM-DDTHH`; the fold recognises and skips those by their
    /// segments.
    pub fn usage_prefix(&self) -> String {
        format!(
            "{}#{}#{}",
            self.customer_aws_account_id, self.dimension, self.hour
        )
    }

    /// The aggregated-usage sort key `{account}#{dimension}#{YYYY-MM-DDTHH}`.
    pub fn aggregated_sort_key(&self) -> String {
        aggregated_sort_key(&self.customer_aws_account_id, &self.dimension, self.hour)
    }

    /// The raw-row sort key for second `second` (0–3599) of this group's hour.
    pub fn usage_sort_key_at(&self, second: u32) -> String {
        format!(
            "{}#{}#{}:{:02}:{:02}",
            self.customer_aws_account_id,
            self.dimension,
            self.hour,
            second / 60,
            second % 60
        )
    }

    /// The work-message JSON for this group.
    pub fn to_work_message(&self) -> String {
        // Serializing plain strings into JSON cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse a work message.
    pub fn from_work_message(body: &str) -> Result<Self, DomainError> {
        serde_json::from_str(body).map_err(|e| DomainError::InvalidWorkMessage(e.to_string()))
    }

    /// Which kind of `UsageRecord` this group becomes, read from its partition key: a
    /// partition key starting with `arn:` is a Concurrent-Agreements license, anything else is
    /// a legacy product code (whose customer identifier is the first sort-key segment).
    pub fn identity(&self) -> Identity<'_> {
        if self.license_arn.starts_with(LICENSE_ARN_PREFIX) {
            Identity::ConcurrentAgreements {
                license_arn: &self.license_arn,
                customer_aws_account_id: &self.customer_aws_account_id,
            }
        } else {
            Identity::Legacy {
                product_code: &self.license_arn,
                customer_identifier: &self.customer_aws_account_id,
            }
        }
    }
}

/// Partition keys starting with this are license ARNs (Concurrent Agreements).
pub const LICENSE_ARN_PREFIX: &str = "arn:";

/// The customer identity a group's `UsageRecord` carries. `BatchMeterUsage` never mixes the
/// two kinds in one call, and never sends `ProductCode` with `LicenseArn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Identity<'a> {
    /// `LicenseArn` + `CustomerAWSAccountId`.
    ConcurrentAgreements {
        /// License ARN.
        license_arn: &'a str,
        /// Buyer account id.
        customer_aws_account_id: &'a str,
    },
    /// `ProductCode` (request level) + `CustomerIdentifier`.
    Legacy {
        /// Product code (the rows' partition key).
        product_code: &'a str,
        /// Customer identifier (the rows' first sort-key segment).
        customer_identifier: &'a str,
    },
}

impl Identity<'_> {
    /// True for Concurrent Agreements.
    pub fn is_concurrent_agreements(&self) -> bool {
        matches!(self, Identity::ConcurrentAgreements { .. })
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.license_arn, self.aggregated_sort_key())
    }
}

/// Primary key of one raw usage row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RowKey {
    /// Partition key.
    #[serde(rename = "licenseArn")]
    pub license_arn: String,
    /// Sort key (`customerAWSAccountId_dimension_timestamp`).
    #[serde(rename = "customerAWSAccountId_dimension_timestamp")]
    pub sort_key: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    #[test]
    fn hour_bucket_round_trips_and_floors() {
        let b = HourBucket::containing(utc(2028, 2, 29, 23, 59, 59));
        assert_eq!(b.to_string(), "2028-02-29T23");
        assert_eq!("2028-02-29T23".parse::<HourBucket>().unwrap(), b);
        assert_eq!(b.start(), utc(2028, 2, 29, 23, 0, 0));
        assert_eq!(b.plus_hours(1).to_string(), "2028-03-01T00");
        assert_eq!(b.minus_hours(24).to_string(), "2028-02-28T23");
        assert_eq!(b.second_of(utc(2028, 2, 29, 23, 59, 59)), Some(3599));
        assert_eq!(b.second_of(utc(2028, 3, 1, 0, 0, 0)), None);
        assert_eq!(b.at_second(61), utc(2028, 2, 29, 23, 1, 1));
        let before_epoch = HourBucket::containing(utc(1969, 12, 31, 23, 30, 0));
        assert_eq!(before_epoch.to_string(), "1969-12-31T23");
    }

    #[test]
    fn hour_bucket_parse_is_strict() {
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30T1",
            "2026-11-30T24",
            "2026-11-30T12:00",
            "2026-02-30T12",
            "2026-11-30 12",
            "+026-11-30T12",
            "2026-11-30T12Z",
            "2026-1-30T012",
        ] {
            assert!(bad.parse::<HourBucket>().is_err(), "{bad}");
        }
    }

    #[test]
    fn month_relations() {
        let dec = HourBucket::containing(utc(2027, 12, 31, 23, 0, 0));
        let jan = HourBucket::containing(utc(2028, 1, 1, 0, 0, 0));
        let feb = HourBucket::containing(utc(2028, 2, 1, 0, 0, 0));
        assert!(dec.is_in_month_before(jan));
        assert!(!jan.is_in_month_before(dec));
        assert!(jan.is_in_month_before(feb));
        assert!(!dec.is_in_month_before(feb));
        assert!(!jan.same_month_as(dec));
        assert!(jan.same_month_as(jan.plus_hours(30 * 24 + 23)));
    }

    #[test]
    fn timestamps_are_whole_second_only() {
        assert_eq!(
            parse_usage_timestamp("2028-02-29T23:59:59").unwrap(),
            utc(2028, 2, 29, 23, 59, 59)
        );
        for bad in [
            "2026-11-30T12:34:56.000",
            "2026-11-30T12:34:56.123",
            "2026-11-30T12:34:56Z",
            "2026-11-30T12:34:56+00:00",
            "2026-11-30T12",
            "2026-11-30T12:34",
            "2026-11-30T12:34:60",
            "2026-11-30T24:00:00",
            "2027-02-29T00:00:00",
            "2026-11-30 12:34:56",
            "2026-11-30T1:34:56 ",
            "",
        ] {
            assert!(parse_usage_timestamp(bad).is_err(), "{bad}");
        }
        let t = utc(2026, 1, 2, 3, 4, 5) + chrono::Duration::milliseconds(999);
        assert_eq!(format_usage_timestamp(t), "2026-01-02T03:04:05");
        assert_eq!(usage_sort_key("a", "d", t), "a#d#2026-01-02T03:04:05");
    }

    #[test]
    fn sort_key_segments() {
        let s = split_usage_sort_key("123456789012#api#calls#2026-11-30T12:00:01").unwrap();
        assert_eq!(
            (s.account, s.dimension, s.timestamp),
            ("123456789012", "api#calls", "2026-11-30T12:00:01")
        );
        assert!(split_usage_sort_key("").is_none());
        assert!(split_usage_sort_key("a#b").is_none());
        assert!(split_usage_sort_key("nohash").is_none());
        let empty = split_usage_sort_key("##").unwrap();
        assert_eq!(
            (empty.account, empty.dimension, empty.timestamp),
            ("", "", "")
        );
        let (a, d, h) = parse_aggregated_sort_key("123456789012#api#2026-11-30T12").unwrap();
        assert_eq!(
            (a, d, h.to_string().as_str()),
            ("123456789012", "api", "2026-11-30T12")
        );
        assert!(parse_aggregated_sort_key("123456789012#api#2026-11-30T12:00").is_none());
    }

    #[test]
    fn group_prefix_matches_only_its_hour() {
        let g = GroupKey::new("lic", "acct", "dim", "2026-11-30T01".parse().unwrap());
        let p = g.usage_prefix();
        assert!(g.usage_sort_key_at(0).starts_with(&p));
        assert!(g.usage_sort_key_at(3599).starts_with(&p));
        assert_eq!(g.usage_sort_key_at(3599), "acct#dim#2026-11-30T01:59:59");
        for other_hour in [
            "2026-11-30T10",
            "2026-11-30T11",
            "2026-11-30T00",
            "2026-11-29T01",
        ] {
            let other = GroupKey {
                hour: other_hour.parse().unwrap(),
                ..g.clone()
            };
            assert!(!other.usage_sort_key_at(0).starts_with(&p));
            assert!(!other.usage_sort_key_at(3599).starts_with(&p));
        }
        // Hour-truncated keys of this group-hour are read (and rejected by the fold).
        assert!("acct#dim#2026-11-30T01".starts_with(&p));
        let other_dim = GroupKey {
            dimension: "di".into(),
            ..g.clone()
        };
        assert!(!other_dim.usage_sort_key_at(0).starts_with(&p));
    }

    #[test]
    fn identity_follows_the_partition_key() {
        let h = "2026-11-30T01".parse().unwrap();
        let ca = GroupKey::new(
            "arn:aws:license-manager::123456789012:license:l-0",
            "123456789012",
            "d",
            h,
        );
        assert!(ca.identity().is_concurrent_agreements());
        let legacy = GroupKey::new("prodcode", "cust-1", "d", h);
        assert_eq!(
            legacy.identity(),
            Identity::Legacy {
                product_code: "prodcode",
                customer_identifier: "cust-1"
            }
        );
    }

    #[test]
    fn work_message_shape() {
        let g = GroupKey::new("lic", "acct", "dim", "2026-11-30T01".parse().unwrap());
        assert_eq!(
            g.to_work_message(),
            r#"{"licenseArn":"lic","customerAWSAccountId":"acct","dimension":"dim","hourBucket":"2026-11-30T01"}"#
        );
        assert!(GroupKey::from_work_message(r#"{"licenseArn":"lic"}"#).is_err());
        assert!(
            GroupKey::from_work_message(
                r#"{"licenseArn":"l","customerAWSAccountId":"a","dimension":"d","hourBucket":"2026-11-30T01:00"}"#
            )
            .is_err()
        );
    }
}
