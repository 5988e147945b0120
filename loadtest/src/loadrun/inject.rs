//! Bad inputs injected on purpose, through the real path: plain records put on the run's
//! stream (`PutRecord`), read by the consumer, metered by the pipeline, refused by the
//! simulator — each declared with the reason it must end with, so the strict check
//! ([`crate::conservation`]) passes only if each ends exactly so while every valid unit is
//! billed. On by default in all-faults runs (`--bad-inputs`); local runs only (the injection
//! license is one of the run's own catalog).
//!
//! | input | must end |
//! |---|---|
//! | malformed JSON | `consumer:InvalidJson` (a record without usage) |
//! | `"v": 2` | `consumer:UnknownVersion` (a record without usage) |
//! | a negative quantity | `consumer:NegativeQuantity` (a record without usage) |
//! | an unknown dimension | `pipeline:record:Error` (AWS refuses it, `InvalidUsageDimensionException`; bisection isolates it) |
//! | a tag value outside AWS's `Tag` pattern | `pipeline:row:RejectedClientSide:InvalidTagCharacters` (refused before any call) |
//! | an event id re-used for another quantity | `consumer:DedupHit`: dropped, the first event billed |
//!
//! A stale client timestamp is no bad input on this path: the load test produces through the
//! trusted producer → Kinesis path (policy `arrival`), which bills at arrival whatever the
//! client's clock says (docs/guarantees.md, "Billing time"). A quantity of 0 is valid (payload
//! v1: an integer ≥ 0, docs/row-contract.md), so it is no bad input either.

use crate::conservation::Group;
use anyhow::{Context, Result};
use aws_sdk_kinesis::primitives::Blob;
use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The dimension of the unknown-dimension input: not in the run's catalog.
pub(super) const UNKNOWN_DIMENSION: &str = "injected-unknown-dimension";
/// The dimension of the refused-tag input (refused client-side, it never reaches AWS).
pub(super) const BAD_TAG_DIMENSION: &str = "injected-bad-tag";
/// A tag value AWS refuses: `|` is outside the `Tag` pattern
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_Tag.html>).
const BAD_TAG_VALUE: &str = "search|ads";

/// What the run injected, as the conservation check's inputs.
#[derive(Debug, Default)]
pub(super) struct Injection {
    /// Valid units of the injection (the first event of the re-used id): must be billed.
    pub(super) produced: BTreeMap<Group, u64>,
    /// Units that must end unbilled, by group and reason.
    pub(super) units: BTreeMap<(Group, String), u64>,
    /// Records without usage, by the reason they must end with.
    pub(super) records: BTreeMap<String, u64>,
    /// Units under a re-used event id, by group: must be dropped.
    pub(super) duplicates: BTreeMap<Group, u64>,
}

/// A valid v1 event of `group`.
fn event(group: &Group, quantity: i64, event_id: &str) -> Value {
    json!({
        "v": 1,
        "eventId": event_id,
        "licenseArn": group.0,
        "customerAWSAccountId": group.1,
        "dimension": group.2,
        "quantity": quantity,
        "timestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        "producerId": "loadtest-bad-inputs",
    })
}

/// The injected records, in order, with their partition keys, and what they declare.
/// `license` is the injection license (account and ARN), `dimension` a catalog dimension.
pub(super) fn plan(
    license: &(String, String),
    dimension: &str,
) -> (Vec<(String, Vec<u8>)>, Injection) {
    let group = |d: &str| (license.0.clone(), license.1.clone(), d.to_owned());
    let id = || uuid::Uuid::new_v4().to_string();
    let mut inj = Injection::default();
    let mut bad_json = event(&group(dimension), 3, &id()).to_string();
    bad_json.truncate(bad_json.len() / 2);
    let mut records: Vec<(String, Vec<u8>)> = vec![("bad-json".into(), bad_json.into_bytes())];
    inj.records.insert("consumer:InvalidJson".into(), 1);
    let mut record =
        |key: &str, v: &Value| records.push((key.to_owned(), v.to_string().into_bytes()));

    let mut v2 = event(&group(dimension), 4, &id());
    v2["v"] = json!(2);
    record("bad-version", &v2);
    inj.records.insert("consumer:UnknownVersion".into(), 1);

    record("bad-quantity", &event(&group(dimension), -5, &id()));
    inj.records.insert("consumer:NegativeQuantity".into(), 1);

    record(
        "bad-dimension",
        &event(&group(UNKNOWN_DIMENSION), 11, &id()),
    );
    inj.units.insert(
        (group(UNKNOWN_DIMENSION), "pipeline:record:Error".into()),
        11,
    );

    let mut tagged = event(&group(BAD_TAG_DIMENSION), 13, &id());
    tagged["usageAllocations"] = json!([
        {"AllocatedUsageQuantity": 13, "Tags": [{"Key": "team", "Value": BAD_TAG_VALUE}]}
    ]);
    record("bad-tag", &tagged);
    inj.units.insert(
        (
            group(BAD_TAG_DIMENSION),
            "pipeline:row:RejectedClientSide:InvalidTagCharacters".into(),
        ),
        13,
    );

    // The same id twice, on one partition key (one shard, in order): the first is billed.
    let reused = id();
    record("reused-id", &event(&group(dimension), 5, &reused));
    record("reused-id", &event(&group(dimension), 7, &reused));
    inj.produced.insert(group(dimension), 5);
    inj.duplicates.insert(group(dimension), 7);
    (records, inj)
}

/// Put the bad inputs on `stream` for `license`; what they declare.
pub(super) async fn inject(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    license: &(String, String),
    dimension: &str,
) -> Result<Injection> {
    let (records, injection) = plan(license, dimension);
    for (key, data) in records {
        kinesis
            .put_record()
            .stream_name(stream)
            .partition_key(key)
            .data(Blob::new(data))
            .send()
            .await
            .with_context(|| format!("injecting a bad input into {stream}"))?;
    }
    Ok(injection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bad_input_decodes_as_it_is_declared() {
        use awsmp_contract::wire::decode_event;
        let license = crate::loadrun::run_license(7, 3);
        let (records, inj) = plan(&license, "dim0");
        assert_eq!(records.len(), 7);
        let reasons: Vec<Result<(), &str>> = records
            .iter()
            .map(|(_, d)| decode_event(d).map(drop).map_err(|e| e.reason()))
            .collect();
        assert_eq!(
            reasons[..3],
            [
                Err("InvalidJson"),
                Err("UnknownVersion"),
                Err("NegativeQuantity")
            ]
        );
        assert!(reasons[3..].iter().all(Result::is_ok), "{reasons:?}");
        assert_eq!(inj.records.values().sum::<u64>(), 3);
        assert!(!awsmp_contract::limits::marketplace::matches_tag_pattern(
            BAD_TAG_VALUE
        ));
        assert_eq!(
            records[5].0, records[6].0,
            "the re-used id on one partition key"
        );
        assert_eq!(inj.duplicates.values().sum::<u64>(), 7);
    }
}
