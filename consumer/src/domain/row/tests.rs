//! Unit tests of the row decision and the conditional write.

use std::collections::BTreeMap;

use awsmp_contract::attrs;
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::reasons;
use awsmp_contract::row::{AttrValue, RawUsageRow, Tag};

use super::*;
use crate::domain::fold::{BatchFold, FoldedRows, RowContribution};
use crate::domain::seq::{Lane, SeqNum};
use crate::domain::verify::{Kind, VerifiedEvent};

const ARN: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

fn ev(q: u64, tags: Option<&str>) -> VerifiedEvent {
    VerifiedEvent {
        license_arn: ARN.into(),
        customer_aws_account_id: "210987654321".into(),
        dimension: "api".into(),
        second: 1_796_040_007,
        quantity: q,
        allocations: tags.map(|t| BTreeMap::from([(vec![Tag::new("team", t)], q)])),
        event_id: "e".into(),
        producer_id: None,
    }
}

fn metas(n: usize) -> Vec<RecordMeta> {
    (0..n)
        .map(|i| RecordMeta {
            lane: Lane::new("shardId-000000000000", "pk"),
            seq: SeqNum::parse(&(100 + i).to_string()).unwrap(),
        })
        .collect()
}

/// The fold of `events`: one row (read it with `.get(0)`).
fn contribution(events: &[(u32, VerifiedEvent)]) -> FoldedRows {
    let mut f = BatchFold::new();
    let mut names = crate::domain::intern::Interner::new();
    for (r, e) in events {
        f.add(
            *r,
            0,
            crate::domain::record::accepted(e.clone(), &mut names),
        );
    }
    f.into_rows()
}

fn apply(
    row: &RowContribution,
    m: &[RecordMeta],
    stored: Option<&RawUsageRow>,
) -> (Decision, Option<RawUsageRow>) {
    let st = stored.map(RowState::from_row);
    let obs = match &st {
        None => Observation::Absent,
        Some(s) => Observation::Present(s),
    };
    let Resolve::Decided(d) = resolve(row, m, obs, false, RowLimits::default()) else {
        panic!("a read row is always decided")
    };
    let written = d.write.clone().and_then(|plan| {
        row_write(row.id, plan, None, "2026-11-30T12:00:08.000Z".into()).apply(stored)
    });
    (d, written)
}

#[test]
fn the_optimistic_write_refuses_an_applied_lane() {
    let m = metas(3);
    let row_rows = contribution(&[(0, ev(5, None)), (1, ev(6, None))]);
    let row = row_rows.get(0).expect("one row");
    let Resolve::Decided(d) = resolve(&row, &m, Observation::Unknown, false, RowLimits::default())
    else {
        panic!("plain usage goes optimistic")
    };
    let w = row_write(row.id, d.write.unwrap(), None, "now".into());
    let stored = w.apply(None).unwrap();
    assert_eq!(stored[attrs::QUANTITY], AttrValue::n(11));
    assert!(
        w.apply(Some(&stored)).is_none(),
        "same parts again: guard fails"
    );
}

#[test]
fn a_replay_writes_only_the_parts_above_the_watermark() {
    let m = metas(3);
    let first_rows = contribution(&[(0, ev(5, None)), (1, ev(6, None))]);
    let first = first_rows.get(0).expect("one row");
    let (_, stored) = apply(&first, &m, None);
    let stored = stored.unwrap();
    // The replayed batch holds records 0..=2; 0 and 1 are already in the row.
    let replay_rows = contribution(&[(0, ev(5, None)), (1, ev(6, None)), (2, ev(7, None))]);
    let replay = replay_rows.get(0).expect("one row");
    let (d, after) = apply(&replay, &m, Some(&stored));
    assert_eq!(d.applied, vec![0, 1]);
    assert_eq!(d.accepted_quantity, 7);
    assert_eq!(after.unwrap()[attrs::QUANTITY], AttrValue::n(18));
}

