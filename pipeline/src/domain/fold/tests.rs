//! Unit tests of the group fold; the property tests are in `pipeline/tests/integration/domain_fold.rs`.

use chrono::{DateTime, TimeZone, Utc};

use super::allocations::{decode_tag_set, encode_tag_set};
use super::*;
use awsmp_contract::DomainError;
use awsmp_contract::attrs;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::limits::marketplace::{MAX_ALLOCATIONS_PER_RECORD, MAX_USAGE_QUANTITY};
use awsmp_contract::row::{Allocation, Tag, conforming_row};
use awsmp_contract::status::RejectReason;
use awsmp_contract::time::TimeConfig;

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const ACCOUNT: &str = "210987654321";

fn group() -> GroupKey {
    GroupKey::new(LICENSE, ACCOUNT, "api", "2026-11-30T11".parse().unwrap())
}
fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap()
}
fn fold() -> GroupFold {
    GroupFold::new(group(), now(), &TimeConfig::default())
}
fn row(second: u32, q: u64) -> RawUsageRow {
    conforming_row(&group(), second, q, None)
}
fn alloc(q: u64, tags: &[(&str, &str)]) -> Allocation {
    Allocation {
        quantity: q,
        tags: tags.iter().map(|(k, v)| Tag::new(*k, *v)).collect(),
    }
}
fn vmt_row(second: u32, allocs: &[Allocation]) -> RawUsageRow {
    let q = allocs.iter().map(|a| a.quantity).sum();
    conforming_row(&group(), second, q, Some(allocs))
}
fn reject_reason(rows: &[RawUsageRow]) -> RejectReason {
    let mut f = fold();
    for r in rows {
        f.push(r).unwrap();
    }
    match f.finish() {
        FoldOutcome::Rejected(r) => r.reason,
        other => panic!("expected rejection, got {other:?}"),
    }
}
fn set(r: &mut RawUsageRow, name: &str, v: AttrValue) {
    r.insert(name.to_owned(), v);
}

#[test]
fn tag_set_keys_are_unambiguous_and_reversible() {
    let mut a = Vec::new();
    let mut b = Vec::new();
    encode_tag_set(&[("a", "bc")], &mut a);
    encode_tag_set(&[("ab", "c")], &mut b);
    assert_ne!(a, b);
    encode_tag_set(&[("k", "v"), ("k2", "")], &mut a);
    assert_eq!(
        decode_tag_set(&a),
        vec![Tag::new("k", "v"), Tag::new("k2", "")]
    );
    encode_tag_set(&[], &mut a);
    assert!(decode_tag_set(&a).is_empty());
}

#[test]
fn second_set_round_trips() {
    let mut s = SecondSet::new();
    for x in [0, 1, 63, 64, 1799, 3599] {
        assert!(s.insert(x));
    }
    assert!(!s.insert(64));
    assert_eq!(s.len(), 6);
    let bytes = s.to_bytes();
    assert_eq!(bytes.len(), SECOND_SET_BYTES);
    assert_eq!(bytes[0], 0b11);
    assert_eq!(bytes[449], 0b1000_0000);
    let back = SecondSet::from_bytes(&bytes).unwrap();
    assert_eq!(back, s);
    assert_eq!(
        back.iter().collect::<Vec<_>>(),
        vec![0, 1, 63, 64, 1799, 3599]
    );
    assert!(!back.contains(3600));
    assert!(SecondSet::from_bytes(&bytes[1..]).is_err());
}

#[test]
fn valid_group_sums_and_lists_its_keys() {
    let mut f = fold();
    f.push(&row(5, 3)).unwrap();
    f.push(&row(3599, 4)).unwrap();
    let FoldOutcome::Valid(rec) = f.finish() else {
        panic!()
    };
    assert_eq!(
        (rec.quantity, rec.row_count, rec.allocations.clone()),
        (7, 2, None)
    );
    let keys: Vec<_> = rec.raw_row_keys().map(|k| k.sort_key).collect();
    assert_eq!(
        keys,
        vec![
            format!("{ACCOUNT}#api#2026-11-30T11:00:05"),
            format!("{ACCOUNT}#api#2026-11-30T11:59:59")
        ]
    );
}

