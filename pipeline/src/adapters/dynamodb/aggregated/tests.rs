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
fn each_update_renders_as_sent() {
    let now: DateTime<Utc> = "2026-11-30T12:00:09Z".parse().unwrap();
    let stamp = AttrValue::s("2026-11-30T12:00:09.000Z");
    let r = mark_attempted_update(7, now).render_with(&mark_attempted_condition());
    assert_eq!(
        r.expression,
        "SET attemptedQuantity = :q, submissionAttemptedAt = :now, updatedAt = :now \
         ADD attemptNumber :one"
    );
    assert_eq!(
        r.condition.as_deref(),
        Some("attribute_exists(meteringPending)")
    );
    assert!(r.names.is_empty());
    assert_eq!(
        (&r.values[":q"], &r.values[":now"], &r.values[":one"]),
        (&AttrValue::n(7), &stamp, &AttrValue::n(1))
    );

    let r = retract_attempt_update(Some(3), now).render_with(&retract_attempt_condition(7));
    assert_eq!(
        r.expression,
        "SET attemptedQuantity = :prev, updatedAt = :now"
    );
    // The condition's `:q` (the quantity marked) and the update's `:prev` side by side.
    assert_eq!(
        (&r.values[":q"], &r.values[":prev"]),
        (&AttrValue::n(7), &AttrValue::n(3))
    );
    assert_eq!(
        retract_attempt_update(None, now).render().expression,
        "REMOVE attemptedQuantity, submissionAttemptedAt SET updatedAt = :now"
    );

    let mut outcome = WriteBack {
        status: AggregatedStatus::Success,
        reason: None,
        metering_record_id: None,
        ttl: None,
        if_attempt: AttemptCondition::Any,
    };
    let base = "REMOVE meteringPending SET meteringStatus = :st, updatedAt = :now, \
                createdAt = if_not_exists(createdAt, :now)";
    assert_eq!(write_back_update(&outcome, now).render().expression, base);
    outcome.reason = Some("r".into());
    outcome.metering_record_id = Some("id-1".into());
    outcome.ttl = Some(1_800_000_000);
    outcome.if_attempt = AttemptCondition::Exactly(Attempt {
        quantity: 5,
        number: Some(2),
    });
    let r = write_back_update(&outcome, now).render_with(&write_back_condition(outcome.if_attempt));
    assert_eq!(
        r.expression,
        format!("{base}, meteringStatusReason = :r, meteringRecordId = :id, #ttl = :ttl")
    );
    assert_eq!(r.names.len(), 1);
    assert_eq!(r.names["#ttl"], "ttl");
    let tokens: Vec<_> = r.values.keys().map(String::as_str).collect();
    assert_eq!(tokens, [":an", ":aq", ":id", ":now", ":r", ":st", ":ttl"]);
    assert_eq!(r.values[":st"], AttrValue::s("Success"));
}

#[test]
fn the_updates_leave_what_the_twin_reads_back() {
    // put → mark → mark → retract to nothing → write-back, each update applied to the
    // attributes the previous write left, read back through the adapter's parser.
    let t = |s: &str| -> DateTime<Utc> { s.parse().unwrap() };
    let item = AggregatedItem::new(group(), 9, None);
    let mut attrs = aggregated_put_attrs(&item, t("2026-11-30T11:00:00Z"));
    let read = |attrs: &Item| aggregated_from_attrs("t", attrs).unwrap();
    assert_eq!(read(&attrs), item);

    mark_attempted_update(9, t("2026-11-30T12:00:00Z"))
        .apply(&mut attrs)
        .unwrap();
    mark_attempted_update(9, t("2026-11-30T12:05:00.250Z"))
        .apply(&mut attrs)
        .unwrap();
    let marked = read(&attrs);
    assert_eq!(
        (marked.attempted_quantity, marked.attempt_number),
        (Some(9), Some(2))
    );
    // Stored as the audit timestamp: to the millisecond.
    assert_eq!(
        marked.submission_attempted_at,
        Some(t("2026-11-30T12:05:00.250Z"))
    );

    retract_attempt_update(None, t("2026-11-30T12:06:00Z"))
        .apply(&mut attrs)
        .unwrap();
    let retracted = read(&attrs);
    assert_eq!(
        (
            retracted.attempted_quantity,
            retracted.submission_attempted_at
        ),
        (None, None)
    );
    // The number stays: the next mark is the third.
    assert_eq!(retracted.attempt_number, Some(2));

    let outcome = WriteBack {
        status: AggregatedStatus::Success,
        reason: None,
        metering_record_id: Some("id-1".into()),
        ttl: Some(42),
        if_attempt: AttemptCondition::Any,
    };
    write_back_update(&outcome, t("2026-11-30T12:07:00Z"))
        .apply(&mut attrs)
        .unwrap();
    let written = read(&attrs);
    assert!(!written.pending);
    assert_eq!(written.status, Some(AggregatedStatus::Success));
    assert_eq!(written.metering_record_id.as_deref(), Some("id-1"));
    assert_eq!(attrs[a::TTL], AttrValue::n(42));
    // The put's createdAt is kept.
    assert_eq!(
        attrs[a::CREATED_AT],
        AttrValue::s("2026-11-30T11:00:00.000Z")
    );
    assert_eq!(
        attrs[a::UPDATED_AT],
        AttrValue::s("2026-11-30T12:07:00.000Z")
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