#[test]
fn mixed_usage_keeps_the_first_kind_and_records_the_other() {
    let m = metas(2);
    let row_rows = contribution(&[
        (0, ev(4, Some("a"))),
        (1, ev(9, None)),
        (1, ev(2, Some("b"))),
    ]);
    let row = row_rows.get(0).expect("one row");
    let (d, after) = apply(&row, &m, None);
    assert_eq!(
        d.rejected,
        vec![PartRejection {
            part: 1,
            reason: reasons::MIXED_ALLOCATED_AND_UNALLOCATED,
            quantity: 9,
            kind: Some(Kind::Unallocated),
        }]
    );
    let after = after.unwrap();
    assert_eq!(after[attrs::QUANTITY], AttrValue::n(6));
    assert_eq!(after[attrs::USAGE_ALLOCATIONS].as_l().unwrap().len(), 2);
}

#[test]
fn a_row_total_beyond_the_api_maximum_is_recorded_not_written() {
    let m = metas(2);
    let big = MAX_USAGE_QUANTITY - 10;
    let row_rows = contribution(&[(0, ev(big, None)), (1, ev(11, None))]);
    let row = row_rows.get(0).expect("one row");
    assert_eq!(
        resolve(&row, &m, Observation::Unknown, false, RowLimits::default()),
        Resolve::NeedsRead
    );
    let (d, after) = apply(&row, &m, None);
    assert_eq!(d.rejected[0].reason, reasons::QUANTITY_OVERFLOW);
    assert_eq!(d.rejected[0].quantity, 11);
    assert_eq!(after.unwrap()[attrs::QUANTITY], AttrValue::n(big));
}

#[test]
fn finalized_and_unreadable_rows_are_never_written() {
    let m = metas(1);
    let row_rows = contribution(&[(0, ev(3, None))]);
    let row = row_rows.get(0).expect("one row");
    let Resolve::Decided(d) = resolve(&row, &m, Observation::Absent, true, RowLimits::default())
    else {
        panic!()
    };
    assert_eq!((d.rejected[0].reason, d.write), (reasons::LATE_USAGE, None));

    let mut seller = RawUsageRow::new();
    seller.insert(
        attrs::METERING_PENDING.into(),
        AttrValue::s("2026-11-30T12"),
    );
    seller.insert(attrs::QUANTITY.into(), AttrValue::s("7"));
    let (d, after) = apply(&row, &m, Some(&seller));
    assert_eq!(d.rejected[0].reason, reasons::EXISTING_ROW_MALFORMED);
    assert!(after.is_none());

    let mut finalized = seller.clone();
    finalized.remove(attrs::METERING_PENDING);
    finalized.insert(attrs::QUANTITY.into(), AttrValue::n(7));
    let (d, _) = apply(&row, &m, Some(&finalized));
    assert_eq!(d.rejected[0].reason, reasons::LATE_USAGE);
}

#[test]
fn allocations_that_would_pass_the_item_limit_are_recorded_not_written() {
    // Three events of one tag set each; the limit holds the first two tag sets only.
    let m = metas(3);
    let row_rows = contribution(&[
        (0, ev(1, Some("a"))),
        (1, ev(2, Some("b"))),
        (2, ev(4, Some("c"))),
    ]);
    let row = row_rows.get(0).expect("one row");
    let one = allocation_bytes(&[Tag::new("team", "a")]);
    let limits = RowLimits {
        max_allocation_bytes: 2 * one,
        ..RowLimits::default()
    };
    assert_eq!(
        resolve(&row, &m, Observation::Unknown, false, limits),
        Resolve::NeedsRead
    );
    let Resolve::Decided(d) = resolve(&row, &m, Observation::Absent, false, limits) else {
        panic!("a read row is always decided")
    };
    assert_eq!(
        d.rejected,
        vec![PartRejection {
            part: 2,
            reason: reasons::ROW_ITEM_TOO_LARGE,
            quantity: 4,
            kind: Some(Kind::Allocated),
        }]
    );
    assert_eq!(d.accepted_quantity, 3);
    // A tag set the row already holds adds no bytes: still written.
    let again = contribution(&[
        (0, ev(1, Some("a"))),
        (1, ev(2, Some("b"))),
        (2, ev(4, Some("a"))),
    ]);
    let Resolve::Decided(d) = resolve(
        &again.get(0).unwrap(),
        &m,
        Observation::Absent,
        false,
        limits,
    ) else {
        panic!()
    };
    assert!(d.rejected.is_empty());
    assert_eq!(d.accepted_quantity, 7);
}

