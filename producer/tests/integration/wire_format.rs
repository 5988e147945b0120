//! The v1 payload and the KPL aggregate format: exact shape, strict decoding, round trips.

use awsmp_contract::wire::{
    AggregateBuilder, KPL_MAGIC, deaggregate, decode_aggregated, decode_event, encode_aggregated,
    encode_event, pb,
};
use awsmp_producer::{Event, Tag, UsageAllocation};
use bytes::Bytes;
use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use prost::Message;

const ARN: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

fn sample() -> Event {
    Event::new(
        ARN,
        "210987654321",
        "requests",
        42,
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 34, 56).unwrap()
            + chrono::Duration::milliseconds(789),
    )
    .with_event_id("e-1")
    .with_producer_id("svc-a")
    .with_allocations(vec![
        UsageAllocation::new(40, vec![Tag::new("team", "a")]),
        UsageAllocation::new(2, vec![Tag::new("team", "b"), Tag::new("env", "prod")]),
    ])
}

fn reason_of(json: &str) -> &'static str {
    decode_event(json.as_bytes()).unwrap_err().reason()
}

fn minimal(extra: &str) -> String {
    format!(
        r#"{{"v":1,"eventId":"e","licenseArn":"{ARN}","customerAWSAccountId":"123456789012","dimension":"d","quantity":1,"timestamp":"2026-11-30T12:00:00.000Z"{extra}}}"#
    )
}

#[test]
fn v1_payload_has_exactly_the_spec_fields_in_order() {
    let json = String::from_utf8(encode_event(&sample())).unwrap();
    assert_eq!(
        json,
        format!(
            r#"{{"v":1,"eventId":"e-1","licenseArn":"{ARN}","customerAWSAccountId":"210987654321","dimension":"requests","quantity":42,"timestamp":"2026-11-30T12:34:56.789Z","producerId":"svc-a","usageAllocations":[{{"AllocatedUsageQuantity":40,"Tags":[{{"Key":"team","Value":"a"}}]}},{{"AllocatedUsageQuantity":2,"Tags":[{{"Key":"team","Value":"b"}},{{"Key":"env","Value":"prod"}}]}}]}}"#
        )
    );
    let mut bare = sample();
    bare.producer_id = None;
    bare.usage_allocations = None;
    let json = String::from_utf8(encode_event(&bare)).unwrap();
    assert!(
        !json.contains("producerId") && !json.contains("usageAllocations"),
        "{json}"
    );
}

#[test]
fn v1_payload_round_trips() {
    let e = sample();
    assert_eq!(decode_event(&encode_event(&e)).unwrap(), e);
}

