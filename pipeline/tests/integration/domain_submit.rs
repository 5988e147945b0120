//! Property tests of submission planning, bisection and result mapping.

use std::collections::BTreeMap;

use awsmp_contract::keys::{GroupKey, HourBucket, Identity};
use awsmp_contract::limits::marketplace::{MAX_REQUEST_BYTES, MAX_USAGE_RECORDS_PER_CALL};
use awsmp_contract::row::{Allocation, Tag};
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord, plan_calls, submission_order};
use awsmp_pipeline::domain::bisect::{
    Bisector, CallOutcome, MAX_BISECTION_DEPTH, POISON_EXCEPTIONS, Verdict,
};
use awsmp_pipeline::domain::results::{ApiResponse, ApiResult, ApiStatus, Decision, map_response};
use proptest::prelude::*;

fn license(n: u8) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{n:032x}")
}

/// Products of the CA licenses 0..8; licenses 6 and 7 are unknown to the lookup.
fn product_of(license_arn: &str) -> Option<String> {
    (0..6u8)
        .find(|n| license(*n) == license_arn)
        .map(|n| format!("prod{}", n % 3))
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z]{1,12}", ".{0,16}", "[a-z\"\\\\\u{1}]{0,16}"]
}

fn record() -> impl Strategy<Value = SubmitRecord> {
    let allocations = prop::option::of(prop::collection::vec(
        (0..1000u64, prop::collection::vec((text(), text()), 0..=5)),
        1..8,
    ));
    // Some records carry one very long tag value, so calls must also split by bytes.
    let pad = prop_oneof![3 => Just(0usize), 1 => 0..120_000usize];
    (
        prop_oneof![4 => (0..8u8).prop_map(license), 1 => Just("legacyprod".to_owned()), 1 => Just("otherlegacy".to_owned())],
        0..5u32,
        "[a-z_]{1,20}",
        0..48i64,
        any::<bool>(),
        allocations,
        0..u64::from(i32::MAX as u32),
        pad,
    )
        .prop_map(|(lic, account, dimension, hour, deprovisioning, allocs, quantity, pad)| {
            let hour = HourBucket::containing(chrono::DateTime::UNIX_EPOCH).plus_hours(490_000 + hour);
            let mut r = SubmitRecord::new(GroupKey::new(lic, format!("{account:012}"), dimension, hour), quantity, None);
            r.deprovisioning = deprovisioning;
            r.allocations = allocs.map(|a| {
                a.into_iter()
                    .map(|(q, tags)| Allocation { quantity: q, tags: tags.into_iter().map(|(k, v)| Tag::new(k, v)).collect() })
                    .collect()
            });
            if pad > 0 {
                let first = Allocation { quantity: 0, tags: vec![Tag::new("pad", "\"".repeat(pad / 2))] };
                r.allocations.get_or_insert_with(Vec::new).push(first);
            }
            r
        })
}

/// Distinct groups (the aggregated table holds one record per group).
fn records() -> impl Strategy<Value = Vec<SubmitRecord>> {
    prop::collection::vec(record(), 0..120).prop_map(|rs| {
        let mut by_group = BTreeMap::new();
        for r in rs {
            by_group.entry(r.group.clone()).or_insert(r);
        }
        by_group.into_values().collect()
    })
}

