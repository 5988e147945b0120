//! The v2 wire format (docs/wire-format.md): round trips, aggregates of table + refs that any
//! KPL deaggregator splits, exact size tracking, byte-identical re-encoding, the compactness
//! goal at 300 groups, a specific reason for each kind of bad input, and no panic on any bytes.

use crate::common;

use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::wire::v2::{
    EventV2, IdV2, KIND_REF, RecordV2, V2, decode_ref_in_order, decode_v2, is_binary,
    split_single_ranges,
};
use awsmp_contract::wire::{
    AggregateBuilder, AggregateV2Builder, deaggregate, decode_events, decode_payload, encode_event,
    encode_single,
};
use awsmp_producer::batch::{Packer, UserRec, pack};
use awsmp_producer::partition::{ShardMap, partition_hash, partition_key};
use awsmp_producer::{Event, Tag, UsageAllocation};
use bytes::Bytes;
use chrono::Duration;
use proptest::prelude::*;

fn event(group: usize, ms: i64, quantity: u64, id: u64, allocated: bool) -> Event {
    let e = Event::new(
        common::arn(group / 3),
        format!("{:012}", 210_987_654_321u64 + (group % 3) as u64),
        if group.is_multiple_of(2) {
            "api"
        } else {
            "storage|gb"
        },
        quantity,
        common::t0() + Duration::milliseconds(ms),
    )
    .with_producer_id("checkout");
    let e = match id % 3 {
        0 => e.with_event_id(
            GeneratedId {
                epoch: 0x1234_5678_9abc_def0_0fed_cba9_8765_4321,
                lane: (id % 16) as u8,
                seq: id + 1,
            }
            .to_string(),
        ),
        1 => e.with_event_id(format!("order-{id}")),
        // Looks generated but is not canonical (leading zero): a supplied id, kept verbatim.
        _ => e.with_event_id(format!("p:{:032x}:3:0{id}", 7u8)),
    };
    if allocated && quantity > 1 {
        e.with_allocations(vec![
            UsageAllocation::new(1, vec![Tag::new("team", "red")]),
            UsageAllocation::new(quantity - 1, vec![Tag::new("env", "prod")]),
        ])
    } else {
        e
    }
}

fn v2_aggregate(events: &[Event]) -> (Bytes, usize) {
    let mut b = AggregateV2Builder::new();
    for e in events {
        let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
        assert!(b.add(&pk, &Bytes::from(encode_single(e))));
    }
    let expected = b.encoded_len();
    (b.finish(), expected)
}

