//! The consumer reads v2 exactly as it reads v1 (docs/wire-format.md): the same events in v1
//! aggregates and in v2 aggregates make the same rows and the same refusals, and a bad v2 user
//! record is refused with its own reason while the rest of its aggregate is written.

use crate::common;

use std::sync::Arc;

use aws_lambda_events::event::kinesis::KinesisEventRecord;
use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::handler::kinesis_record;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::wire::{
    AggregateBuilder, AggregateV2Builder, deaggregate, encode_aggregated, encode_event,
    encode_single,
};
use awsmp_producer::partition::partition_key;
use awsmp_producer::{Event, Tag, UsageAllocation};
use bytes::Bytes;
use chrono::Duration;
use proptest::prelude::*;

use common::{STREAM_ARN, event, license, t0};

fn ev(group: usize, ms: i64, quantity: u64, id: u64, tagged: bool) -> Event {
    let e = Event::new(
        license(group % 3),
        "210987654321",
        format!("dim{}", group / 3),
        quantity,
        t0() + Duration::milliseconds(ms),
    )
    .with_producer_id("svc");
    let e = if id.is_multiple_of(2) {
        e.with_event_id(
            GeneratedId {
                epoch: 42,
                lane: (id % 16) as u8,
                seq: id / 2 + 1,
            }
            .to_string(),
        )
    } else {
        e.with_event_id(format!("caller-{}", id / 4))
    };
    // Tagging is per group, as the row rules require.
    if tagged && group.is_multiple_of(2) && quantity > 0 {
        e.with_allocations(vec![UsageAllocation::new(
            quantity,
            vec![Tag::new("team", format!("t{}", id % 3))],
        )])
    } else {
        e
    }
}

fn pk(e: &Event) -> String {
    partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension)
}

fn records(chunks: &[Vec<Event>], v2: bool) -> Vec<KinesisEventRecord> {
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let data = if v2 {
                let mut b = AggregateV2Builder::new();
                for e in chunk {
                    b.add(&pk(e), &Bytes::from(encode_single(e)));
                }
                b.finish()
            } else {
                let payloads: Vec<(String, Vec<u8>)> =
                    chunk.iter().map(|e| (pk(e), encode_event(e))).collect();
                encode_aggregated(payloads.iter().map(|(k, p)| (k.as_str(), None, &p[..])))
            };
            kinesis_record(
                STREAM_ARN,
                "shardId-000000000000",
                &(1_000 + i).to_string(),
                &pk(&chunk[0]),
                t0() + Duration::milliseconds(i as i64 * 400),
                data.to_vec(),
            )
        })
        .collect()
}

/// Every record, in batches of 7, through one consumer: the batches after the first decode
/// with the names the earlier ones cached; `warm: false`, a new consumer (no names cached)
/// for each batch.
async fn run_with(records: Vec<KinesisEventRecord>, warm: bool) -> MemoryStores {
    let stores = MemoryStores::new();
    let consumer = || {
        stores.consumer(
            Settings::default(),
            Arc::new(FixedClock::new(t0() + Duration::seconds(5))),
        )
    };
    let mut warmed = consumer();
    for batch in records.chunks(7) {
        if !warm {
            warmed = consumer();
        }
        warmed.process(event(batch)).await;
    }
    stores
}

async fn run(records: Vec<KinesisEventRecord>) -> MemoryStores {
    run_with(records, true).await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// The same events (duplicates included, across records and batches) fold to the same
    /// rows and the same refusals in v1 and in v2, and the same rows whether a batch's names
    /// were cached by the batches before it or not.
    #[test]
    fn v1_and_v2_fold_to_the_same_rows(
        raw in prop::collection::vec((0usize..9, 0i64..3_000, 0u64..50, 0u64..40, any::<bool>()), 2..120),
        per_record in 1usize..30,
    ) {
        let events: Vec<Event> = raw.iter().map(|&(g, ms, q, id, t)| ev(g, ms, q, id, t)).collect();
        let chunks: Vec<Vec<Event>> = events.chunks(per_record).map(<[Event]>::to_vec).collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (a, b) = rt.block_on(async { (run(records(&chunks, false)).await, run(records(&chunks, true)).await) });
        prop_assert_eq!(a.rows.rows(), b.rows.rows());
        let cold = rt.block_on(run_with(records(&chunks, true), false));
        prop_assert_eq!(b.rows.rows(), cold.rows.rows());
        let refusals = |s: &MemoryStores| {
            s.rejected.items().into_iter().map(|(k, v)| (k, v.reason, v.quantity)).collect::<Vec<_>>()
        };
        prop_assert_eq!(refusals(&a), refusals(&b));
        prop_assert_eq!(a.dedup.writes(), b.dedup.writes());
    }
}

#[tokio::test]
async fn a_bad_v2_user_record_is_refused_with_its_reason_and_the_rest_is_written() {
    let events: Vec<Event> = (0..3).map(|i| ev(0, i, 2, i as u64 * 2, false)).collect();
    let mut b = AggregateV2Builder::new();
    for e in &events {
        b.add(&pk(e), &Bytes::from(encode_single(e)));
    }
    let users = deaggregate(&b.finish()).unwrap();
    // Rebuild it with the second ref pointing past the table, and the third cut inside its timestamp.
    let mut agg = AggregateBuilder::new();
    let key = users[0].partition_key.clone().unwrap();
    agg.add(&key, None, users[0].data.clone());
    agg.add(&key, None, users[1].data.clone());
    agg.add(
        &key,
        None,
        Bytes::from_static(&[0x02, 0x02, 0x10, 0x09, 0x20, 0x01, 0x30, 0x07]),
    );
    agg.add(&key, None, users[3].data.slice(..6));
    agg.add(&key, None, Bytes::from_static(&[0x05, 0x01]));
    let stores = run(records_of(agg.finish())).await;
    assert_eq!(stores.rows.total(), 2, "the one good event is written");
    let reasons: Vec<String> = stores
        .rejected
        .items()
        .into_values()
        .map(|v| v.reason)
        .collect();
    assert_eq!(
        reasons,
        ["V2UnknownGroup", "V2Truncated", "UnknownWireVersion"]
    );
}

fn records_of(data: Bytes) -> Vec<KinesisEventRecord> {
    vec![kinesis_record(
        STREAM_ARN,
        "shardId-000000000000",
        "1000",
        "k",
        t0(),
        data.to_vec(),
    )]
}