#[test]
fn ignores_not_pending_and_foreign_rows() {
    let mut f = fold();
    let mut done = row(1, 5);
    done.remove(attrs::METERING_PENDING);
    assert_eq!(f.push(&done).unwrap(), Pushed::NotPending);
    let mut null_pending = row(2, 5);
    set(&mut null_pending, attrs::METERING_PENDING, AttrValue::Null);
    assert_eq!(f.push(&null_pending).unwrap(), Pushed::NotPending);
    let other_hour = conforming_row(
        &GroupKey {
            hour: "2026-11-30T10".parse().unwrap(),
            ..group()
        },
        1,
        5,
        None,
    );
    assert_eq!(f.push(&other_hour).unwrap(), Pushed::Foreign);
    // A dimension that itself contains "#<this hour>" matches the prefix but is not ours.
    let sneaky = GroupKey {
        dimension: "api#2026-11-30T11:00:00".into(),
        ..group()
    };
    assert_eq!(
        f.push(&conforming_row(&sneaky, 1, 5, None)).unwrap(),
        Pushed::Foreign
    );
    assert_eq!(f.finish(), FoldOutcome::Empty);
}

#[test]
fn duplicate_rows_are_refused_not_counted() {
    let mut f = fold();
    f.push(&row(1, 5)).unwrap();
    assert!(matches!(
        f.push(&row(1, 5)),
        Err(DomainError::DuplicateRow(_))
    ));
}

#[test]
fn zero_groups_defer_until_the_edge() {
    let mut f = fold();
    f.push(&row(1, 0)).unwrap();
    assert_eq!(f.finish(), FoldOutcome::DeferredZero { row_count: 1 });
    let mid_month = GroupKey {
        hour: "2026-11-20T11".parse().unwrap(),
        ..group()
    };
    let edge_now = Utc.with_ymd_and_hms(2026, 11, 21, 10, 0, 0).unwrap();
    let mut f = GroupFold::new(mid_month.clone(), edge_now, &TimeConfig::default());
    f.push(&conforming_row(&mid_month, 1, 0, None)).unwrap();
    let FoldOutcome::Valid(rec) = f.finish() else {
        panic!()
    };
    assert_eq!(rec.quantity, 0);
    let mut forced = fold().finalize_zero(true);
    forced.push(&row(1, 0)).unwrap();
    assert!(matches!(forced.finish(), FoldOutcome::Valid(_)));
}

#[test]
fn each_key_and_quantity_reason_on_its_own() {
    use RejectReason::*;
    let cases: Vec<(RejectReason, RawUsageRow)> = vec![
        (MalformedSortKey, {
            let mut r = row(1, 1);
            set(
                &mut r,
                attrs::USAGE_SORT_KEY,
                AttrValue::s(format!("{ACCOUNT}#api")),
            );
            r
        }),
        (SortKeyMismatch, {
            let mut r = row(1, 1);
            set(&mut r, attrs::DIMENSION, AttrValue::s("other"));
            r
        }),
        (SortKeyMismatch, {
            let mut r = row(1, 1);
            set(
                &mut r,
                attrs::CUSTOMER_AWS_ACCOUNT_ID,
                AttrValue::n(210987654321),
            );
            r
        }),
        (MalformedTimestamp, {
            let mut r = row(1, 1);
            set(
                &mut r,
                attrs::USAGE_SORT_KEY,
                AttrValue::s(format!("{ACCOUNT}#api#2026-11-30T11:00:01.000Z")),
            );
            r
        }),
        (MalformedTimestamp, {
            let mut r = row(1, 1);
            set(
                &mut r,
                attrs::USAGE_SORT_KEY,
                AttrValue::s(format!("{ACCOUNT}#api#2026-11-30T11")),
            );
            r
        }),
        (NonNumericQuantity, {
            let mut r = row(1, 1);
            set(&mut r, attrs::QUANTITY, AttrValue::s("1"));
            r
        }),
        (NonNumericQuantity, {
            let mut r = row(1, 1);
            r.remove(attrs::QUANTITY);
            r
        }),
        (NonIntegerQuantity, {
            let mut r = row(1, 1);
            set(&mut r, attrs::QUANTITY, AttrValue::N("-1.5".into()));
            r
        }),
        (NegativeQuantity, {
            let mut r = row(1, 1);
            set(&mut r, attrs::QUANTITY, AttrValue::N("-1".into()));
            r
        }),
        (QuantityOverflow, row(1, MAX_USAGE_QUANTITY + 1)),
    ];
    for (expected, r) in cases {
        assert_eq!(reject_reason(std::slice::from_ref(&r)), expected, "{r:?}");
    }
}