fn decoded(data: &[u8]) -> Vec<Event> {
    decode_events(data)
        .unwrap()
        .into_iter()
        .map(|u| u.event.unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// encode → decode gives the event back, as a single and inside an aggregate, and the
    /// aggregate's size is tracked exactly.
    #[test]
    fn v2_round_trips(
        raw in prop::collection::vec((0usize..40, 0i64..7_200_000, 0u64..3_000_000_000, any::<u64>(), any::<bool>()), 1..120),
    ) {
        let events: Vec<Event> = raw.iter().map(|&(g, ms, q, id, a)| event(g, ms, q % 2_147_483_648, id % 1_000_000, a)).collect();
        for e in &events {
            prop_assert_eq!(&decode_payload(&encode_single(e)).unwrap(), e);
        }
        let (agg, expected) = v2_aggregate(&events);
        prop_assert_eq!(agg.len(), expected);
        prop_assert_eq!(decoded(&agg), events.clone());
        // The same events encode to the same bytes (a retry re-sends what was sent).
        prop_assert_eq!(v2_aggregate(&events).0, agg);
    }

    /// The straight-line reader of refs answers what `decode_v2` answers wherever it answers:
    /// on every ref the producer writes for an event of a generated id without allocations
    /// (where it must answer), and on refs of arbitrary varint and length-delimited fields
    /// in any order, repeated or missing, values of any size, cut anywhere.
    #[test]
    fn the_in_order_reader_answers_as_decode_v2(
        raw in prop::collection::vec((0usize..40, 0i64..7_200_000, 0u64..3_000_000_000, any::<u64>(), any::<bool>()), 1..40),
        present in prop::collection::vec(prop::bool::weighted(0.8), 5),
        values in prop::collection::vec(prop_oneof![3 => 0u64..300, 1 => any::<u64>()], 5),
        extra in prop::option::weighted(0.25, (0usize..6, 0u32..9, any::<bool>(), any::<u64>())),
        swap in prop::option::weighted(0.25, (0usize..5, 0usize..5)),
        cut in prop::option::weighted(0.25, 0usize..60),
    ) {
        let events: Vec<Event> = raw.iter().map(|&(g, ms, q, id, a)| event(g, ms, q % 2_147_483_648, id % 1_000_000, a)).collect();
        let (agg, _) = v2_aggregate(&events);
        let users = deaggregate(&agg).unwrap();
        for (u, e) in users[1..].iter().zip(&events) {
            let fast = decode_ref_in_order(&u.data);
            let plain = e.usage_allocations.is_none() && matches!(
                decode_v2(&u.data), Ok(RecordV2::Event(EventV2 { id: IdV2::Generated { .. }, .. }))
            );
            prop_assert_eq!(fast.is_some(), plain, "{:?}", e);
            if let Some(fast) = fast {
                prop_assert_eq!(RecordV2::Event(fast.to_event(&u.data)), decode_v2(&u.data).unwrap());
            }
        }
        // Fields 2–6 in order, some left out, then one field of any kind put anywhere, two
        // swapped, the bytes cut.
        let mut fields: Vec<(u32, bool, u64)> = (0..5)
            .filter(|&i| present[i])
            .map(|i| (i as u32 + 2, true, values[i]))
            .collect();
        if let Some((at, field, varint, v)) = extra {
            fields.insert(at.min(fields.len()), (field, varint, v));
        }
        if let Some((a, b)) = swap && a < fields.len() && b < fields.len() {
            fields.swap(a, b);
        }
        let mut data = vec![V2, KIND_REF];
        for (field, varint, v) in fields {
            use prost::encoding::{WireType, encode_key, encode_varint};
            let wire_type = if varint { WireType::Varint } else { WireType::LengthDelimited };
            encode_key(field.max(1), wire_type, &mut data);
            if varint {
                encode_varint(v, &mut data);
            } else {
                let len = (v % 9) as usize;
                encode_varint(len as u64, &mut data);
                data.extend_from_slice(&v.to_le_bytes()[..len.min(8)]);
            }
        }
        if let Some(at) = cut {
            data.truncate(at.max(2));
        }
        if let Some(fast) = decode_ref_in_order(&data) {
            prop_assert_eq!(Some(RecordV2::Event(fast.to_event(&data))), decode_v2(&data).ok(), "{:02x?}", data);
        }
    }

    /// No input panics a decoder; whatever is refused has a reason.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300), head in 0u8..4) {
        let mut data = bytes.clone();
        if head > 0 && !data.is_empty() {
            data[0] = 0x02;
        }
        if head > 1 && data.len() > 1 {
            data[1] = head - 2;
        }
        if let Ok(users) = decode_events(&data) {
            for u in users {
                if let Err(e) = u.event {
                    prop_assert!(!e.reason().is_empty());
                }
            }
        }
        let _ = decode_v2(&data);
        let _ = decode_payload(&data);
    }

    /// A valid aggregate with one user record's bytes flipped (MD5 recomputed, so the damage
    /// reaches the v2 decoder) never panics, and only the damaged user record can change.
    #[test]
    fn damaged_user_records_never_panic(at in 0usize..2_000, flip in 1u8..=255, which in 0usize..6) {
        let events: Vec<Event> = (0..6).map(|i| event(i, i as i64, 5, i as u64, i % 2 == 0)).collect();
        let (agg, _) = v2_aggregate(&events);
        let mut users = deaggregate(&agg).unwrap();
        let target = which % users.len();
        let mut d = users[target].data.to_vec();
        let at = at % d.len();
        d[at] ^= flip;
        users[target].data = Bytes::from(d);
        let mut b = AggregateBuilder::new();
        for u in &users {
            b.add(u.partition_key.as_deref().unwrap(), None, u.data.clone());
        }
        let out = decode_events(&b.finish()).unwrap();
        for u in &out {
            // Sub 0 is the table; event k sits at sub k + 1.
            if target != 0 && u.sub as usize != target {
                prop_assert_eq!(u.event.as_ref().unwrap(), &events[u.sub as usize - 1]);
            }
        }
    }
}

#[test]
fn an_aggregate_is_the_table_then_one_ref_per_event_each_under_its_groups_key() {
    let events: Vec<Event> = (0..4)
        .map(|i| event(i, 0, 1, i as u64 * 3, false))
        .collect();
    let (agg, _) = v2_aggregate(&events);
    let users = deaggregate(&agg).unwrap();
    assert_eq!(users.len(), 5);
    assert!(matches!(decode_v2(&users[0].data), Ok(RecordV2::Table(t)) if t.len() == 1));
    for (u, e) in users[1..].iter().zip(&events) {
        let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
        assert_eq!(u.partition_key.as_deref(), Some(pk.as_str()));
        assert!(matches!(
            decode_v2(&u.data),
            Ok(RecordV2::Event(EventV2 { .. }))
        ));
    }
}

