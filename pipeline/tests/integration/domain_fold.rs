//! Property tests of the group fold: exact sums, order independence, VMT merge invariants,
//! first-reason-wins over arbitrary corruptions, and junk rows that never panic or lose a row.

use std::collections::{BTreeMap, BTreeSet};

use awsmp_contract::DomainError;
use awsmp_contract::attrs;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::row::{Allocation, AttrValue, RawUsageRow, Tag, conforming_row};
use awsmp_contract::status::RejectReason;
use awsmp_contract::time::TimeConfig;
use awsmp_pipeline::domain::fold::{
    FoldOutcome, GroupFold, Pushed, RevisitRow, classify_revisit, split_at_api_maximum,
};
use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const ACCOUNT: &str = "210987654321";

fn group() -> GroupKey {
    GroupKey::new(LICENSE, ACCOUNT, "api", "2026-11-30T11".parse().unwrap())
}
fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap()
}
fn fold_all<'a>(rows: impl IntoIterator<Item = &'a RawUsageRow>) -> FoldOutcome {
    let mut f = GroupFold::new(group(), now(), &TimeConfig::default()).finalize_zero(true);
    for r in rows {
        f.push(r).unwrap();
    }
    f.finish()
}

/// Distinct seconds with a quantity each.
fn plain_rows() -> impl Strategy<Value = Vec<(u32, u64)>> {
    prop::collection::btree_map(0..3600u32, 0..1_000_000u64, 1..200)
        .prop_map(|m| m.into_iter().collect())
}

fn tag_pool() -> Vec<Tag> {
    [
        "team=a", "team=b", "env=prod", "env=dev", "cc=1", "cc=2", "x=y",
    ]
    .iter()
    .map(|s| {
        let (k, v) = s.split_once('=').unwrap();
        Tag::new(k, v)
    })
    .collect()
}

/// One row's allocations: 1–4 allocations, each a subset of the tag pool (shuffled order).
fn allocations() -> impl Strategy<Value = Vec<Allocation>> {
    prop::collection::vec(
        (
            prop::collection::btree_set(0..7usize, 0..=4),
            0..1000u64,
            any::<bool>(),
        ),
        1..4,
    )
    .prop_map(|allocs| {
        let pool = tag_pool();
        allocs
            .into_iter()
            .map(|(idx, q, reverse)| {
                // One tag per key at most, as the API expects.
                let mut by_key: BTreeMap<String, Tag> = BTreeMap::new();
                for i in idx {
                    by_key
                        .entry(pool[i].key.clone())
                        .or_insert_with(|| pool[i].clone());
                }
                let mut tags: Vec<Tag> = by_key.into_values().collect();
                if reverse {
                    tags.reverse();
                }
                Allocation { quantity: q, tags }
            })
            .collect()
    })
}

fn vmt_rows() -> impl Strategy<Value = Vec<(u32, Vec<Allocation>)>> {
    prop::collection::btree_map(0..3600u32, allocations(), 1..80)
        .prop_map(|m| m.into_iter().collect())
}

