//! The hot path (`awsmp_consumer::domain::fast`, borrowing from the record's bytes) and the
//! general path (owned events, `decode_events`) decode every record alike: on arbitrary
//! events (valid or not, v1 and v2, plain and aggregated, with and without allocations),
//! under every timestamp policy and an allowlist, on corrupted records and on arbitrary
//! bytes. The hot path answers for every plain record of valid events, and never panics. The
//! handler's batch decode (`decode_records`: the trailers checked together) answers alike.

use std::collections::HashSet;

use awsmp_consumer::domain::fast::decode_plain;
use awsmp_consumer::domain::intern::Interner;
use awsmp_consumer::domain::record::{
    StreamRecord, decode_general, decode_record_in, decode_records,
};
use awsmp_consumer::domain::seq::SeqNum;
use awsmp_consumer::domain::verify::{TimestampPolicy, VerifyPolicy};
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::wire::{AggregateV2Builder, encode_aggregated, encode_event, encode_single};
use awsmp_producer::partition::partition_key;
use awsmp_producer::{Event, Tag, UsageAllocation};
use bytes::Bytes;
use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

fn arrival() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap() + Duration::milliseconds(250)
}

fn record(data: Vec<u8>) -> StreamRecord {
    StreamRecord {
        stream: "s".into(),
        shard_id: "shardId-000000000000".into(),
        sequence_number: SeqNum::parse("7").unwrap(),
        partition_key: "pk".into(),
        arrival: arrival(),
        data: Bytes::from(data),
    }
}

fn policies() -> Vec<VerifyPolicy> {
    let mut out = Vec::new();
    for timestamp in [
        TimestampPolicy::Arrival,
        TimestampPolicy::Server,
        TimestampPolicy::TrustedClient,
    ] {
        out.push(VerifyPolicy {
            timestamp,
            ..VerifyPolicy::default()
        });
    }
    out.push(VerifyPolicy {
        allowed_producers: Some(HashSet::from(["svc".to_owned()])),
        ..VerifyPolicy::default()
    });
    out
}

/// Both paths on `data` under every policy: equal answers.
fn same_on(data: &[u8]) {
    for policy in policies() {
        let r = record(data.to_vec());
        let general = decode_general(&r, &policy, &mut Interner::new());
        let chosen = decode_record_in(&r, &policy, &mut Interner::new());
        assert_eq!(chosen, general, "{:?} on {:02x?}", policy.timestamp, data);
        // The handler's way: the batch's trailers checked together, then each record.
        let batch = decode_records(&[&r, &r], &policy, &mut Interner::new());
        assert_eq!(batch, vec![general.clone(), general.clone()]);
        if let Some(fast) = decode_plain(&r, &policy, &mut Interner::new()) {
            assert_eq!(fast, general);
        }
    }
}

/// One event, valid or (by the `bad` switch) wrong in one field.
fn event(i: u64, bad: u8, ms: i64, quantity: u64, tagged: bool) -> Event {
    let mut e = Event::new(
        LICENSE,
        format!("{:012}", 210_987_654_321u64 + i % 3),
        format!("dim{}", i % 4),
        quantity,
        arrival() + Duration::milliseconds(ms),
    )
    .with_producer_id("svc")
    .with_event_id(if i.is_multiple_of(2) {
        GeneratedId {
            epoch: 0xabc,
            lane: (i % 16) as u8,
            seq: i / 2 + 1,
        }
        .to_string()
    } else {
        format!("order-{i}")
    });
    if tagged && quantity > 0 {
        e = e.with_allocations(vec![UsageAllocation::new(
            quantity,
            vec![Tag::new("team", format!("t{}", i % 3))],
        )]);
    }
    match bad {
        1 => e.license_arn = "arn:aws:license-manager::123:license:l-x".into(),
        2 => e.customer_aws_account_id = "12".into(),
        3 => e.dimension = String::new(),
        4 => e.event_id = String::new(),
        5 => e.event_id = "x".repeat(300),
        6 => e.producer_id = Some(String::new()),
        7 => e.producer_id = Some("other".into()),
        8 => e.producer_id = None,
        9 => e.event_id = "a \"quoted\" id".into(),
        10 => e.timestamp = Utc.with_ymd_and_hms(1969, 12, 31, 23, 0, 0).unwrap(),
        _ => {}
    }
    e
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        0u64..40,
        prop_oneof![8 => Just(0u8), 4 => 1u8..=10],
        prop_oneof![-200_000i64..200_000, -8_000_000i64..8_000_000],
        prop_oneof![0u64..1_000, Just(2_147_483_647u64), Just(2_147_483_648u64)],
        prop::bool::weighted(0.15),
    )
        .prop_map(|(i, bad, ms, q, tagged)| event(i, bad, ms, q, tagged))
}

