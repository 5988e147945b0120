//! Where a pushed row stands relative to the group being folded or re-visited.

use chrono::{DateTime, Utc};

use super::present;
use crate::contract::attrs;
use crate::domain::keys::{GroupKey, SortKeySegments, parse_usage_timestamp, split_usage_sort_key};
use crate::domain::row::{AttrValue, RawUsageRow};

/// Where a row stands relative to a group.
pub(super) enum Membership<'r> {
    NotPending,
    Foreign,
    /// Member with no string sort key at all (only possible outside DynamoDB).
    Unkeyed,
    /// Member whose sort key does not split into three segments.
    Malformed(&'r str),
    Member {
        sort_key: &'r str,
        segments: SortKeySegments<'r>,
        /// The whole-second timestamp and its second of the hour, when well-formed.
        timestamp: Option<(DateTime<Utc>, u32)>,
    },
}

pub(super) fn membership<'r>(
    group: &GroupKey,
    prefix: &str,
    row: &'r RawUsageRow,
) -> Membership<'r> {
    if present(row, attrs::METERING_PENDING).is_none() {
        return Membership::NotPending;
    }
    if let Some(pk) = present(row, attrs::LICENSE_ARN)
        && pk.as_s() != Some(group.license_arn.as_str())
    {
        return Membership::Foreign;
    }
    let Some(sort_key) = present(row, attrs::USAGE_SORT_KEY).and_then(AttrValue::as_s) else {
        return Membership::Unkeyed;
    };
    let Some(segments) = split_usage_sort_key(sort_key) else {
        return Membership::Malformed(sort_key);
    };
    if !sort_key.starts_with(prefix)
        || segments.account != group.customer_aws_account_id
        || segments.dimension != group.dimension
    {
        return Membership::Foreign;
    }
    let timestamp = parse_usage_timestamp(segments.timestamp)
        .ok()
        .and_then(|t| group.hour.second_of(t).map(|s| (t, s)));
    Membership::Member {
        sort_key,
        segments,
        timestamp,
    }
}