#[test]
fn a_group_whose_key_is_hashed_travels_in_the_table() {
    let long = "d".repeat(200);
    let e =
        Event::new(common::arn(1), "210987654321", &long, 3, common::t0()).with_event_id("order-1");
    let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
    assert!(pk.starts_with("g:"));
    let (agg, _) = v2_aggregate(&[e.clone(), e.clone().with_event_id("order-2")]);
    let got = decoded(&agg);
    assert_eq!(got[0], e);
    assert_eq!(got[1].dimension, long);
}

#[test]
fn v1_stays_readable_and_mixes_with_v2_in_one_record_set() {
    let e = event(0, 0, 2, 1, true);
    assert_eq!(decode_payload(&encode_event(&e)).unwrap(), e);
    assert!(!is_binary(&encode_event(&e)));
    assert!(is_binary(&encode_single(&e)));
    // A plain JSON record (boto3) and a plain v2 single both decode as one event.
    assert_eq!(decoded(&encode_event(&e)), vec![e.clone()]);
    assert_eq!(decoded(&encode_single(&e)), vec![e]);
}

#[test]
fn pack_writes_v2_aggregates_routed_like_v1_and_a_lone_event_plain() {
    let map = ShardMap::uniform(2);
    let events: Vec<Event> = (0..50)
        .map(|i| event(i % 7, i as i64, 1, i as u64, false))
        .collect();
    let users: Vec<UserRec<usize>> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
            UserRec {
                payload: Bytes::from(encode_single(e)),
                split: None,
                hash: partition_hash(&pk),
                partition_key: pk.into(),
                meta: i,
            }
        })
        .collect();
    let packed = pack(users, |h| map.shard_index(h), true, 51_200);
    let mut seen = Vec::new();
    for p in &packed {
        let got = decoded(&p.entry.data);
        assert_eq!(got.len(), p.users.len());
        for (e, &i) in got.iter().zip(&p.users) {
            assert_eq!(e, &events[i]);
            let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
            assert_eq!(
                map.shard_index(partition_hash(&pk)),
                map.shard_index(p.route_hash)
            );
            seen.push(i);
        }
    }
    seen.sort();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
    let lone = pack(
        vec![UserRec {
            payload: Bytes::from(encode_single(&events[0])),
            split: None,
            hash: 0,
            partition_key: "k".into(),
            meta: 0,
        }],
        |_| Some(0),
        true,
        51_200,
    );
    assert_eq!(decode_payload(&lone[0].entry.data).unwrap(), events[0]);
}

/// Packing takes a user record's given split ([`UserRec::split`]) for the one it would read:
/// the same Kinesis records, byte for byte, whether the splits are given or not.
#[test]
fn pack_with_given_splits_writes_the_same_records() {
    let map = ShardMap::uniform(3);
    let users = |given: bool| -> Vec<UserRec<usize>> {
        (0..400)
            .map(|i| {
                let e = event(i % 11, i as i64, 1 + i as u64 % 5, i as u64, i % 4 == 0);
                let pk = if i % 9 == 0 {
                    format!("other-{}", i % 2)
                } else {
                    partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension)
                };
                let payload = Bytes::from(encode_single(&e));
                let split = given
                    .then(|| split_single_ranges(&payload, &pk))
                    .flatten()
                    .map(|(entry, fields)| (entry.start as u32, fields.start as u32));
                UserRec {
                    payload,
                    split,
                    hash: partition_hash(&pk),
                    partition_key: pk.into(),
                    meta: i,
                }
            })
            .collect()
    };
    let read = pack(users(false), |h| map.shard_index(h), true, 4_096);
    let given = pack(users(true), |h| map.shard_index(h), true, 4_096);
    assert!(read.len() > 3, "several aggregates per shard");
    assert_eq!(read.len(), given.len());
    for (a, b) in read.iter().zip(&given) {
        assert_eq!(a.entry, b.entry);
        assert_eq!(a.users, b.users);
    }
}