#[test]
fn each_allocation_and_identity_reason_on_its_own() {
    use RejectReason::*;
    let cases: Vec<(RejectReason, RawUsageRow)> = vec![
        (MalformedAllocations, {
            let mut r = row(1, 1);
            set(&mut r, attrs::USAGE_ALLOCATIONS, AttrValue::s("x"));
            r
        }),
        (MalformedAllocations, {
            let mut r = row(1, 1);
            set(&mut r, attrs::USAGE_ALLOCATIONS, AttrValue::L(vec![]));
            r
        }),
        (NegativeOrNonIntegerAllocation, {
            let mut r = vmt_row(1, &[alloc(1, &[("k", "v")])]);
            let AttrValue::L(l) = r.get_mut(attrs::USAGE_ALLOCATIONS).unwrap() else {
                panic!()
            };
            let AttrValue::M(m) = &mut l[0] else { panic!() };
            m.insert(
                attrs::ALLOCATED_USAGE_QUANTITY.into(),
                AttrValue::N("0.5".into()),
            );
            r
        }),
        (
            TooManyTags,
            vmt_row(
                1,
                &[alloc(
                    1,
                    &[
                        ("a", "1"),
                        ("b", "1"),
                        ("c", "1"),
                        ("d", "1"),
                        ("e", "1"),
                        ("f", "1"),
                    ],
                )],
            ),
        ),
        (MissingTagKeyOrValue, vmt_row(1, &[alloc(1, &[("a", "")])])),
        (
            TagKeyOrValueTooLong,
            vmt_row(1, &[alloc(1, &[(&"k".repeat(101), "v")])]),
        ),
        (
            TagKeyOrValueTooLong,
            vmt_row(1, &[alloc(1, &[("k", &"v".repeat(257))])]),
        ),
        (
            InvalidTagCharacters,
            vmt_row(1, &[alloc(1, &[("k", "a|b")])]),
        ),
        (
            InvalidTagCharacters,
            vmt_row(1, &[alloc(1, &[("clé", "v")])]),
        ),
        (MissingDimension, {
            let mut r = row(1, 1);
            r.remove(attrs::DIMENSION);
            r
        }),
        (MissingCustomerAWSAccountId, {
            let mut r = row(1, 1);
            r.remove(attrs::CUSTOMER_AWS_ACCOUNT_ID);
            r
        }),
        (AllocationSumMismatch, {
            let mut r = vmt_row(1, &[alloc(2, &[("k", "v")])]);
            set(&mut r, attrs::QUANTITY, AttrValue::n(3));
            r
        }),
    ];
    for (expected, r) in cases {
        assert_eq!(reject_reason(std::slice::from_ref(&r)), expected, "{r:?}");
    }
}

#[test]
fn tags_at_the_documented_limits_pass_and_the_checks_rank_after_the_empty_tag() {
    use RejectReason::*;
    let edge = vmt_row(
        1,
        &[alloc(
            1,
            &[
                (&"k".repeat(100), &"v".repeat(256)),
                ("a b+-=._:/@", "Z9!#%"),
            ],
        )],
    );
    let mut f = fold();
    f.push(&edge).unwrap();
    let outcome = f.finish();
    assert!(
        matches!(outcome, FoldOutcome::Valid(_)),
        "{outcome:?}: 100/256 characters and the pattern's characters are accepted"
    );
    // An empty value outranks an overlong key, which outranks a bad character.
    let both = vmt_row(
        1,
        &[alloc(
            1,
            &[(&"k".repeat(101), "v"), ("x", ""), ("y", "a|b")],
        )],
    );
    assert_eq!(reject_reason(&[both]), MissingTagKeyOrValue);
    let long_and_bad = vmt_row(1, &[alloc(1, &[("y", "a|b"), (&"k".repeat(101), "v")])]);
    assert_eq!(reject_reason(&[long_and_bad]), TagKeyOrValueTooLong);
}

fn run(g: GroupKey, now: DateTime<Utc>, rows: Vec<RawUsageRow>) -> RejectReason {
    let mut f = GroupFold::new(g, now, &TimeConfig::default());
    for r in &rows {
        f.push(r).unwrap();
    }
    match f.finish() {
        FoldOutcome::Rejected(r) => r.reason,
        other => panic!("{other:?}"),
    }
}