/// What the awsJson1.1 body of one record looks like on the wire (the SDK's member names).
fn wire_record(r: &SubmitRecord) -> serde_json::Value {
    let allocations: Option<Vec<serde_json::Value>> = r.allocations.as_ref().map(|a| {
        a.iter()
            .map(|x| {
                serde_json::json!({"AllocatedUsageQuantity": x.quantity,
                    "Tags": x.tags.iter().map(|t| serde_json::json!({"Key": t.key, "Value": t.value})).collect::<Vec<_>>()})
            })
            .collect()
    });
    serde_json::json!({
        "Timestamp": r.group.hour.start().timestamp() as f64 + 0.5,
        "CustomerIdentifier": "",
        "Dimension": r.group.dimension,
        "Quantity": r.quantity,
        "UsageAllocations": allocations,
        "CustomerAWSAccountId": r.group.customer_aws_account_id,
        "LicenseArn": r.group.license_arn,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn plans_respect_every_limit_and_lose_nothing(records in records()) {
        let plan = plan_calls(records.clone(), product_of);
        let mut sorted = records.clone();
        sorted.sort_by(submission_order);
        let position: BTreeMap<GroupKey, usize> = sorted.iter().enumerate().map(|(i, r)| (r.group.clone(), i)).collect();

        // Nothing lost, nothing duplicated.
        let mut seen: Vec<GroupKey> = plan.calls.iter().flat_map(|c| c.records.iter().map(|r| r.group.clone())).collect();
        seen.extend(plan.oversized.iter().map(|r| r.group.clone()));
        seen.sort();
        let mut all: Vec<GroupKey> = records.iter().map(|r| r.group.clone()).collect();
        all.sort();
        prop_assert_eq!(seen, all);

        let mut last_first = None;
        for call in &plan.calls {
            prop_assert!(!call.records.is_empty());
            prop_assert!(call.records.len() <= MAX_USAGE_RECORDS_PER_CALL);
            prop_assert!(call.estimated_bytes <= MAX_REQUEST_BYTES);
            // The estimate bounds the real body.
            let body = serde_json::json!({
                "UsageRecords": call.records.iter().map(wire_record).collect::<Vec<_>>(),
                "ProductCode": match &call.kind { CallKind::Legacy { product_code } => product_code.clone(), _ => String::new() },
            });
            prop_assert!(serde_json::to_vec(&body).unwrap().len() <= call.estimated_bytes);
            // One kind, one product (or one license when the product is unknown).
            for r in &call.records {
                match (&call.kind, r.group.identity()) {
                    (CallKind::ConcurrentAgreements { product_hint: Some(p) }, Identity::ConcurrentAgreements { license_arn, .. }) => {
                        let product = product_of(license_arn);
                        prop_assert_eq!(product.as_ref(), Some(p));
                    }
                    (CallKind::ConcurrentAgreements { product_hint: None }, Identity::ConcurrentAgreements { license_arn, .. }) => {
                        prop_assert_eq!(product_of(license_arn), None);
                        prop_assert_eq!(license_arn, call.records[0].group.license_arn.as_str());
                    }
                    (CallKind::Legacy { product_code }, Identity::Legacy { product_code: p, .. }) => prop_assert_eq!(product_code.as_str(), p),
                    (kind, id) => prop_assert!(false, "{kind:?} holds {id:?}"),
                }
            }
            // Order kept: inside a call, and calls by their first record.
            let pos: Vec<usize> = call.records.iter().map(|r| position[&r.group]).collect();
            prop_assert!(pos.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(last_first.is_none_or(|l| l < pos[0]));
            last_first = Some(pos[0]);
        }
        // Deprovisioning first: no call starting with an ordinary record precedes one starting
        // with a deprovisioning record.
        let firsts: Vec<bool> = plan.calls.iter().map(|c| c.records[0].deprovisioning).collect();
        prop_assert!(firsts.windows(2).all(|w| w[0] || !w[1]));
        for r in &plan.oversized {
            prop_assert!(r.estimated_bytes() > MAX_REQUEST_BYTES - 64 - 300);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// For any set of poison records in a batch of up to 25: every poison record ends `Error`
    /// with its own exception, every clean record is submitted, within depth 5.
    #[test]
    fn bisection_isolates_every_poison_record(len in 1..=MAX_USAGE_RECORDS_PER_CALL, poison_bits in any::<u32>()) {
        let poison: Vec<bool> = (0..len).map(|i| poison_bits & (1 << i) != 0).collect();
        let exception_of = |i: usize| POISON_EXCEPTIONS[i % POISON_EXCEPTIONS.len()];
        let mut b = Bisector::new(len);
        let mut calls = 0;
        while let Some(call) = b.next_call() {
            calls += 1;
            prop_assert!(call.depth <= MAX_BISECTION_DEPTH);
            // AWS fails the whole request with the first invalid record's exception.
            let outcome = match call.indices.iter().find(|&&i| poison[i]) {
                Some(&i) => CallOutcome::RequestError { exception: exception_of(i).to_owned() },
                None => CallOutcome::Responded,
            };
            b.report(call.id, outcome).unwrap();
        }
        let poisoned = poison.iter().filter(|p| **p).count();
        prop_assert!(calls <= 1 + 2 * poisoned * MAX_BISECTION_DEPTH as usize);
        let result = b.finish();
        prop_assert_eq!(result.halt, None);
        for (i, v) in result.verdicts.iter().enumerate() {
            if poison[i] {
                prop_assert_eq!(v, &Verdict::Poison { exception: exception_of(i).to_owned() });
            } else {
                prop_assert!(matches!(v, Verdict::Submitted { .. }), "clean record {} got {:?}", i, v);
            }
        }
    }

    /// Every record gets exactly one decision; only `Success` or a same-quantity replay of our
    /// own attempt counts as billed.
    #[test]
    fn result_mapping_never_mistakes_a_duplicate_for_billing(
        specs in prop::collection::vec((0..5u8, prop::option::of(0..3u64), 0..3u64), 1..25),
    ) {
        let records: Vec<SubmitRecord> = specs
            .iter()
            .enumerate()
            .map(|(i, (_, prev, q))| {
                let mut r = SubmitRecord::new(
                    GroupKey::new(license(0), format!("{i:012}"), "api", "2026-11-30T11".parse().unwrap()),
                    *q,
                    None,
                );
                r.previous_attempt = *prev;
                r
            })
            .collect();
        let mut response = ApiResponse::default();
        for (r, (kind, _, _)) in records.iter().zip(&specs) {
            let status = match kind {
                0 => ApiStatus::Success,
                1 => ApiStatus::DuplicateRecord,
                2 => ApiStatus::CustomerNotSubscribed,
                3 => {
                    response.unprocessed.push(r.group.clone());
                    continue;
                }
                _ => continue, // missing from the response
            };
            response.results.push(ApiResult { group: r.group.clone(), status, metering_record_id: Some("id".into()) });
        }
        let decisions = map_response(&records, &response);
        prop_assert_eq!(decisions.len(), records.len());
        for ((r, (kind, prev, q)), d) in records.iter().zip(&specs).zip(&decisions) {
            let billed = *kind == 0 || (*kind == 1 && *prev == Some(*q));
            prop_assert_eq!(d.is_billed(), billed, "{:?} {:?}", r, d);
            match (kind, d) {
                (1, Decision::Finalize(f)) if prev.is_none() => prop_assert_eq!(f.status, AggregatedStatus::DuplicateRecord),
                (1, Decision::Finalize(f)) if *prev != Some(*q) => prop_assert_eq!(f.status, AggregatedStatus::DuplicateRecordQuantityMismatch),
                (3 | 4, d) => prop_assert!(matches!(d, Decision::StayPending { .. }), "{:?}", d),
                _ => {}
            }
        }
    }
}
