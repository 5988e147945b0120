//! Helpers shared by the producer's integration tests.
#![allow(dead_code)]

use std::collections::HashMap;

use awsmp_contract::wire::decode_events;
use awsmp_producer::partition::{ShardMap, partition_hash, partition_key};
use awsmp_producer::sink::StoredRecord;
use awsmp_producer::{Event, FlushOutcome, Tag, UsageAllocation};
use chrono::{DateTime, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub fn arn(i: usize) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{:032x}", i)
}

pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

/// `n` events over `groups` groups with caller-supplied ids `ev-<i>`, some with allocations.
pub fn events(n: usize, groups: usize, seed: u64) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let g = rng.random_range(0..groups);
            let q = rng.random_range(0..1000u64);
            let e = Event::new(
                arn(g),
                format!("{:012}", 100_000_000_000u64 + (g % 7) as u64),
                format!("dim-{}", g % 3),
                q,
                t0() + chrono::Duration::milliseconds(rng.random_range(0..5_000)),
            )
            .with_event_id(format!("ev-{i}"));
            // Whole groups carry allocations or none (the pipeline's all-or-nothing rule).
            if g % 4 == 0 {
                let a = rng.random_range(0..=q);
                e.with_allocations(vec![
                    UsageAllocation::new(a, vec![Tag::new("team", "red")]),
                    UsageAllocation::new(
                        q - a,
                        vec![Tag::new("team", "blue"), Tag::new("env", "prod")],
                    ),
                ])
            } else {
                e
            }
        })
        .collect()
}

/// Every event in the stored records, with a check that each user record's partition key is
/// its event's group and routes to the shard the record went to.
pub fn stored_events(records: &[StoredRecord], map: &ShardMap) -> Vec<Event> {
    let mut out = Vec::new();
    for r in records {
        let users = decode_events(&r.entry.data).expect("deaggregates");
        for u in users {
            let event = u.event.expect("decodes");
            let pk = partition_key(
                &event.license_arn,
                &event.customer_aws_account_id,
                &event.dimension,
            );
            let user_pk = u
                .partition_key
                .clone()
                .unwrap_or_else(|| r.entry.partition_key.clone());
            assert_eq!(user_pk, pk, "user record partition key is the group");
            let shard = map
                .shard_index(partition_hash(&pk))
                .map(|i| map.shards()[i].shard_id.clone());
            assert_eq!(
                shard.as_deref(),
                Some(r.shard_id.as_str()),
                "group {pk} routed to its own shard"
            );
            out.push(event);
        }
    }
    out
}

/// Checks conservation: every recorded id is delivered at least once or handed back; handed-back
/// ids are not delivered unless flagged `maybe_delivered`. Returns (delivered ids, duplicates).
pub fn assert_conserved(
    recorded: &[Event],
    delivered: &[Event],
    outcome: &FlushOutcome,
) -> (usize, usize) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for e in delivered {
        *seen.entry(e.event_id.as_str()).or_default() += 1;
    }
    let back: HashMap<&str, bool> = outcome
        .undelivered
        .iter()
        .map(|u| (u.event.event_id.as_str(), u.maybe_delivered))
        .collect();
    let by_id: HashMap<&str, &Event> = recorded.iter().map(|e| (e.event_id.as_str(), e)).collect();
    for e in recorded {
        let id = e.event_id.as_str();
        match (seen.get(id), back.get(id)) {
            (Some(_), None) | (None, Some(_)) => {}
            (Some(_), Some(true)) => {}
            (Some(_), Some(false)) => panic!("{id} delivered and handed back as not delivered"),
            (None, None) => panic!("{id} lost: neither delivered nor handed back"),
        }
    }
    for e in delivered {
        let original = by_id
            .get(e.event_id.as_str())
            .expect("delivered only what was recorded");
        assert_eq!(&e, original, "delivered byte-for-byte the recorded event");
    }
    for u in &outcome.undelivered {
        let original = by_id
            .get(u.event.event_id.as_str())
            .expect("handed back only what was recorded");
        assert_eq!(&&u.event, original);
    }
    let dups = seen.values().map(|n| n - 1).sum();
    (seen.len(), dups)
}