#[test]
fn the_allocation_estimate_of_the_largest_allowed_tag_set_is_conservative() {
    // Five tags of the longest key and value (100 and 256 characters).
    let tags: Vec<Tag> = (0..5)
        .map(|i| Tag::new(format!("{i}{}", "k".repeat(99)), "v".repeat(256)))
        .collect();
    let strings: usize = tags.iter().map(|t| t.key.len() + t.value.len()).sum();
    assert!(allocation_bytes(&tags) > strings + 5 * "KeyValue".len());
    // At the limit, a row holds over a hundred such tag sets.
    assert!(MAX_ROW_ALLOCATION_BYTES / allocation_bytes(&tags) > 100);
}

/// The consumer's write of `row` onto `stored`: the optimistic write, and when its guard
/// fails, the decision on the row as read and its compare-and-set (`src/handler/rows.rs`).
fn write_through(
    row: &RowContribution,
    m: &[RecordMeta],
    stored: Option<&RawUsageRow>,
) -> (Decision, Option<RawUsageRow>) {
    let Resolve::Decided(d) = resolve(row, m, Observation::Unknown, false, RowLimits::default())
    else {
        panic!("plain usage goes optimistic")
    };
    let plan = d.write.clone().expect("an optimistic write");
    let optimistic = row_write(row.id, plan, None, "2026-11-30T12:00:08.000Z".into());
    match optimistic.apply(stored) {
        Some(after) => (d, Some(after)),
        None => {
            let (d, after) = apply(row, m, stored);
            (d, after.or_else(|| stored.cloned()))
        }
    }
}

#[test]
fn a_redriven_record_behind_a_later_record_of_its_lane_is_added_once() {
    // Record 0 (sequence 100) was discarded to the on-failure destination; record 1 (101), of
    // the same shard and partition key, wrote the row after the mapping moved on.
    let m = metas(2);
    let later_rows = contribution(&[(1, ev(6, None))]);
    let (_, row) = write_through(&later_rows.get(0).unwrap(), &m, None);
    let row = row.unwrap();
    assert_eq!(
        row[&m[0].lane.attribute()],
        AttrValue::s(m[1].seq.sortable())
    );

    // The re-drive: record 0 lies below the watermark, in no span: added.
    let redrive_rows = contribution(&[(0, ev(5, None))]);
    let redrive = redrive_rows.get(0).unwrap();
    let (d, after) = write_through(&redrive, &m, Some(&row));
    let after = after.unwrap();
    assert_eq!((d.accepted_quantity, d.behind_watermark), (5, 1));
    assert_eq!(after[attrs::QUANTITY], AttrValue::n(11));
    assert_eq!(
        after[&m[0].lane.attribute()],
        AttrValue::s(m[1].seq.sortable()),
        "the watermark never moves back"
    );

    // The same re-drive again (the operator re-ran it, or its response was lost): held.
    let (d, again) = write_through(&redrive, &m, Some(&after));
    assert_eq!((d.applied.clone(), d.accepted_quantity), (vec![0], 0));
    assert_eq!(again.unwrap()[attrs::QUANTITY], AttrValue::n(11));

    // And the later record's replay is still a replay.
    let (d, replayed) = write_through(&later_rows.get(0).unwrap(), &m, Some(&after));
    assert_eq!((d.applied, d.accepted_quantity), (vec![0], 0));
    assert_eq!(replayed.unwrap()[attrs::QUANTITY], AttrValue::n(11));
}

