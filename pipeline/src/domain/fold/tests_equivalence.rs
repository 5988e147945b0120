//! The fold with its fast path (`conforming.rs`) ≡ the fold without it, on arbitrary groups:
//! conforming rows and every kind of bad row (missing, NULL, mistyped and differing attributes,
//! foreign and malformed keys, bad quantities, allocations, duplicates), groups of every
//! partition kind, and a `now` inside, after and far after the hour. Every push's result and
//! the outcome must be equal. The same for the rows as a store hands them (`compact.rs`: a
//! conforming row compacted to its second and quantity), folded with `push_row`.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;

use super::{FoldOutcome, GroupFold, RowShape, RowView, UsageRow};
use awsmp_contract::attrs;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::row::{Allocation, AttrValue, RawUsageRow, Tag, conforming_row};
use awsmp_contract::time::TimeConfig;

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

fn groups() -> Vec<GroupKey> {
    let hour = "2026-11-30T11".parse().unwrap();
    vec![
        GroupKey::new(LICENSE, "210987654321", "api_calls", hour),
        GroupKey::new(LICENSE, "21098765432", "api_calls", hour),
        GroupKey::new(LICENSE, "210987654321", "", hour),
        GroupKey::new("prod0code", "customer-7", "api", hour),
        GroupKey::new("prod0code", "legacy#customer", "api#calls", hour),
        GroupKey::new("prod0code", "", "api", hour),
        GroupKey::new(
            "arn:aws:license-manager::1:license:l-x",
            "210987654321",
            "api",
            hour,
        ),
    ]
}

/// `now`: inside the hour (later seconds are in the future), after it, far after it.
fn now_of(group: &GroupKey, choice: u8) -> DateTime<Utc> {
    let start = group.hour.start();
    match choice {
        0 => start + Duration::seconds(1800),
        1 => start + Duration::minutes(80),
        _ => start + Duration::days(60),
    }
}

/// What is done to one attribute of a conforming row.
#[derive(Debug, Clone)]
enum Change {
    Remove,
    Set(AttrValue),
}

/// The attributes a usage row of the writer contract holds (docs/row-contract.md).
pub(super) const NAMES: [&str; 9] = [
    attrs::METERING_PENDING,
    attrs::LICENSE_ARN,
    attrs::USAGE_SORT_KEY,
    attrs::CUSTOMER_AWS_ACCOUNT_ID,
    attrs::CUSTOMER_IDENTIFIER,
    attrs::DIMENSION,
    attrs::QUANTITY,
    attrs::USAGE_ALLOCATIONS,
    attrs::TIMESTAMP,
];

/// A value for `name`, often one a conforming row of some group holds (so differences are
/// near misses as well as junk).
fn value(group: &GroupKey, second: u32, pick: u8) -> AttrValue {
    let key = group.usage_sort_key_at(second);
    let prefix = group.usage_prefix();
    let candidates = [
        AttrValue::Null,
        AttrValue::Other,
        AttrValue::Bool(true),
        AttrValue::s(""),
        AttrValue::s(&group.license_arn),
        AttrValue::s(&group.customer_aws_account_id),
        AttrValue::s(&group.dimension),
        AttrValue::s("210987654321"),
        AttrValue::s("api_calls"),
        AttrValue::s(&key),
        AttrValue::s(format!("{prefix}:60:00")),
        AttrValue::s(format!("{prefix}:0a:00")),
        AttrValue::s(prefix.trim_end_matches(':')),
        AttrValue::s(format!("{key}.000")),
        AttrValue::s(format!("{key}Z")),
        AttrValue::s("210987654321#api_calls"),
        AttrValue::s(group.hour.to_string()),
        AttrValue::N("7".into()),
        AttrValue::N("0".into()),
        AttrValue::N("007".into()),
        AttrValue::N("4.2E1".into()),
        AttrValue::N("2.5".into()),
        AttrValue::N("-3".into()),
        AttrValue::N("2147483647".into()),
        AttrValue::N("2147483648".into()),
        AttrValue::N("99999999999999999999".into()),
        AttrValue::N("abc".into()),
        AttrValue::s("5"),
        AttrValue::L(vec![]),
        Allocation {
            quantity: 7,
            tags: vec![Tag::new("team", "a")],
        }
        .to_attr(),
        AttrValue::L(vec![
            Allocation {
                quantity: 7,
                tags: vec![Tag::new("team", "a")],
            }
            .to_attr(),
        ]),
        AttrValue::M(BTreeMap::new()),
    ];
    candidates[usize::from(pick) % candidates.len()].clone()
}

fn row_strategy() -> impl Strategy<Value = (u32, u64, Vec<(usize, Option<u8>)>)> {
    (
        prop_oneof![0..3600u32, 0..8u32],
        prop_oneof![0..100u64, Just(0u64), Just(2_147_483_647u64)],
        prop::collection::vec((0..NAMES.len(), prop::option::of(any::<u8>())), 0..3),
    )
}