#[test]
fn group_specific_reasons() {
    use RejectReason::*;
    let empty_dim = GroupKey {
        dimension: String::new(),
        ..group()
    };
    assert_eq!(
        run(
            empty_dim.clone(),
            now(),
            vec![conforming_row(&empty_dim, 1, 1, None)]
        ),
        MissingDimension
    );
    let current = GroupKey {
        hour: "2026-11-30T12".parse().unwrap(),
        ..group()
    };
    assert_eq!(
        run(
            current.clone(),
            now(),
            vec![conforming_row(&current, 1800, 1, None)]
        ),
        TimestampInFuture
    );
    let old = GroupKey {
        hour: "2026-11-29T12".parse().unwrap(),
        ..group()
    };
    assert_eq!(
        run(old.clone(), now(), vec![conforming_row(&old, 1, 1, None)]),
        TimestampOutOfWindow
    );
    let bad_arn = GroupKey {
        license_arn: "arn:aws:license-manager::1:license:l-x".into(),
        ..group()
    };
    assert_eq!(
        run(
            bad_arn.clone(),
            now(),
            vec![conforming_row(&bad_arn, 1, 1, None)]
        ),
        InvalidLicenseArn
    );
    let not_a_code = GroupKey {
        license_arn: "Not A Code".into(),
        ..group()
    };
    assert_eq!(
        run(
            not_a_code.clone(),
            now(),
            vec![conforming_row(&not_a_code, 1, 1, None)]
        ),
        InvalidLicenseArn
    );
}

#[test]
fn legacy_rows_need_their_customer_identifier() {
    use RejectReason::*;
    let cfg = TimeConfig::default();
    let legacy = GroupKey::new("prodcode1", "cust-1", "api", group().hour);
    let mut legacy_row = conforming_row(&legacy, 1, 1, None);
    legacy_row.remove(attrs::CUSTOMER_AWS_ACCOUNT_ID);
    assert_eq!(
        run(legacy.clone(), now(), vec![legacy_row.clone()]),
        MissingLegacyIdentifier
    );
    legacy_row.insert(attrs::CUSTOMER_IDENTIFIER.into(), AttrValue::s("cust-2"));
    assert_eq!(
        run(legacy.clone(), now(), vec![legacy_row.clone()]),
        SortKeyMismatch
    );
    legacy_row.insert(attrs::CUSTOMER_IDENTIFIER.into(), AttrValue::s("cust-1"));
    let mut f = GroupFold::new(legacy.clone(), now(), &cfg);
    f.push(&legacy_row).unwrap();
    let FoldOutcome::Valid(rec) = f.finish() else {
        panic!()
    };
    assert!(!rec.identity().is_concurrent_agreements());
}

#[test]
fn group_level_vmt_reasons() {
    use RejectReason::*;
    assert_eq!(
        reject_reason(&[vmt_row(1, &[alloc(1, &[("k", "v")])]), row(2, 1)]),
        MixedAllocatedAndUnallocated
    );
    // Zero rows are ignored for the mixed check, and their allocations are not billed.
    let mut f = fold();
    f.push(&vmt_row(1, &[alloc(0, &[("z", "z")])])).unwrap();
    f.push(&row(2, 4)).unwrap();
    let FoldOutcome::Valid(rec) = f.finish() else {
        panic!()
    };
    assert_eq!((rec.quantity, rec.allocations), (4, None));
    let many: Vec<_> = (0..MAX_ALLOCATIONS_PER_RECORD as u32 + 1)
        .map(|i| vmt_row(i, &[alloc(1, &[("k", &i.to_string())])]))
        .collect();
    assert_eq!(reject_reason(&many), TooManyAllocations);
    assert!(matches!(
        {
            let mut f = fold();
            for r in &many[..MAX_ALLOCATIONS_PER_RECORD] {
                f.push(r).unwrap();
            }
            f.finish()
        },
        FoldOutcome::Valid(_)
    ));
}