#[test]
fn a_row_written_before_spans_keeps_its_prefix_and_is_read_once() {
    let m = metas(3);
    let rows = contribution(&[(1, ev(6, None))]);
    let (_, row) = write_through(&rows.get(0).unwrap(), &m, None);
    let mut legacy = row.unwrap();
    legacy.remove(&coverage::attribute(&m[0].lane));
    // Record 0 below the watermark of a row without spans: a replay, as before spans.
    let (d, _) = apply(
        &contribution(&[(0, ev(5, None))]).get(0).unwrap(),
        &m,
        Some(&legacy),
    );
    assert_eq!((d.applied.len(), d.accepted_quantity), (1, 0));
    // A later batch is not written optimistically (its span would hide the prefix): the row
    // is read, and the prefix becomes a span beside the new one.
    let next_rows = contribution(&[(2, ev(7, None))]);
    let next = next_rows.get(0).unwrap();
    let Resolve::Decided(d) = resolve(&next, &m, Observation::Unknown, false, RowLimits::default())
    else {
        panic!()
    };
    let w = row_write(next.id, d.write.unwrap(), None, "now".into());
    assert!(w.apply(Some(&legacy)).is_none());
    let (_, after) = write_through(&next, &m, Some(&legacy));
    let st = RowState::from_row(&after.unwrap());
    assert_eq!(st.quantity, 13);
    assert_eq!(st.proof(&m[0].lane, &m[0].seq), Proof::Applied);
    assert_eq!(st.proof(&m[0].lane, &m[2].seq), Proof::Applied);
}

#[test]
fn a_record_in_compacted_spans_is_recorded_never_guessed() {
    let m = metas(1);
    let lane = &m[0].lane;
    let mut row = write_through(&contribution(&[(0, ev(1, None))]).get(0).unwrap(), &m, None)
        .1
        .unwrap();
    // Spans compacted past the cap up to sequence 150: record 100 is in the unknown prefix.
    let mut c = Coverage::default();
    for i in 0..=coverage::MAX_LANE_SPANS as u64 {
        let s = SeqNum::parse(&(150 + 10 * i).to_string()).unwrap();
        c.add(&s, &s);
    }
    row.insert(
        coverage::attribute(lane),
        AttrValue::L(c.encode().into_iter().map(AttrValue::S).collect()),
    );
    row.insert(lane.attribute(), AttrValue::s("003300"));
    let (d, after) = apply(
        &contribution(&[(0, ev(1, None))]).get(0).unwrap(),
        &m,
        Some(&row),
    );
    assert_eq!(d.rejected[0].reason, reasons::REDRIVE_UNPROVEN);
    assert_eq!((d.rejected[0].quantity, d.accepted_quantity), (1, 0));
    assert!(after.is_none(), "nothing to write");
}

#[test]
fn malformed_spans_make_the_row_one_the_consumer_cannot_add_to() {
    let m = metas(2);
    let (_, row) = write_through(&contribution(&[(0, ev(1, None))]).get(0).unwrap(), &m, None);
    let mut row = row.unwrap();
    row.insert(coverage::attribute(&m[0].lane), AttrValue::s("not a list"));
    let (d, after) = apply(
        &contribution(&[(1, ev(2, None))]).get(0).unwrap(),
        &m,
        Some(&row),
    );
    assert_eq!(d.rejected[0].reason, reasons::EXISTING_ROW_MALFORMED);
    assert!(after.is_none());
}

fn guarded(guard: Guard) -> RowWrite {
    RowWrite {
        key: awsmp_contract::keys::RowKey {
            license_arn: ARN.into(),
            sort_key: "210987654321:api:2026-12-01T00:00:07".into(),
        },
        customer_aws_account_id: "210987654321".into(),
        dimension: "api".into(),
        timestamp: "2026-12-01T00:00:07".into(),
        metering_pending: "2026-12-01T00".into(),
        ttl: None,
        now: "2026-12-01T00:00:08.000Z".into(),
        guard,
        change: Change::Add(1),
        watermarks: Vec::new(),
        spans: Vec::new(),
    }
}

