//! Records written by the independent Python `aws_kinesis_agg` library (committed fixtures from
//! `tests/interop/make_fixtures.py`) decode here event for event, and our encoder writes the
//! same bytes for the same user records.

use std::path::PathBuf;

use awsmp_contract::wire::{
    AggregateBuilder, deaggregate, decode_event, encode_event, is_aggregated,
};
use bytes::Bytes;
use serde::Deserialize;

#[derive(Deserialize)]
struct Manifest {
    records: Vec<Fixture>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Fixture {
    file: String,
    partition_key: String,
    explicit_hash_key: Option<String>,
    user_records: Vec<Expected>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Expected {
    partition_key: Option<String>,
    explicit_hash_key: Option<String>,
    data: String,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/fixtures")
}

fn manifest() -> Manifest {
    let text = std::fs::read_to_string(dir().join("python_records.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn python_written_records_decode_event_for_event() {
    let m = manifest();
    let mut events = 0;
    for f in &m.records {
        let bytes = std::fs::read(dir().join(&f.file)).unwrap();
        let users = deaggregate(&bytes).unwrap_or_else(|e| panic!("{}: {e}", f.file));
        assert_eq!(users.len(), f.user_records.len(), "{}", f.file);
        for (u, want) in users.iter().zip(&f.user_records) {
            assert_eq!(u.partition_key, want.partition_key, "{}", f.file);
            assert_eq!(u.explicit_hash_key, want.explicit_hash_key, "{}", f.file);
            assert_eq!(&u.data[..], want.data.as_bytes(), "{}", f.file);
            let event = decode_event(&u.data).unwrap_or_else(|e| panic!("{}: {e}", f.file));
            // Same event, field for field: re-encode and compare as JSON values (Python escapes
            // non-ASCII, we do not, so the bytes differ while the values do not).
            let ours: serde_json::Value = serde_json::from_slice(&encode_event(&event)).unwrap();
            let theirs: serde_json::Value = serde_json::from_str(&want.data).unwrap();
            assert_eq!(ours, theirs, "{}", f.file);
            // Each user record's partition key is its event's group key, as we compute it.
            let group_key = awsmp_producer::partition::partition_key(
                &event.license_arn,
                &event.customer_aws_account_id,
                &event.dimension,
            );
            assert_eq!(
                u.partition_key.as_ref().unwrap_or(&f.partition_key),
                &group_key
            );
            events += 1;
        }
        // The outer key is the first user record's, as in the KPL.
        if let Some(first) = f.user_records.first().filter(|u| u.partition_key.is_some()) {
            assert_eq!(first.partition_key.as_ref(), Some(&f.partition_key));
            assert_eq!(first.explicit_hash_key, f.explicit_hash_key);
        }
    }
    assert_eq!(events, 12 + 12 + 1, "all fixtures were read");
}

#[test]
fn our_encoder_writes_the_same_bytes_as_the_python_library() {
    for f in manifest().records {
        let bytes = std::fs::read(dir().join(&f.file)).unwrap();
        if !is_aggregated(&bytes) {
            continue;
        }
        let mut b = AggregateBuilder::new();
        for u in &f.user_records {
            b.add(
                u.partition_key.as_deref().unwrap(),
                u.explicit_hash_key.as_deref(),
                Bytes::from(u.data.clone().into_bytes()),
            );
        }
        assert_eq!(b.encoded_len(), bytes.len(), "{}", f.file);
        assert_eq!(&b.finish()[..], &bytes[..], "{}", f.file);
    }
}

#[test]
fn a_corrupted_python_record_is_rejected_not_misread() {
    let bytes = std::fs::read(dir().join("py-agg-0.bin")).unwrap();
    for pos in [5, bytes.len() / 2, bytes.len() - 1] {
        let mut b = bytes.clone();
        b[pos] ^= 0x40;
        assert_eq!(
            deaggregate(&b).unwrap_err().reason(),
            "Md5Mismatch",
            "byte {pos}"
        );
    }
}