#[test]
fn vmt_merge_is_tag_order_insensitive_and_sorted() {
    let mut f = fold();
    f.push(&vmt_row(
        1,
        &[alloc(2, &[("b", "2"), ("a", "1")]), alloc(1, &[])],
    ))
    .unwrap();
    f.push(&vmt_row(
        2,
        &[alloc(3, &[("a", "1"), ("b", "2")]), alloc(4, &[("c", "3")])],
    ))
    .unwrap();
    let FoldOutcome::Valid(rec) = f.finish() else {
        panic!()
    };
    assert_eq!(rec.quantity, 10);
    assert_eq!(
        rec.allocations.unwrap(),
        vec![
            alloc(1, &[]),
            alloc(5, &[("a", "1"), ("b", "2")]),
            alloc(4, &[("c", "3")])
        ]
    );
}

#[test]
fn earliest_reason_wins_across_rows_and_names_its_row() {
    let mut neg = row(7, 1);
    set(&mut neg, attrs::QUANTITY, AttrValue::N("-1".into()));
    let mut bad_ts = row(9, 1);
    set(
        &mut bad_ts,
        attrs::USAGE_SORT_KEY,
        AttrValue::s(format!("{ACCOUNT}#api#2026-11-30T11:00:09Z")),
    );
    for rows in [
        vec![neg.clone(), bad_ts.clone(), row(3, 1)],
        vec![row(3, 1), bad_ts.clone(), neg.clone()],
    ] {
        let mut f = fold();
        for r in &rows {
            f.push(r).unwrap();
        }
        let FoldOutcome::Rejected(rej) = f.finish() else {
            panic!()
        };
        assert_eq!(rej.reason, RejectReason::MalformedTimestamp);
        assert_eq!(
            rej.row_key.unwrap().sort_key,
            format!("{ACCOUNT}#api#2026-11-30T11:00:09Z")
        );
        let mut keys: Vec<_> = rej.rows.row_keys().map(|k| k.sort_key).collect();
        keys.sort();
        assert_eq!(keys.len(), 3);
        assert!(keys.contains(&format!("{ACCOUNT}#api#2026-11-30T11:00:09Z")));
    }
}

#[test]
fn revisit_tells_lost_cleanup_from_late_usage() {
    let mut stored = SecondSet::new();
    stored.insert(5);
    assert!(matches!(
        classify_revisit(&group(), &stored, &row(5, 3)),
        RevisitRow::AlreadyAggregated(_)
    ));
    let RevisitRow::Late(late) = classify_revisit(&group(), &stored, &row(6, 3)) else {
        panic!()
    };
    assert_eq!((late.second, late.quantity), (Some(6), Some(3)));
    let mut junk = row(7, 1);
    set(&mut junk, attrs::QUANTITY, AttrValue::s("x"));
    let RevisitRow::Late(late) = classify_revisit(&group(), &stored, &junk) else {
        panic!()
    };
    assert_eq!(late.quantity, None);
    let mut done = row(8, 1);
    done.remove(attrs::METERING_PENDING);
    assert_eq!(
        classify_revisit(&group(), &stored, &done),
        RevisitRow::NotPending
    );
}

#[test]
fn a_group_above_the_api_maximum_bills_the_maximum() {
    let mut f = fold();
    f.push(&row(0, MAX_USAGE_QUANTITY)).unwrap();
    f.push(&row(1, 5)).unwrap();
    let FoldOutcome::Valid(rec) = f.finish() else {
        panic!("an overflowing group bills what the API allows")
    };
    assert_eq!(rec.quantity, MAX_USAGE_QUANTITY);
    assert_eq!(
        rec.overflow,
        Some(Overflow {
            quantity: 5,
            allocations: None
        })
    );
    assert_eq!(
        rec.raw_row_quantities().sum::<u64>(),
        MAX_USAGE_QUANTITY + 5
    );
}

#[test]
fn an_overflowing_allocated_group_splits_the_straddling_tag_set() {
    let mut f = fold();
    let (a, b) = (&[("team", "a")][..], &[("team", "b")][..]);
    f.push(&vmt_row(0, &[alloc(MAX_USAGE_QUANTITY - 2, a)]))
        .unwrap();
    f.push(&vmt_row(1, &[alloc(3, a), alloc(4, b)])).unwrap();
    let FoldOutcome::Valid(rec) = f.finish() else {
        panic!("valid")
    };
    assert_eq!(rec.quantity, MAX_USAGE_QUANTITY);
    assert_eq!(rec.allocations, Some(vec![alloc(MAX_USAGE_QUANTITY, a)]));
    let over = rec.overflow.unwrap();
    assert_eq!(over.quantity, 5);
    assert_eq!(over.allocations, Some(vec![alloc(1, a), alloc(4, b)]));
}