fn pk(e: &Event) -> String {
    partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension)
}

fn v1_aggregate(events: &[Event]) -> Vec<u8> {
    let payloads: Vec<(String, Vec<u8>)> =
        events.iter().map(|e| (pk(e), encode_event(e))).collect();
    encode_aggregated(payloads.iter().map(|(k, p)| (k.as_str(), None, &p[..]))).to_vec()
}

fn v2_aggregate(events: &[Event]) -> Vec<u8> {
    let mut b = AggregateV2Builder::new();
    for e in events {
        b.add(&pk(e), &Bytes::from(encode_single(e)));
    }
    b.finish().to_vec()
}

/// The record of `events` in one of four forms.
fn encode(events: &[Event], form: u8) -> Vec<u8> {
    match form {
        0 => encode_event(&events[0]),
        1 => encode_single(&events[0]),
        2 => v1_aggregate(events),
        _ => v2_aggregate(events),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn both_paths_agree_on_arbitrary_events(
        events in prop::collection::vec(arb_event(), 1..12),
        form in 0u8..4,
    ) {
        same_on(&encode(&events, form));
    }

    #[test]
    fn both_paths_agree_on_corrupted_records(
        events in prop::collection::vec(arb_event(), 1..6),
        form in 0u8..4,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut data = encode(&events, form);
        for (at, x) in flips {
            let i = at.index(data.len());
            data[i] ^= x;
        }
        if let Some(c) = cut {
            data.truncate(c.index(data.len() + 1));
        }
        same_on(&data);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_agree(data in prop::collection::vec(any::<u8>(), 0..200)) {
        same_on(&data);
    }
}

#[test]
fn the_hot_path_answers_for_plain_records_of_valid_events() {
    let events: Vec<Event> = (0..20)
        .map(|i| event(i, 0, 10 * i as i64, i, false))
        .collect();
    for form in 0..4 {
        let r = record(encode(&events, form));
        let fast = decode_plain(&r, &VerifyPolicy::default(), &mut Interner::new())
            .unwrap_or_else(|| panic!("form {form}: the hot path declined"));
        let n = if form < 2 { 1 } else { events.len() };
        assert_eq!(fast.events.len(), n, "form {form}");
        assert!(fast.refused.is_empty());
    }
}

/// Each kind of bad event, with a generated id, among good ones in a v2 aggregate (a ref
/// among refs the hot path reads): both paths answer alike, at each position.
#[test]
fn a_bad_ref_among_good_refs_is_answered_as_the_general_path_does() {
    for bad in 1..=10 {
        for at in 0..3 {
            let events: Vec<Event> = (0..3u64)
                .map(|k| event(2 * k, if k == at { bad } else { 0 }, 10, k + 1, false))
                .collect();
            let data = encode(&events, 3);
            same_on(&data);
            let general = decode_general(
                &record(data),
                &VerifyPolicy::default(),
                &mut Interner::new(),
            );
            assert_eq!(general.events.len() + general.refused.len(), 3, "bad {bad}");
        }
    }
}

/// A ref whose lane is out of range (no producer writes one: its id is kept as a string) in a
/// v2 aggregate with a good trailer: both paths answer alike.
#[test]
fn a_ref_of_a_lane_out_of_range_is_answered_as_the_general_path_does() {
    let events: Vec<Event> = (0..3u64)
        .map(|k| event(2 * k, 0, 10, k + 1, false))
        .collect();
    let users = awsmp_contract::wire::deaggregate(&encode(&events, 3)).unwrap();
    for lane in [16u8, 0x7f] {
        let records: Vec<(String, Vec<u8>)> = users
            .iter()
            .map(|u| {
                let mut data = u.data.to_vec();
                // Event 2's ref spells its lane 2 as key 0x28, value 0x02, then the sequence.
                if let Some(at) = data.windows(3).position(|w| w == [0x28, 0x02, 0x30]) {
                    data[at + 1] = lane;
                }
                (u.partition_key.clone().unwrap(), data)
            })
            .collect();
        assert_ne!(
            records[2].1,
            users[2].data.to_vec(),
            "the lane was rewritten"
        );
        let data = encode_aggregated(records.iter().map(|(k, d)| (k.as_str(), None, &d[..])));
        same_on(&data);
        let general = decode_general(
            &record(data.to_vec()),
            &VerifyPolicy::default(),
            &mut Interner::new(),
        );
        assert_eq!(general.events.len(), 3);
    }
}

#[test]
fn a_batch_of_good_and_corrupt_aggregates_decodes_as_each_record_alone() {
    let records: Vec<StreamRecord> = (0..24u64)
        .map(|k| {
            let events: Vec<Event> = (0..(1 + k % 7))
                .map(|i| event(k * 10 + i, u8::from(k % 5 == 4), 10, i + 1, false))
                .collect();
            let mut data = encode(&events, 2 + (k % 2) as u8);
            if k % 3 == 2 {
                let at = data.len() / 2;
                data[at] ^= 0x20;
            }
            record(data)
        })
        .collect();
    let policy = VerifyPolicy::default();
    let refs: Vec<&StreamRecord> = records.iter().collect();
    let batch = decode_records(&refs, &policy, &mut Interner::new());
    let alone: Vec<_> = records
        .iter()
        .map(|r| decode_general(r, &policy, &mut Interner::new()))
        .collect();
    assert_eq!(batch, alone);
    assert!(
        batch
            .iter()
            .any(|d| d.refused.iter().any(|r| r.reason == "Md5Mismatch"))
    );
    assert!(batch.iter().filter(|d| d.refused.is_empty()).count() > 8);
}

#[test]
fn json_the_hot_path_does_not_borrow_goes_the_general_way() {
    // Escaped strings, unknown and duplicate fields, a float quantity, allocations.
    let base = r#""eventId":"e\u0031","licenseArn":"LIC","customerAWSAccountId":"210987654321","dimension":"api","quantity":3,"timestamp":"2026-11-30T12:00:00.100Z""#
        .replace("LIC", LICENSE);
    for body in [
        format!(r#"{{"v":1,{base}}}"#),
        format!(r#"{{"v":1,{base},"extra":1}}"#),
        format!(r#"{{"v":1,"v":1,{base}}}"#),
        format!(r#"{{"v":1,{base},"producerId":null}}"#),
        format!(r#"{{"v":1.0,{base}}}"#),
        format!(r#"{{"v":2,{base}}}"#),
        format!(
            r#"{{"v":1,{base},"usageAllocations":[{{"AllocatedUsageQuantity":3,"Tags":[{{"Key":"k","Value":"v"}}]}}]}}"#
        ),
        base.replace(r#""quantity":3"#, r#""quantity":3.0"#)
            .replace(r#""eventId""#, r#""v":1,"eventId""#),
    ] {
        let data = body;
        same_on(data.as_bytes());
        let r = record(data.into_bytes());
        let d = decode_general(&r, &VerifyPolicy::default(), &mut Interner::new());
        assert_eq!(d.events.len() + d.refused.len(), 1);
    }
}
