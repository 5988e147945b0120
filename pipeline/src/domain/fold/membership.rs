//! Where a pushed row stands relative to the group being folded or re-visited.

use super::RowView;
use awsmp_contract::keys::{
    GroupKey, SortKeySegments, parse_usage_timestamp, split_usage_sort_key,
};
use awsmp_contract::row::AttrValue;

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
        /// The second of the hour of its whole-second timestamp, when well-formed.
        second: Option<u32>,
    },
}

/// A group's raw-row key prefix (`account#dimension#YYYY-MM-DDTHH`), and whether its account
/// has no `#` (then a key of the prefix and `:MM:SS` splits into exactly the group's segments).
#[derive(Debug, Clone)]
pub(super) struct MemberPrefix {
    text: String,
    plain_account: bool,
}

impl MemberPrefix {
    pub(super) fn of(group: &GroupKey) -> Self {
        Self {
            text: group.usage_prefix(),
            plain_account: !group.customer_aws_account_id.contains('#'),
        }
    }

    /// `account#dimension#YYYY-MM-DDTHH`.
    pub(super) fn text(&self) -> &str {
        &self.text
    }

    /// The account has no `#`.
    pub(super) fn plain_account(&self) -> bool {
        self.plain_account
    }
}

pub(super) fn membership<'r>(
    group: &GroupKey,
    prefix: &MemberPrefix,
    row: &RowView<'r>,
) -> Membership<'r> {
    if row.pending.is_none() {
        return Membership::NotPending;
    }
    if let Some(pk) = row.license_arn
        && pk.as_s() != Some(group.license_arn.as_str())
    {
        return Membership::Foreign;
    }
    let Some(sort_key) = row.sort_key.and_then(AttrValue::as_s) else {
        return Membership::Unkeyed;
    };
    if let Some(member) = whole_second_member(group, prefix, sort_key) {
        return member;
    }
    let Some(segments) = split_usage_sort_key(sort_key) else {
        return Membership::Malformed(sort_key);
    };
    if !sort_key.starts_with(&prefix.text)
        || segments.account != group.customer_aws_account_id
        || segments.dimension != group.dimension
    {
        return Membership::Foreign;
    }
    let second = parse_usage_timestamp(segments.timestamp)
        .ok()
        .and_then(|t| group.hour.second_of(t));
    Membership::Member {
        sort_key,
        segments,
        second,
    }
}

/// The common case without splitting or a calendar: `sort_key` is the group's prefix
/// (`account#dimension#YYYY-MM-DDTHH`) followed by `:MM:SS`. With no `#` in the account, the
/// general path would split it into exactly the group's account and dimension and this
/// timestamp, so the answer is the same; anything else takes the general path.
fn whole_second_member<'r>(
    group: &GroupKey,
    prefix: &MemberPrefix,
    sort_key: &'r str,
) -> Option<Membership<'r>> {
    if !prefix.plain_account {
        return None;
    }
    let rest = sort_key.strip_prefix(prefix.text.as_str())?.as_bytes();
    let [b':', m1, m2, b':', s1, s2] = *rest else {
        return None;
    };
    let digit = |c: u8| c.is_ascii_digit().then(|| u32::from(c - b'0'));
    let (minute, second) = (digit(m1)? * 10 + digit(m2)?, digit(s1)? * 10 + digit(s2)?);
    if minute > 59 || second > 59 {
        return None;
    }
    let account_end = group.customer_aws_account_id.len();
    let dimension_end = account_end + 1 + group.dimension.len();
    let of_hour = minute * 60 + second;
    Some(Membership::Member {
        sort_key,
        segments: SortKeySegments {
            account: &sort_key[..account_end],
            dimension: &sort_key[account_end + 1..dimension_end],
            timestamp: &sort_key[dimension_end + 1..],
        },
        second: Some(of_hour),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_contract::row::RawUsageRow;

    /// What the general path (split, then the calendar) makes of `sort_key`.
    fn general<'r>(
        group: &GroupKey,
        sort_key: &'r str,
    ) -> Option<(&'r str, &'r str, &'r str, Option<u32>)> {
        let s = split_usage_sort_key(sort_key)?;
        let second = parse_usage_timestamp(s.timestamp)
            .ok()
            .and_then(|t| group.hour.second_of(t));
        Some((s.account, s.dimension, s.timestamp, second))
    }

    #[test]
    fn the_whole_second_shortcut_agrees_with_the_general_path() {
        for account in ["210987654321", "legacy#customer"] {
            let group = GroupKey::new(
                "prod0code",
                account,
                "api#calls",
                "2026-11-30T11".parse().unwrap(),
            );
            let prefix = MemberPrefix::of(&group);
            let p = group.usage_prefix();
            for tail in [
                ":00:00", ":59:59", ":12:34", ":60:00", ":00:60", ":5:00", ":00:0a", ":00:00Z",
                ":00:00.5", "", ":00", "#x:00:00",
            ] {
                let key = format!("{p}{tail}");
                let Some(Membership::Member {
                    segments, second, ..
                }) = whole_second_member(&group, &prefix, &key)
                else {
                    continue;
                };
                assert_eq!(
                    Some((
                        segments.account,
                        segments.dimension,
                        segments.timestamp,
                        second
                    )),
                    general(&group, &key),
                    "{key}"
                );
                assert!(second.is_some(), "{key}");
            }
            assert_eq!(
                whole_second_member(&group, &prefix, &format!("{p}:59:59")).is_some(),
                prefix.plain_account
            );
        }
    }

    #[test]
    fn malformed_seconds_take_the_general_path() {
        let group = GroupKey::new(
            "prod0code",
            "210987654321",
            "api",
            "2026-11-30T11".parse().unwrap(),
        );
        let prefix = MemberPrefix::of(&group);
        for tail in [":60:00", ":00:60", ":0a:00", ":00:00Z"] {
            let key = format!("{}{tail}", group.usage_prefix());
            assert!(
                whole_second_member(&group, &prefix, &key).is_none(),
                "{key}"
            );
            let mut row = RawUsageRow::new();
            row.insert(
                awsmp_contract::attrs::METERING_PENDING.into(),
                AttrValue::s("2026-11-30T11"),
            );
            row.insert(
                awsmp_contract::attrs::USAGE_SORT_KEY.into(),
                AttrValue::s(&key),
            );
            match membership(&group, &prefix, &RowView::of(&row)) {
                Membership::Member { second, .. } => assert_eq!(second, None, "{key}"),
                _ => panic!("{key} is a member with a malformed timestamp"),
            }
        }
    }
}
