//! Unit tests of the aggregated item conversion and the conditions of its writes.

use super::*;
use awsmp_contract::row::Tag;
use proptest::prelude::*;

fn group() -> GroupKey {
    GroupKey {
        license_arn:
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
                .into(),
        customer_aws_account_id: "111122223333".into(),
        dimension: "calls".into(),
        hour: "2026-11-30T10".parse().unwrap(),
    }
}

#[test]
fn aggregated_items_round_trip() {
    let mut item = AggregatedItem::new(
        group(),
        42,
        Some(vec![Allocation {
            quantity: 42,
            tags: vec![Tag::new("team", "a")],
        }]),
    );
    item.row_count = 3;
    item.contributed_seconds = vec![0b101, 0, 1];
    item.contributed_quantities = vec![0, 0, 0, 40, 0, 0, 0, 2];
    item.overflow = Some(Overflow {
        quantity: 9,
        allocations: item.allocations.clone(),
    });
    let now = "2026-11-30T12:00:00Z".parse().unwrap();
    let back = aggregated_from_item("t", &aggregated_to_item(&item, now)).unwrap();
    assert_eq!(back, item);
}

#[test]
fn each_condition_renders_as_sent() {
    let r = |c: Condition| {
        let r = c.render();
        assert!(r.names.is_empty());
        (r.expression, r.values)
    };
    let pending = "attribute_exists(meteringPending)";
    assert_eq!(
        r(put_if_absent_condition()).0,
        "attribute_not_exists(licenseArn)"
    );
    assert_eq!(r(mark_attempted_condition()).0, pending);
    let (expr, values) = r(retract_attempt_condition(7));
    assert_eq!(expr, format!("{pending} AND attemptedQuantity = :q"));
    assert_eq!(values[":q"], AttrValue::n(7));
    assert_eq!(r(write_back_condition(AttemptCondition::Any)).0, pending);
    assert_eq!(
        r(write_back_condition(AttemptCondition::NoAttempt)).0,
        format!("{pending} AND attribute_not_exists(attemptedQuantity)")
    );
    let exactly = |number| {
        r(write_back_condition(AttemptCondition::Exactly(Attempt {
            quantity: 5,
            number,
        })))
    };
    let (expr, values) = exactly(Some(2));
    assert_eq!(
        expr,
        format!("{pending} AND attemptedQuantity = :aq AND attemptNumber = :an")
    );
    assert_eq!(
        (&values[":aq"], &values[":an"]),
        (&AttrValue::n(5), &AttrValue::n(2))
    );
    assert_eq!(
        exactly(None).0,
        format!("{pending} AND attemptedQuantity = :aq AND attribute_not_exists(attemptNumber)")
    );
}

#[test]
fn no_update_condition_holds_without_a_record() {
    // The memory twin never creates a record from an update: DynamoDB would not either.
    let attempt = Attempt {
        quantity: 1,
        number: Some(1),
    };
    for c in [
        mark_attempted_condition(),
        retract_attempt_condition(1),
        write_back_condition(AttemptCondition::Any),
        write_back_condition(AttemptCondition::NoAttempt),
        write_back_condition(AttemptCondition::Exactly(attempt)),
    ] {
        assert!(!c.holds_for(None), "{c:?}");
    }
    assert!(put_if_absent_condition().holds_for(None));
}

fn arb_item() -> impl Strategy<Value = AggregatedItem> {
    let status = prop::sample::select(vec![
        AggregatedStatus::Success,
        AggregatedStatus::SubmissionExpired,
        AggregatedStatus::NeedsReconciliation,
        AggregatedStatus::Error,
    ]);
    (
        (any::<u64>(), any::<bool>(), prop::option::of(status)),
        (
            prop::option::of(any::<u64>()),
            prop::option::of(1..u64::MAX),
        ),
        (
            prop::option::of(0..4_000_000_000i64),
            prop::option::of("[a-z]{1,8}"),
        ),
        prop::collection::vec(any::<u8>(), 0..4),
    )
        .prop_map(|((q, pending, status), (aq, an), (at, text), bytes)| {
            let mut item = AggregatedItem::new(group(), q, None);
            item.pending = pending;
            item.status = status;
            item.status_reason = text.clone();
            item.metering_record_id = text.clone();
            item.customer_identifier = text;
            item.attempted_quantity = aq;
            item.attempt_number = an;
            item.submission_attempted_at = at.and_then(|t| DateTime::from_timestamp(t, 0));
            item.contributed_seconds = bytes;
            item
        })
}

proptest::proptest! {
    /// The twin's attributes are the adapter's: what it reads back is the record itself.
    #[test]
    fn stored_attributes_read_back_as_the_record(item in arb_item()) {
        let now = "2026-11-30T12:00:00Z".parse().unwrap();
        let mut stored = aggregated_to_item(&item, now);
        for (k, v) in aggregated_attrs(&item, now) {
            stored.entry(k).or_insert_with(|| to_sdk(&v));
        }
        proptest::prop_assert_eq!(aggregated_from_item("t", &stored).unwrap(), item);
    }
}