fn shuffled<T: Clone>(v: &[T], seed: u64) -> Vec<T> {
    let mut out = v.to_vec();
    let mut s = seed | 1;
    for i in (1..out.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out.swap(i, (s % (i as u64 + 1)) as usize);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn valid_group_sum_is_the_exact_row_sum_in_any_order(rows in plain_rows(), seed in any::<u64>()) {
        let raw: Vec<RawUsageRow> = rows.iter().map(|(s, q)| conforming_row(&group(), *s, *q, None)).collect();
        let outcome = fold_all(&raw);
        let FoldOutcome::Valid(rec) = &outcome else { panic!("{outcome:?}") };
        prop_assert_eq!(rec.quantity, rows.iter().map(|(_, q)| q).sum::<u64>());
        prop_assert_eq!(rec.row_count as usize, rows.len());
        prop_assert_eq!(rec.seconds.iter().collect::<Vec<_>>(), rows.iter().map(|(s, _)| *s).collect::<Vec<_>>());
        prop_assert_eq!(rec.raw_row_keys().count(), rows.len());
        prop_assert_eq!(fold_all(&shuffled(&raw, seed)), outcome);
    }

    #[test]
    fn vmt_merge_keeps_every_unit_on_its_tag_set(rows in vmt_rows(), seed in any::<u64>()) {
        let raw: Vec<RawUsageRow> = rows.iter().map(|(s, a)| conforming_row(&group(), *s, a.iter().map(|x| x.quantity).sum(), Some(a))).collect();
        let outcome = fold_all(&raw);
        prop_assert_eq!(fold_all(&shuffled(&raw, seed)), outcome.clone());
        let total: u64 = rows.iter().flat_map(|(_, a)| a).map(|a| a.quantity).sum();
        let nonzero_rows = rows.iter().any(|(_, a)| a.iter().any(|x| x.quantity > 0));
        let FoldOutcome::Valid(rec) = outcome else { panic!("{outcome:?}") };
        prop_assert_eq!(rec.quantity, total);
        if !nonzero_rows {
            prop_assert_eq!(rec.allocations, None);
            return Ok(());
        }
        let merged = rec.allocations.unwrap();
        // Model: sum per order-insensitive tag set.
        let mut model: BTreeMap<Vec<Tag>, u64> = BTreeMap::new();
        for a in rows.iter().flat_map(|(_, a)| a) {
            let mut tags = a.tags.clone();
            tags.sort();
            *model.entry(tags).or_default() += a.quantity;
        }
        prop_assert_eq!(merged.iter().map(|a| a.quantity).sum::<u64>(), total);
        prop_assert!(merged.windows(2).all(|w| w[0].tags < w[1].tags), "sorted and distinct");
        prop_assert!(merged.iter().all(|a| a.tags.windows(2).all(|w| w[0] <= w[1])));
        let got: BTreeMap<Vec<Tag>, u64> = merged.into_iter().map(|a| (a.tags, a.quantity)).collect();
        prop_assert_eq!(got, model);
    }

    #[test]
    fn totals_beyond_the_api_maximum_bill_the_maximum_and_keep_the_rest(extra in 1..1000u64, split in 2..50u64) {
        let per = (MAX_USAGE_QUANTITY + extra) / split;
        let mut rows: Vec<RawUsageRow> = (0..split as u32).map(|s| conforming_row(&group(), s, per, None)).collect();
        let rest = MAX_USAGE_QUANTITY + extra - per * split;
        rows.push(conforming_row(&group(), 3000, rest, None));
        let FoldOutcome::Valid(rec) = fold_all(&rows) else { panic!() };
        prop_assert_eq!(rec.quantity, MAX_USAGE_QUANTITY);
        prop_assert_eq!(rec.overflow.map(|o| o.quantity), Some(extra));
    }

    #[test]
    fn an_allocated_split_loses_and_doubles_nothing(
        quantities in prop::collection::vec(0..=MAX_USAGE_QUANTITY, 1..8),
    ) {
        let allocs: Vec<Allocation> = quantities.iter().enumerate().map(|(i, &q)| Allocation {
            quantity: q,
            tags: vec![Tag::new("k", format!("v{i}"))],
        }).collect();
        let total: u64 = quantities.iter().sum();
        let s = split_at_api_maximum(total, Some(allocs.clone()));
        let billed = s.allocations.unwrap();
        prop_assert_eq!(s.billed, total.min(MAX_USAGE_QUANTITY));
        prop_assert_eq!(billed.iter().map(|a| a.quantity).sum::<u64>(), s.billed);
        let (over_q, over) = s.overflow.map_or((0, vec![]), |o| (o.quantity, o.allocations.unwrap()));
        prop_assert_eq!(over.iter().map(|a| a.quantity).sum::<u64>(), over_q);
        prop_assert_eq!(s.billed + over_q, total);
        let mut per_tags: BTreeMap<Vec<Tag>, u64> = BTreeMap::new();
        for a in billed.iter().chain(&over) {
            *per_tags.entry(a.tags.clone()).or_default() += a.quantity;
        }
        let model: BTreeMap<Vec<Tag>, u64> = allocs.into_iter().map(|a| (a.tags, a.quantity)).collect();
        prop_assert_eq!(per_tags, model);
    }
}

/// A way to break a row, and the reason it must produce.
#[derive(Debug, Clone, Copy)]
enum Corruption {
    ShortSortKey,
    DimensionMismatch,
    MillisecondTimestamp,
    StringQuantity,
    FractionalQuantity,
    NegativeQuantity,
    HugeQuantity,
    AllocationsNotAList,
    NegativeAllocation,
    SixTags,
    EmptyTagValue,
    NoDimension,
    NoAccount,
}

impl Corruption {
    const ALL: [Corruption; 13] = [
        Corruption::ShortSortKey,
        Corruption::DimensionMismatch,
        Corruption::MillisecondTimestamp,
        Corruption::StringQuantity,
        Corruption::FractionalQuantity,
        Corruption::NegativeQuantity,
        Corruption::HugeQuantity,
        Corruption::AllocationsNotAList,
        Corruption::NegativeAllocation,
        Corruption::SixTags,
        Corruption::EmptyTagValue,
        Corruption::NoDimension,
        Corruption::NoAccount,
    ];

    fn reason(self) -> RejectReason {
        use RejectReason::*;
        match self {
            Corruption::ShortSortKey => MalformedSortKey,
            Corruption::DimensionMismatch => SortKeyMismatch,
            Corruption::MillisecondTimestamp => MalformedTimestamp,
            Corruption::StringQuantity => NonNumericQuantity,
            Corruption::FractionalQuantity => NonIntegerQuantity,
            Corruption::NegativeQuantity => NegativeQuantity,
            Corruption::HugeQuantity => QuantityOverflow,
            Corruption::AllocationsNotAList => MalformedAllocations,
            Corruption::NegativeAllocation => NegativeOrNonIntegerAllocation,
            Corruption::SixTags => TooManyTags,
            Corruption::EmptyTagValue => MissingTagKeyOrValue,
            Corruption::NoDimension => MissingDimension,
            Corruption::NoAccount => MissingCustomerAWSAccountId,
        }
    }

    fn apply(self, row: &mut RawUsageRow, second: u32) {
        let set = |row: &mut RawUsageRow, k: &str, v: AttrValue| {
            row.insert(k.to_owned(), v);
        };
        let tag = |k: &str, v: &str| {
            AttrValue::M(BTreeMap::from([
                (attrs::TAG_KEY.to_owned(), AttrValue::s(k)),
                (attrs::TAG_VALUE.to_owned(), AttrValue::s(v)),
            ]))
        };
        let alloc = |q: AttrValue, tags: Vec<AttrValue>| {
            AttrValue::L(vec![AttrValue::M(BTreeMap::from([
                (attrs::ALLOCATED_USAGE_QUANTITY.to_owned(), q),
                (attrs::TAGS.to_owned(), AttrValue::L(tags)),
            ]))])
        };
        match self {
            Corruption::ShortSortKey => set(
                row,
                attrs::USAGE_SORT_KEY,
                AttrValue::s(format!("{ACCOUNT}#api{second}")),
            ),
            Corruption::DimensionMismatch => set(row, attrs::DIMENSION, AttrValue::s("API")),
            Corruption::MillisecondTimestamp => {
                let sk = format!("{}.000", group().usage_sort_key_at(second));
                set(row, attrs::USAGE_SORT_KEY, AttrValue::s(sk));
            }
            Corruption::StringQuantity => set(row, attrs::QUANTITY, AttrValue::s("5")),
            Corruption::FractionalQuantity => set(row, attrs::QUANTITY, AttrValue::N("2.5".into())),
            Corruption::NegativeQuantity => set(row, attrs::QUANTITY, AttrValue::N("-2".into())),
            Corruption::HugeQuantity => {
                set(row, attrs::QUANTITY, AttrValue::N("2147483648".into()))
            }
            Corruption::AllocationsNotAList => {
                set(row, attrs::USAGE_ALLOCATIONS, AttrValue::s("team=a"))
            }
            Corruption::NegativeAllocation => set(
                row,
                attrs::USAGE_ALLOCATIONS,
                alloc(AttrValue::N("-1".into()), vec![tag("k", "v")]),
            ),
            Corruption::SixTags => {
                let q = row[attrs::QUANTITY].clone();
                set(
                    row,
                    attrs::USAGE_ALLOCATIONS,
                    alloc(q, (0..6).map(|i| tag(&format!("k{i}"), "v")).collect()),
                );
            }
            Corruption::EmptyTagValue => {
                let q = row[attrs::QUANTITY].clone();
                set(row, attrs::USAGE_ALLOCATIONS, alloc(q, vec![tag("k", "")]));
            }
            Corruption::NoDimension => {
                row.remove(attrs::DIMENSION);
            }
            Corruption::NoAccount => {
                row.remove(attrs::CUSTOMER_AWS_ACCOUNT_ID);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any mix of broken rows: the group is rejected with the earliest-ranked reason among
    /// them, it names a row that carries that reason, lists every row for stamping, and the
    /// verdict does not depend on row order.
    #[test]
    fn first_reason_wins_over_any_mix_of_broken_rows(
        rows in plain_rows(),
        breaks in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(Corruption::ALL.to_vec())), 1..6),
        seed in any::<u64>(),
    ) {
        let mut raw: Vec<RawUsageRow> = rows.iter().map(|(s, q)| conforming_row(&group(), *s, (*q).max(1), None)).collect();
        let mut broken: BTreeMap<usize, Corruption> = BTreeMap::new();
        for (idx, c) in breaks {
            broken.entry(idx.index(raw.len())).or_insert(c);
        }
        for (&i, &c) in &broken {
            c.apply(&mut raw[i], rows[i].0);
        }
        let expected = broken.values().map(|c| c.reason()).min().unwrap();
        let outcome = fold_all(&raw);
        let FoldOutcome::Rejected(rej) = &outcome else { panic!("{outcome:?}") };
        prop_assert_eq!(rej.reason, expected);
        let named = rej.row_key.as_ref().expect("row-level reason names its row");
        let culprits: BTreeSet<String> = broken
            .iter()
            .filter(|(_, c)| c.reason() == expected)
            .map(|(&i, _)| raw[i][attrs::USAGE_SORT_KEY].as_s().unwrap().to_owned())
            .collect();
        prop_assert!(culprits.contains(&named.sort_key));
        prop_assert_eq!(rej.rows.len(), raw.len());
        let stamped: BTreeSet<String> = rej.rows.row_keys().map(|k| k.sort_key).collect();
        let all: BTreeSet<String> = raw.iter().map(|r| r[attrs::USAGE_SORT_KEY].as_s().unwrap().to_owned()).collect();
        prop_assert_eq!(stamped, all);
        prop_assert_eq!(fold_all(&shuffled(&raw, seed)), outcome);
    }

    /// Allocated and unallocated non-zero rows never mix; a row whose allocations miss its
    /// quantity is a sum mismatch.
    #[test]
    fn vmt_group_rules(rows in vmt_rows(), plain in 1..1000u64, delta in 1..5u64) {
        let mut raw: Vec<RawUsageRow> = rows.iter().map(|(s, a)| conforming_row(&group(), *s, a.iter().map(|x| x.quantity).sum(), Some(a))).collect();
        let allocated_nonzero = rows.iter().any(|(_, a)| a.iter().any(|x| x.quantity > 0));
        let free = (0..3600).find(|s| !rows.iter().any(|(r, _)| r == s)).unwrap();
        let mut with_plain = raw.clone();
        with_plain.push(conforming_row(&group(), free, plain, None));
        match fold_all(&with_plain) {
            FoldOutcome::Rejected(r) => {
                prop_assert!(allocated_nonzero);
                prop_assert_eq!(r.reason, RejectReason::MixedAllocatedAndUnallocated);
            }
            FoldOutcome::Valid(rec) => {
                prop_assert!(!allocated_nonzero);
                prop_assert_eq!(rec.allocations, None);
            }
            other => panic!("{other:?}"),
        }
        let q = raw[0][attrs::QUANTITY].as_n().unwrap().parse::<u64>().unwrap();
        raw[0].insert(attrs::QUANTITY.to_owned(), AttrValue::n(q + delta));
        let FoldOutcome::Rejected(r) = fold_all(&raw) else { panic!() };
        prop_assert_eq!(r.reason, RejectReason::AllocationSumMismatch);
    }
}

fn junk_value() -> impl Strategy<Value = AttrValue> {
    let leaf = prop_oneof![
        any::<String>().prop_map(AttrValue::S),
        "-?[0-9]{0,25}(\\.[0-9]{0,4})?([eE][-+]?[0-9]{1,3})?".prop_map(AttrValue::N),
        any::<bool>().prop_map(AttrValue::Bool),
        Just(AttrValue::Null),
        Just(AttrValue::Other),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(AttrValue::L),
            prop::collection::btree_map(
                prop::sample::select(vec!["AllocatedUsageQuantity", "Tags", "Key", "Value", "x"])
                    .prop_map(str::to_owned),
                inner,
                0..4
            )
            .prop_map(AttrValue::M),
        ]
    })
}