fn build(group: &GroupKey, spec: &(u32, u64, Vec<(usize, Option<u8>)>)) -> RawUsageRow {
    let (second, quantity, changes) = spec;
    let mut row = conforming_row(group, *second, *quantity, None);
    for &(name, pick) in changes {
        let change = match pick {
            None => Change::Remove,
            Some(p) => Change::Set(value(group, *second, p)),
        };
        match change {
            Change::Remove => row.remove(NAMES[name]),
            Change::Set(v) => row.insert(NAMES[name].to_owned(), v),
        };
    }
    row
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn the_fast_path_changes_no_result(
        g in 0..7usize,
        now in 0..3u8,
        finalize_zero in any::<bool>(),
        rows in prop::collection::vec(row_strategy(), 0..24),
    ) {
        let group = groups()[g].clone();
        let now = now_of(&group, now);
        let cfg = TimeConfig::default();
        let mut fast = GroupFold::new(group.clone(), now, &cfg).finalize_zero(finalize_zero);
        let mut general = GroupFold::new(group.clone(), now, &cfg).finalize_zero(finalize_zero);
        for spec in &rows {
            let row = build(&group, spec);
            let (a, b) = (fast.push(&row), general.push_without_fast_path(&row));
            prop_assert_eq!(&a, &b, "{:?}", row);
            if a.is_err() {
                break;
            }
        }
        let (a, b): (FoldOutcome, FoldOutcome) = (fast.finish(), general.finish());
        prop_assert_eq!(a, b);
    }
}

#[test]
fn conforming_rows_take_the_fast_path_and_agree() {
    // A whole conforming group of each kind, folded both ways: equal outcomes.
    for group in groups() {
        for choice in 0..3 {
            let now = now_of(&group, choice);
            let cfg = TimeConfig::default();
            let mut fast = GroupFold::new(group.clone(), now, &cfg);
            let mut general = GroupFold::new(group.clone(), now, &cfg);
            for s in (0..3600).step_by(7) {
                let row = conforming_row(&group, s, u64::from(s % 13), None);
                assert_eq!(fast.push(&row), general.push_without_fast_path(&row));
            }
            assert_eq!(fast.finish(), general.finish(), "{group:?} {choice}");
        }
    }
}

/// The attributes the fold reads of a row, NULL as absent, `meteringPending` by presence only.
fn read_by_the_fold(row: &RawUsageRow) -> [Option<&AttrValue>; 7] {
    let v = RowView::of(row);
    [
        v.license_arn,
        v.sort_key,
        v.account,
        v.customer_identifier,
        v.dimension,
        v.quantity,
        v.allocations,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Rows as a store hands them (compacted where they conform) fold exactly as the rows
    /// themselves on the general path; a compact row stands for a row the fold cannot tell
    /// from the original.
    #[test]
    fn compact_rows_change_no_result(
        g in 0..7usize,
        now in 0..3u8,
        finalize_zero in any::<bool>(),
        rows in prop::collection::vec(row_strategy(), 0..24),
    ) {
        let group = groups()[g].clone();
        let now = now_of(&group, now);
        let cfg = TimeConfig::default();
        let shape = RowShape::of(&group);
        let mut compact = GroupFold::new(group.clone(), now, &cfg).finalize_zero(finalize_zero);
        let mut general = GroupFold::new(group.clone(), now, &cfg).finalize_zero(finalize_zero);
        for spec in &rows {
            let row = build(&group, spec);
            let handed = RowShape::usage_row(shape.as_ref(), row.clone());
            if let UsageRow::Compact(c) = &handed {
                let rebuilt = c.to_raw(&group);
                prop_assert_eq!(read_by_the_fold(&rebuilt), read_by_the_fold(&row));
                prop_assert!(RowView::of(&row).pending.is_some());
                prop_assert!(RowView::of(&rebuilt).pending.is_some());
            }
            let (a, b) = (compact.push_row(&handed), general.push_without_fast_path(&row));
            prop_assert_eq!(&a, &b, "{:?}", row);
            if a.is_err() {
                break;
            }
        }
        let (a, b): (FoldOutcome, FoldOutcome) = (compact.finish(), general.finish());
        prop_assert_eq!(a, b);
    }
}

#[test]
fn conforming_rows_are_compacted_and_agree() {
    // A whole conforming group of each kind, handed compacted where the shape allows: equal
    // outcomes, and the rows of every group with a shape are compacted.
    for group in groups() {
        let shape = RowShape::of(&group);
        for choice in 0..3 {
            let now = now_of(&group, choice);
            let cfg = TimeConfig::default();
            let mut compact = GroupFold::new(group.clone(), now, &cfg);
            let mut general = GroupFold::new(group.clone(), now, &cfg);
            for s in (0..3600).step_by(7) {
                let mut row = conforming_row(&group, s, u64::from(s % 13), None);
                if group.license_arn == "prod0code" {
                    // A legacy row names its customer by `customerIdentifier` instead.
                    let account = row.remove(attrs::CUSTOMER_AWS_ACCOUNT_ID).unwrap();
                    row.insert(attrs::CUSTOMER_IDENTIFIER.to_owned(), account);
                }
                let handed = RowShape::usage_row(shape.as_ref(), row.clone());
                assert_eq!(
                    matches!(handed, UsageRow::Compact(_)),
                    shape.is_some(),
                    "{group:?}"
                );
                assert_eq!(
                    compact.push_row(&handed),
                    general.push_without_fast_path(&row)
                );
            }
            assert_eq!(compact.finish(), general.finish(), "{group:?} {choice}");
        }
    }
}