/// Each shard's aggregates after its first are built in the builder the one before left
/// (emptied, its room kept): every aggregate is still byte for byte what a new builder
/// writes for its user records, and a lone user record still goes plain.
#[test]
fn each_aggregate_is_what_a_new_builder_writes_for_its_user_records() {
    let map = ShardMap::uniform(3);
    let singles: Vec<(String, Bytes)> = (0..600)
        .map(|i| {
            let e = event(i % 13, i as i64, 1 + i as u64 % 7, i as u64, i % 5 == 0);
            let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
            (pk, Bytes::from(encode_single(&e)))
        })
        .collect();
    let users: Vec<UserRec<usize>> = singles
        .iter()
        .enumerate()
        .map(|(i, (pk, payload))| UserRec {
            payload: payload.clone(),
            split: None,
            hash: partition_hash(pk),
            partition_key: pk.as_str().into(),
            meta: i,
        })
        .collect();
    let packed = pack(users, |h| map.shard_index(h), true, 2_048);
    let mut per_shard = std::collections::HashMap::<usize, usize>::new();
    for p in &packed {
        *per_shard
            .entry(map.shard_index(p.route_hash).unwrap())
            .or_default() += 1;
        if p.users.len() == 1 {
            assert_eq!(p.entry.data, singles[p.users[0]].1, "a lone one goes plain");
            continue;
        }
        let mut fresh = AggregateV2Builder::new();
        for &i in &p.users {
            assert!(fresh.add(&singles[i].0, &singles[i].1));
        }
        assert_eq!(p.entry.data, fresh.finish());
    }
    assert!(
        per_shard.values().all(|&n| n > 3),
        "several aggregates a shard: {per_shard:?}"
    );
    // Windows of one packer: a window whose shard got one user record (written plain, its
    // aggregate dropped unwritten), then a window of many for the same shard.
    let user = |i: usize| UserRec {
        payload: singles[i].1.clone(),
        split: None,
        hash: 0,
        partition_key: singles[i].0.as_str().into(),
        meta: i,
    };
    let mut packer = Packer::new(true, 51_200);
    let mut out = Vec::new();
    packer.push(user(0), |_| Some(0), &mut out);
    packer.finish(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].entry.data, singles[0].1, "a lone one goes plain");
    out.clear();
    for i in 1..40 {
        packer.push(user(i), |_| Some(0), &mut out);
    }
    packer.finish(&mut out);
    let mut fresh = AggregateV2Builder::new();
    for (pk, single) in &singles[1..40] {
        assert!(fresh.add(pk, single));
    }
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].entry.data, fresh.finish());
}

#[test]
fn at_300_groups_an_event_costs_at_most_a_third_of_a_json_record() {
    // 3,000 events over 300 groups, packed at the default aggregate size (no collapse).
    let events: Vec<Event> = (0..3_000)
        .map(|i| {
            event(
                (i * 7919) % 300,
                i as i64,
                1 + (i % 9) as u64,
                i as u64 * 3,
                false,
            )
        })
        .collect();
    let json: usize = events.iter().map(|e| encode_event(e).len()).sum::<usize>() / events.len();
    let users: Vec<UserRec<()>> = events
        .iter()
        .map(|e| {
            let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
            UserRec {
                payload: Bytes::from(encode_single(e)),
                split: None,
                hash: 0,
                partition_key: pk.into(),
                meta: (),
            }
        })
        .collect();
    let packed = pack(users, |_| Some(0), true, 51_200);
    let bytes: usize = packed.iter().map(|p| p.entry.billed_size()).sum();
    let per_event = bytes as f64 / events.len() as f64;
    assert!(
        per_event * 3.0 <= json as f64,
        "{per_event:.1} bytes per event against a {json}-byte JSON record"
    );
}

#[test]
fn each_kind_of_bad_v2_input_has_its_own_reason() {
    let e = event(0, 0, 2, 0, false);
    let single = encode_single(&e);
    let reason = |d: &[u8]| decode_payload(d).unwrap_err().reason();
    assert_eq!(reason(&single[..single.len() - 3]), "V2Truncated");
    assert_eq!(reason(&[0x02]), "V2Truncated");
    let mut bad_varint = vec![0x02, 0x01, 0x18];
    bad_varint.extend([0xff; 11]);
    assert_eq!(reason(&bad_varint), "V2BadVarint");
    assert_eq!(reason(&[0x03, 0x01, 0x18, 0x01]), "UnknownWireVersion");
    assert_eq!(reason(&[0x01, 0x00]), "UnknownWireVersion");
    assert_eq!(reason(&[0x02, 0x07]), "V2Malformed");
    // An unknown field (99, varint).
    let mut unknown = single.clone();
    unknown.extend([0x98, 0x06, 0x01]);
    assert_eq!(reason(&unknown), "V2Malformed");
    // A ref outside an aggregate, and a ref to an entry the table does not have.
    let (agg, _) = v2_aggregate(&[e.clone(), e.clone().with_event_id("x")]);
    let users = deaggregate(&agg).unwrap();
    assert_eq!(reason(&users[1].data), "V2UnknownGroup");
    let mut b = AggregateBuilder::new();
    b.add(
        users[0].partition_key.as_deref().unwrap(),
        None,
        users[0].data.clone(),
    );
    b.add(
        "k",
        None,
        Bytes::from_static(&[0x02, 0x02, 0x10, 0x05, 0x20, 0x01, 0x30, 0x01]),
    );
    b.add(
        users[1].partition_key.as_deref().unwrap(),
        None,
        users[1].data.clone(),
    );
    let out = decode_events(&b.finish()).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[0].event.as_ref().unwrap_err().reason(),
        "V2UnknownGroup"
    );
    assert_eq!(
        out[1].event.as_ref().unwrap(),
        &e,
        "the other event is kept"
    );
}