fn junk_row() -> impl Strategy<Value = RawUsageRow> {
    let names = vec![
        attrs::USAGE_SORT_KEY,
        attrs::CUSTOMER_AWS_ACCOUNT_ID,
        attrs::DIMENSION,
        attrs::QUANTITY,
        attrs::USAGE_ALLOCATIONS,
        attrs::METERING_PENDING,
        attrs::CUSTOMER_IDENTIFIER,
    ];
    (
        0..3600u32,
        0..1000u64,
        prop::collection::vec((prop::sample::select(names), junk_value()), 0..4),
    )
        .prop_map(|(second, q, changes)| {
            let mut row = conforming_row(&group(), second, q, None);
            for (name, v) in changes {
                row.insert(name.to_owned(), v);
            }
            row
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Junk never panics, every counted row is listed for stamping when the group is
    /// rejected, and a valid outcome only ever comes from rows that all conform.
    #[test]
    fn junk_rows_never_panic_or_vanish(rows in prop::collection::vec(junk_row(), 1..20)) {
        let mut f = GroupFold::new(group(), now(), &TimeConfig::default()).finalize_zero(true);
        let mut counted = BTreeSet::new();
        for r in &rows {
            match f.push(r) {
                Ok(Pushed::Counted) => {
                    counted.insert(r[attrs::USAGE_SORT_KEY].as_s().map(str::to_owned));
                }
                Ok(_) => {}
                Err(DomainError::DuplicateRow(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        match f.finish() {
            FoldOutcome::Rejected(rej) => {
                let stamped: BTreeSet<Option<String>> = rej.rows.row_keys().map(|k| Some(k.sort_key)).collect();
                let keyed: BTreeSet<Option<String>> = counted.iter().filter(|k| k.is_some()).cloned().collect();
                prop_assert_eq!(stamped, keyed);
            }
            FoldOutcome::Valid(rec) => prop_assert_eq!(rec.row_count as usize, counted.len()),
            FoldOutcome::Empty => prop_assert!(counted.is_empty()),
            FoldOutcome::DeferredZero { .. } => panic!("zero finalization was forced"),
        }
    }

    /// On a re-visit, a row is "already aggregated" exactly when its second is stored.
    #[test]
    fn revisit_splits_on_the_stored_seconds(stored in prop::collection::btree_set(0..3600u32, 0..100), probe in 0..3600u32, q in 0..100u64) {
        let rows: Vec<RawUsageRow> = stored.iter().map(|s| conforming_row(&group(), *s, 1, None)).collect();
        let FoldOutcome::Valid(rec) = fold_all(&rows) else {
            prop_assert!(stored.is_empty());
            return Ok(());
        };
        match classify_revisit(&group(), &rec.seconds, &conforming_row(&group(), probe, q, None)) {
            RevisitRow::AlreadyAggregated(k) => {
                prop_assert!(stored.contains(&probe));
                prop_assert_eq!(k.sort_key, group().usage_sort_key_at(probe));
            }
            RevisitRow::Late(late) => {
                prop_assert!(!stored.contains(&probe));
                prop_assert_eq!((late.second, late.quantity), (Some(probe), Some(q)));
            }
            other => panic!("{other:?}"),
        }
    }
}