#[test]
fn minimal_payload_from_another_producer_decodes() {
    let e = decode_event(minimal("").as_bytes()).unwrap();
    assert_eq!(e.quantity, 1);
    assert_eq!(e.producer_id, None);
    assert_eq!(e.usage_allocations, None);
    // null for an optional field is "absent", as Python's json.dumps(None) writes it.
    let e =
        decode_event(minimal(r#","producerId":null,"usageAllocations":null"#).as_bytes()).unwrap();
    assert_eq!((e.producer_id, e.usage_allocations), (None, None));
    // Other RFC 3339 spellings of a UTC instant; sub-millisecond digits are dropped.
    let j = minimal("").replace(
        "2026-11-30T12:00:00.000Z",
        "2026-11-30T12:00:00.123456+00:00",
    );
    let e = decode_event(j.as_bytes()).unwrap();
    assert_eq!(e.timestamp.timestamp_subsec_millis(), 123);
    assert_eq!(e.timestamp.timestamp_subsec_nanos(), 123_000_000);
}

/// Bad JSON, versions and the field set.
fn envelope_cases() -> Vec<(String, &'static str)> {
    vec![
        ("not json".into(), "InvalidJson"),
        ("[1,2]".into(), "InvalidJson"),
        (format!("{} trailing", minimal("")), "InvalidJson"),
        (
            minimal("").replace(r#""v":1"#, r#""v":2"#),
            "UnknownVersion",
        ),
        (
            minimal("").replace(r#""v":1"#, r#""v":"1""#),
            "UnknownVersion",
        ),
        (minimal("").replace(r#""v":1,"#, ""), "MissingField"),
        (minimal(r#","extra":true"#), "UnknownField"),
        (minimal(r#","quantity":2"#), "DuplicateField"),
        (minimal("").replace(r#""eventId":"e","#, ""), "MissingField"),
        (minimal("").replace(r#""quantity":1,"#, ""), "MissingField"),
    ]
}

/// Bad quantities and timestamps.
fn quantity_and_timestamp_cases() -> Vec<(String, &'static str)> {
    vec![
        (
            minimal("").replace(
                r#""timestamp":"2026-11-30T12:00:00.000Z""#,
                r#""timestamp":null"#,
            ),
            "MalformedTimestamp",
        ),
        (
            minimal("").replace(r#""quantity":1"#, r#""quantity":1.5"#),
            "NonIntegerQuantity",
        ),
        (
            minimal("").replace(r#""quantity":1"#, r#""quantity":1.0"#),
            "NonIntegerQuantity",
        ),
        (
            minimal("").replace(r#""quantity":1"#, r#""quantity":"1""#),
            "NonIntegerQuantity",
        ),
        (
            minimal("").replace(r#""quantity":1"#, r#""quantity":1e3"#),
            "NonIntegerQuantity",
        ),
        (
            minimal("").replace(r#""quantity":1"#, r#""quantity":18446744073709551616"#),
            "NonIntegerQuantity",
        ),
        (
            minimal("").replace(r#""quantity":1"#, r#""quantity":-1"#),
            "NegativeQuantity",
        ),
        (
            minimal("").replace("2026-11-30T12:00:00.000Z", "2026-11-30 12:00"),
            "MalformedTimestamp",
        ),
        (
            minimal("").replace("2026-11-30T12:00:00.000Z", "2026-11-30T14:00:00.000+02:00"),
            "MalformedTimestamp",
        ),
        (
            minimal("").replace("2026-11-30T12:00:00.000Z", "1700000000"),
            "MalformedTimestamp",
        ),
    ]
}

/// Bad license, account, dimension, event and producer ids.
fn identity_cases() -> Vec<(String, &'static str)> {
    vec![
        (
            minimal("").replace(ARN, "arn:aws:license-manager::123:license:l-1"),
            "InvalidLicenseArn",
        ),
        (
            minimal("").replace(r#""123456789012""#, r#""12345""#),
            "InvalidAccountId",
        ),
        (
            minimal("").replace(r#""dimension":"d""#, r#""dimension":"""#),
            "EmptyDimension",
        ),
        (
            minimal("").replace(r#""dimension":"d""#, r#""dimension":7"#),
            "WrongFieldType",
        ),
        (
            minimal("").replace(r#""eventId":"e""#, r#""eventId":"""#),
            "InvalidEventId",
        ),
        (minimal(r#","producerId":5"#), "WrongFieldType"),
        (minimal(r#","producerId":"""#), "EmptyProducerId"),
    ]
}

/// Bad usage allocations.
fn allocation_cases() -> Vec<(String, &'static str)> {
    vec![
        (minimal(r#","usageAllocations":{}"#), "MalformedAllocations"),
        (minimal(r#","usageAllocations":[]"#), "MalformedAllocations"),
        (
            minimal(r#","usageAllocations":[{"AllocatedUsageQuantity":1}]"#),
            "MalformedAllocations",
        ),
        (
            minimal(r#","usageAllocations":[{"AllocatedUsageQuantity":1,"Tags":[],"X":1}]"#),
            "MalformedAllocations",
        ),
        (
            minimal(r#","usageAllocations":[{"AllocatedUsageQuantity":1,"Tags":[{"Key":"k"}]}]"#),
            "MalformedAllocations",
        ),
        (
            minimal(
                r#","usageAllocations":[{"AllocatedUsageQuantity":1,"Tags":[{"Key":"k","Value":"v","X":"y"}]}]"#,
            ),
            "MalformedAllocations",
        ),
        (
            minimal(
                r#","usageAllocations":[{"AllocatedUsageQuantity":-1,"Tags":[{"Key":"k","Value":"v"}]}]"#,
            ),
            "NegativeOrNonIntegerAllocation",
        ),
        (
            minimal(
                r#","usageAllocations":[{"AllocatedUsageQuantity":0.5,"Tags":[{"Key":"k","Value":"v"}]}]"#,
            ),
            "NegativeOrNonIntegerAllocation",
        ),
        (
            minimal(
                r#","usageAllocations":[{"AllocatedUsageQuantity":2,"Tags":[{"Key":"k","Value":"v"}]}]"#,
            ),
            "AllocationSumMismatch",
        ),
        (
            minimal(
                r#","usageAllocations":[{"AllocatedUsageQuantity":1,"Tags":[{"Key":"","Value":"v"}]}]"#,
            ),
            "MissingTagKeyOrValue",
        ),
        (
            minimal(
                r#","usageAllocations":[{"AllocatedUsageQuantity":1,"Tags":[{"Key":"a","Value":"v"},{"Key":"b","Value":"v"},{"Key":"c","Value":"v"},{"Key":"d","Value":"v"},{"Key":"e","Value":"v"},{"Key":"f","Value":"v"}]}]"#,
            ),
            "TooManyTags",
        ),
    ]
}

#[test]
fn each_bad_payload_gets_its_own_reason() {
    let cases = [
        envelope_cases(),
        quantity_and_timestamp_cases(),
        identity_cases(),
        allocation_cases(),
    ]
    .concat();
    for (json, reason) in cases {
        assert_eq!(reason_of(&json), reason, "{json}");
    }
}

#[test]
fn version_is_checked_before_fields() {
    // A v2 payload may have fields v1 does not know: report the version, not the field.
    let j = minimal(r#","compact":true"#).replace(r#""v":1"#, r#""v":2"#);
    assert_eq!(reason_of(&j), "UnknownVersion");
}

#[test]
fn aggregate_round_trips_with_tables_and_indexes() {
    let data: Vec<Vec<u8>> = (0..5)
        .map(|i| format!("payload-{i}").into_bytes())
        .collect();
    let recs = vec![
        ("pk-a", None, data[0].as_slice()),
        ("pk-b", Some("123"), data[1].as_slice()),
        ("pk-a", Some("123"), data[2].as_slice()),
        ("pk-c", Some("456"), data[3].as_slice()),
        ("pk-a", None, data[4].as_slice()),
    ];
    let bytes = encode_aggregated(recs.clone());
    assert!(bytes.starts_with(&KPL_MAGIC));
    let users = deaggregate(&bytes).unwrap();
    assert_eq!(users.len(), 5);
    for (i, (u, (pk, ehk, d))) in users.iter().zip(&recs).enumerate() {
        assert_eq!(u.partition_key.as_deref(), Some(*pk));
        assert_eq!(u.explicit_hash_key.as_deref(), *ehk);
        assert_eq!(&u.data[..], *d);
        assert_eq!(u.sub_sequence_number, i as u64);
        assert!(u.aggregated);
    }
    // Keys are stored once in the tables.
    let body = &bytes[4..bytes.len() - 16];
    let agg = pb::AggregatedRecord::decode(body).unwrap();
    assert_eq!(agg.partition_key_table, vec!["pk-a", "pk-b", "pk-c"]);
    assert_eq!(agg.explicit_hash_key_table, vec!["123", "456"]);
}

#[test]
fn plain_records_pass_through_whole() {
    let json = encode_event(&sample());
    let users = deaggregate(&json).unwrap();
    assert_eq!(users.len(), 1);
    assert!(!users[0].aggregated);
    assert_eq!(users[0].partition_key, None);
    assert_eq!(&users[0].data[..], &json[..]);
    assert_eq!(decode_aggregated(&json).unwrap_err().reason(), "BadMagic");
}

#[test]
fn corrupt_aggregates_are_rejected_with_reasons() {
    let good = encode_aggregated([("pk", None, &b"x"[..])]);
    assert_eq!(deaggregate(&good).unwrap().len(), 1);

    let mut flipped = good.to_vec();
    flipped[6] ^= 0x01;
    assert_eq!(deaggregate(&flipped).unwrap_err().reason(), "Md5Mismatch");

    let mut trailer = good.to_vec();
    *trailer.last_mut().unwrap() ^= 0xff;
    assert_eq!(deaggregate(&trailer).unwrap_err().reason(), "Md5Mismatch");

    assert_eq!(deaggregate(&KPL_MAGIC).unwrap_err().reason(), "Truncated");

    let with_md5 = |body: &[u8]| {
        use md5::{Digest, Md5};
        let mut v = KPL_MAGIC.to_vec();
        v.extend_from_slice(body);
        v.extend_from_slice(Md5::digest(body).as_slice());
        v
    };
    assert_eq!(
        deaggregate(&with_md5(&[0xff, 0xff, 0xff]))
            .unwrap_err()
            .reason(),
        "MalformedProtobuf"
    );
    assert_eq!(
        deaggregate(&with_md5(&[])).unwrap_err().reason(),
        "EmptyAggregate"
    );

    let out_of_range = pb::AggregatedRecord {
        partition_key_table: vec!["a".into()],
        explicit_hash_key_table: vec![],
        records: vec![pb::Record {
            partition_key_index: 3,
            explicit_hash_key_index: None,
            data: Bytes::from_static(b"x"),
            tags: vec![],
        }],
    };
    assert_eq!(
        deaggregate(&with_md5(&out_of_range.encode_to_vec()))
            .unwrap_err()
            .reason(),
        "MalformedProtobuf"
    );
    let bad_ehk = pb::AggregatedRecord {
        records: vec![pb::Record {
            partition_key_index: 0,
            explicit_hash_key_index: Some(0),
            data: Bytes::from_static(b"x"),
            tags: vec![],
        }],
        ..out_of_range
    };
    assert_eq!(
        deaggregate(&with_md5(&bad_ehk.encode_to_vec()))
            .unwrap_err()
            .reason(),
        "MalformedProtobuf"
    );
}

#[test]
fn required_zero_index_is_on_the_wire() {
    // proto2 `required` fields must be written even when 0, or strict readers (the Python and
    // Java KPL libraries) reject the message.
    let bytes = encode_aggregated([("pk", None, &b"x"[..])]);
    let body = &bytes[4..bytes.len() - 16];
    // records field (tag 3, len) → Record { 08 00 (partition_key_index = 0), 1a 01 78 (data) }
    assert!(
        body.windows(5).any(|w| w == [0x08, 0x00, 0x1a, 0x01, b'x']),
        "{body:02x?}"
    );
}

fn arb_tag() -> impl Strategy<Value = Tag> {
    ("[a-z]{1,6}", "\\PC{1,8}").prop_map(|(k, v)| Tag::new(k, v))
}

prop_compose! {
    fn arb_event()(
        id in "[A-Za-z0-9_-]{1,40}",
        partition in prop::sample::select(vec!["aws", "aws-cn", "aws-us-gov"]),
        owner in "[0-9]{12}",
        lic in "[0-9a-f]{32}",
        account in "[0-9]{12}",
        dimension in "\\PC{1,30}",
        millis in 0i64..4_102_444_800_000,
        producer in proptest::option::of("\\PC{1,20}"),
        allocs in proptest::option::of(prop::collection::vec((0u64..1_000_000, prop::collection::vec(arb_tag(), 1..=5)), 1..6)),
        quantity_if_plain in any::<u64>(),
    ) -> Event {
        let (quantity, usage_allocations) = match allocs {
            Some(a) => {
                let q = a.iter().map(|(q, _)| q).sum();
                (q, Some(a.into_iter().map(|(q, t)| UsageAllocation::new(q, t)).collect::<Vec<_>>()))
            }
            None => (quantity_if_plain, None),
        };
        Event {
            event_id: id,
            license_arn: format!("arn:{partition}:license-manager::{owner}:license:l-{lic}"),
            customer_aws_account_id: account,
            dimension,
            quantity,
            timestamp: Utc.timestamp_millis_opt(millis).unwrap(),
            producer_id: producer,
            usage_allocations,
        }
    }
}

proptest! {
    #[test]
    fn a_v2_singles_length_is_known_without_encoding(e in arb_event()) {
        let encoded = awsmp_contract::wire::encode_single_bytes(&e, None);
        prop_assert_eq!(awsmp_contract::wire::single_len(&e, None), encoded.len());
        prop_assert_eq!(&encoded[..], &awsmp_contract::wire::encode_single(&e)[..]);
        let generated = awsmp_contract::event_id::GeneratedId { epoch: 0xabc, lane: (e.quantity % 16) as u8, seq: 1 + e.quantity % 1_000_000 };
        let with_id = Event { event_id: generated.to_string(), ..e };
        prop_assert_eq!(
            awsmp_contract::wire::single_len(&with_id, Some(generated)),
            awsmp_contract::wire::encode_single(&with_id).len()
        );
        prop_assert_eq!(
            &awsmp_contract::wire::encode_single_bytes(&with_id, Some(generated))[..],
            &awsmp_contract::wire::encode_single(&with_id)[..]
        );
    }

    #[test]
    fn any_valid_event_round_trips(e in arb_event()) {
        prop_assert_eq!(e.validate(false), Ok(()));
        prop_assert_eq!(decode_event(&encode_event(&e)).unwrap(), e);
    }

    #[test]
    fn any_aggregate_round_trips_and_sizes_exactly(
        recs in prop::collection::vec(
            ("[a-c]{1,3}", proptest::option::of("[0-9]{1,39}"), prop::collection::vec(any::<u8>(), 0..300)),
            1..60,
        )
    ) {
        let mut b = AggregateBuilder::new();
        for (pk, ehk, data) in &recs {
            let predicted = b.encoded_len_with(pk, ehk.as_deref(), data.len());
            b.add(pk, ehk.as_deref(), Bytes::from(data.clone()));
            prop_assert_eq!(b.encoded_len(), predicted);
        }
        let predicted = b.encoded_len();
        let bytes = b.finish();
        prop_assert_eq!(bytes.len(), predicted);
        let users = deaggregate(&bytes).unwrap();
        prop_assert_eq!(users.len(), recs.len());
        for (u, (pk, ehk, data)) in users.iter().zip(&recs) {
            prop_assert_eq!(u.partition_key.as_deref(), Some(pk.as_str()));
            prop_assert_eq!(u.explicit_hash_key.as_deref(), ehk.as_deref());
            prop_assert_eq!(&u.data[..], &data[..]);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(data in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_event(&data);
        let mut agg = KPL_MAGIC.to_vec();
        agg.extend_from_slice(&data);
        let _ = deaggregate(&agg);
    }
}