/// The condition as the DynamoDB adapter renders it: lane attributes named `#w0`, `#w1`, … in
/// order of first use.
fn rendered(w: &RowWrite) -> awsmp_contract::condition::Rendered {
    let mut seen: Vec<String> = Vec::new();
    w.condition(&mut |attr| {
        let i = seen.iter().position(|a| *a == attr).unwrap_or_else(|| {
            seen.push(attr);
            seen.len() - 1
        });
        format!("#w{i}")
    })
    .render()
}

#[test]
fn each_guard_renders_as_the_adapter_sends_it() {
    assert_eq!(
        rendered(&guarded(Guard::Absent)).expression,
        "attribute_not_exists(#la)"
    );
    assert_eq!(
        rendered(&guarded(Guard::Version(None))).expression,
        "attribute_exists(#mp) AND attribute_not_exists(#rv)"
    );
    let r = rendered(&guarded(Guard::Version(Some(4))));
    assert_eq!(r.expression, "attribute_exists(#mp) AND #rv = :v");
    assert_eq!(r.values[":v"], AttrValue::n(4));
    let lanes = vec![
        (
            Lane::new("shardId-000000000000", "a"),
            SeqNum::parse("5").unwrap(),
        ),
        (
            Lane::new("shardId-000000000000", "b"),
            SeqNum::parse("7").unwrap(),
        ),
    ];
    let fresh = guarded(Guard::Fresh {
        lanes: lanes.clone(),
        max_quantity_before: 10,
        require_unallocated: true,
    });
    let r = rendered(&fresh);
    let lane = |w: &str, c: &str, i: usize| {
        format!(
            "((attribute_not_exists({w}) AND attribute_not_exists({c})) OR ({w} < :first{i} AND \
             attribute_type({c}, :ltype) AND size({c}) < :spans))"
        )
    };
    assert_eq!(
        r.expression,
        format!(
            "(attribute_not_exists(#la) OR attribute_exists(#mp)) AND {} AND {} AND \
             (attribute_not_exists(#q) OR #q <= :room) AND \
             (attribute_not_exists(#rv) OR attribute_type(#rv, :ntype)) AND \
             attribute_not_exists(#al)",
            lane("#w0", "#w1", 0),
            lane("#w2", "#w3", 1)
        )
    );
    assert_eq!(r.names["#w0"], lanes[0].0.attribute());
    assert_eq!(r.names["#w3"], coverage::attribute(&lanes[1].0));
    assert_eq!(r.names["#al"], attrs::USAGE_ALLOCATIONS);
    assert_eq!(r.values[":first1"], AttrValue::s(lanes[1].1.sortable()));
    assert_eq!(r.values[":spans"], AttrValue::n(MAX_LANE_SPANS_FOR_TEST));
    assert_eq!(r.values[":room"], AttrValue::n(10));
    assert_eq!(
        (&r.values[":ltype"], &r.values[":ntype"]),
        (&AttrValue::s("L"), &AttrValue::s("N"))
    );
}

const MAX_LANE_SPANS_FOR_TEST: u64 = coverage::MAX_LANE_SPANS as u64;

#[test]
fn the_fresh_guard_compares_the_stored_quantity_as_a_number() {
    let fresh = guarded(Guard::Fresh {
        lanes: Vec::new(),
        max_quantity_before: 10,
        require_unallocated: false,
    });
    let row = |q: AttrValue| {
        RawUsageRow::from([
            (attrs::LICENSE_ARN.to_owned(), AttrValue::s(ARN)),
            (
                attrs::METERING_PENDING.to_owned(),
                AttrValue::s("2026-12-01T00"),
            ),
            (attrs::QUANTITY.to_owned(), q),
        ])
    };
    // "9" <= 10 as numbers (as strings "9" > "10").
    assert!(fresh.guard_holds(Some(&row(AttrValue::n(9)))));
    assert!(fresh.guard_holds(Some(&row(AttrValue::n(10)))));
    assert!(!fresh.guard_holds(Some(&row(AttrValue::n(11)))));
    // A string quantity never compares with a number.
    assert!(!fresh.guard_holds(Some(&row(AttrValue::s("1")))));
    assert!(fresh.guard_holds(None));
}
