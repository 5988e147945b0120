//! Handler tests from JSON fixtures (Kinesis events as Lambda delivers them).

use std::sync::Arc;

use aws_lambda_events::event::kinesis::KinesisEvent;
use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::domain::verify::TimestampPolicy;
use awsmp_contract::attrs;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::RowKey;
use awsmp_contract::row::AttrValue;
use chrono::{TimeZone, Utc};

/// The stream of the fixtures' records (their `eventSourceARN`).
const STREAM: &str = "awsmp-usage-events";
const ARN: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

fn fixture(name: &str) -> KinesisEvent {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn stores_and_consumer() -> (MemoryStores, awsmp_consumer::Consumer) {
    stores_and_consumer_with(Settings::default())
}

/// The consumer of an untrusted ingest path: client time must lie within 60 s of arrival.
fn strict_server_settings() -> Settings {
    let mut settings = Settings::default();
    settings.verify.timestamp = TimestampPolicy::Server;
    settings
}

fn stores_and_consumer_with(settings: Settings) -> (MemoryStores, awsmp_consumer::Consumer) {
    let stores = MemoryStores::new();
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 9).unwrap();
    let c = stores.consumer(settings, Arc::new(FixedClock::new(now)));
    (stores, c)
}

fn row_key() -> RowKey {
    RowKey {
        license_arn: ARN.into(),
        sort_key: "210987654321#api#2026-11-30T12:00:07".into(),
    }
}

#[tokio::test]
async fn mixed_batch_writes_the_good_events_once_and_records_every_bad_one() {
    let (stores, consumer) = stores_and_consumer_with(strict_server_settings());
    let (response, report) = consumer.process(fixture("mixed-batch.json")).await;
    assert!(response.batch_item_failures.is_empty());
    // e1 (5) + e2 (7) from the aggregate, p1 (3) plain; the copy of the aggregate is a dedup hit.
    assert_eq!(stores.rows.quantities().get(&row_key()), Some(&15));
    assert_eq!(report.dedup_hits, 1);
    let rejected = stores.rejected.items();
    let reasons: Vec<(&str, &str)> = rejected
        .iter()
        .map(|(k, v)| (k.as_str(), v.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (
                "awsmp-usage-events/shardId-000000000000/49590338271490256608559692538361571095921575989136588898/2",
                "StaleTimestamp"
            ),
            (
                "awsmp-usage-events/shardId-000000000000/49590338271490256608559692538361571095921575989136588898/3",
                "MissingField"
            ),
            (
                "awsmp-usage-events/shardId-000000000000/49590338271490256608559692538361571095921575989136588900/record",
                "Md5Mismatch"
            ),
        ]
    );
    let stale = rejected
        .values()
        .find(|e| e.reason == "StaleTimestamp")
        .unwrap();
    assert_eq!(stale.quantity, Some(4));
    assert_eq!(stale.event_id.as_deref(), Some("e3"));
    assert!(stale.data_base64.is_some());
    assert_eq!(consumer.metrics.total("EventRejected"), 3.0);
    assert_eq!(consumer.metrics.total("DedupHit"), 1.0);

    // The row carries every attribute of the writer contract.
    let row = &stores.rows.rows()[&row_key()];
    assert_eq!(
        row[attrs::CUSTOMER_AWS_ACCOUNT_ID].as_s(),
        Some("210987654321")
    );
    assert_eq!(row[attrs::DIMENSION].as_s(), Some("api"));
    assert_eq!(row[attrs::TIMESTAMP].as_s(), Some("2026-11-30T12:00:07"));
    assert_eq!(row[attrs::METERING_PENDING].as_s(), Some("2026-11-30T12"));
    assert_eq!(
        row[attrs::TTL].as_n(),
        Some(
            (Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 7).unwrap() + chrono::Duration::days(365))
                .timestamp()
                .to_string()
                .as_str()
        )
    );
    assert_eq!(
        row[attrs::CREATED_AT].as_s(),
        Some("2026-11-30T12:00:09.000Z")
    );
    assert!(row.contains_key(attrs::UPDATED_AT));

    // Lambda retries the same batch: nothing changes.
    let (response, report) = consumer.process(fixture("mixed-batch.json")).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(stores.rows.quantities().get(&row_key()), Some(&15));
    assert_eq!(report.quantity_written, 0);
    assert_eq!(stores.rejected.items().len(), 3);
}

#[tokio::test]
async fn an_event_delayed_ten_minutes_is_billed_at_its_arrival_second() {
    // GIVEN the Kinesis consumer with its default policy, and a record whose client timestamp
    // (11:50:07.250) is ten minutes older than its arrival (12:00:07.250)
    let (stores, consumer) = stores_and_consumer();
    // WHEN it handles the batch
    let (response, report) = consumer.process(fixture("delayed-event.json")).await;
    // THEN the event is billed in the arrival second, nothing is rejected
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(stores.rows.quantities().get(&row_key()), Some(&6));
    assert!(stores.rejected.items().is_empty());
    assert_eq!(consumer.metrics.total("EventRejected"), 0.0);
    // AND the client's skew is reported (600 s)
    assert_eq!(report.largest_client_skew_seconds, Some(600));
    assert_eq!(consumer.metrics.total("ClientClockSkew"), 600.0);
}

#[tokio::test]
async fn the_mixed_batch_bills_its_stale_event_at_arrival_by_default() {
    let (stores, consumer) = stores_and_consumer();
    let (response, _) = consumer.process(fixture("mixed-batch.json")).await;
    assert!(response.batch_item_failures.is_empty());
    // e1 (5) + e2 (7) + e3 (4, client time two minutes behind) + p1 (3).
    assert_eq!(stores.rows.quantities().get(&row_key()), Some(&19));
    assert_eq!(stores.rejected.quantity("StaleTimestamp"), 0);
    assert_eq!(stores.rejected.items().len(), 2);
}

#[tokio::test]
async fn allocations_merge_by_tag_set_in_the_batch_meter_usage_shape() {
    let (stores, consumer) = stores_and_consumer();
    let response = consumer.handle(fixture("vmt-batch.json")).await;
    assert!(response.batch_item_failures.is_empty());
    let row = &stores.rows.rows()[&row_key()];
    assert_eq!(row[attrs::QUANTITY].as_n(), Some("15"));
    let allocs = row[attrs::USAGE_ALLOCATIONS].as_l().unwrap();
    let got: Vec<(String, String)> = allocs
        .iter()
        .map(|a| {
            let m = a.as_m().unwrap();
            let tag = &m[attrs::TAGS].as_l().unwrap()[0];
            (
                m[attrs::ALLOCATED_USAGE_QUANTITY]
                    .as_n()
                    .unwrap()
                    .to_owned(),
                tag.as_m().unwrap()[attrs::TAG_VALUE]
                    .as_s()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![("11".into(), "a".into()), ("4".into(), "b".into())]
    );
    // A replay after the row changed under it (a second batch in the same second).
    let response = consumer.handle(fixture("vmt-batch.json")).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        stores.rows.rows()[&row_key()][attrs::QUANTITY],
        AttrValue::n(15)
    );
}

#[tokio::test]
async fn late_usage_and_finalized_rows_are_not_reopened() {
    let (stores, consumer) = stores_and_consumer();
    stores
        .finalized
        .finalize(awsmp_contract::keys::GroupKey::new(
            ARN,
            "210987654321",
            "api",
            "2026-11-30T12".parse().unwrap(),
        ));
    let (response, report) = consumer.process(fixture("vmt-batch.json")).await;
    assert!(response.batch_item_failures.is_empty());
    assert!(stores.rows.rows().is_empty());
    assert_eq!(report.late_quantity, 15);
    assert_eq!(stores.rejected.quantity("LateUsage"), 15);
    assert_eq!(consumer.metrics.total("LateUsage"), 15.0);
}

#[tokio::test]
async fn the_shard_watermark_is_published_after_the_rows_are_written() {
    use awsmp_aws::watermark::WatermarkStore;
    // GIVEN the consumer with a watermark table
    let (stores, consumer) = stores_and_consumer();
    // WHEN it applies the mixed batch (arrivals at 12:00:07 and a fraction)
    let event = fixture("mixed-batch.json");
    let last_arrival = event
        .records
        .iter()
        .map(|r| awsmp_consumer::handler::stream_record(r).unwrap().arrival)
        .max()
        .unwrap();
    let (response, _) = consumer.process(event).await;
    assert!(response.batch_item_failures.is_empty());
    // THEN the shard's watermark is the highest arrival it applied
    let shards = stores.watermarks.shards(STREAM).await.unwrap();
    assert_eq!(shards.len(), 1);
    assert_eq!(shards[0].shard_id, "shardId-000000000000");
    assert_eq!(shards[0].applied_through, last_arrival);
    assert!(shards[0].applied_through > Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 7).unwrap());
    // AND a replay of an older batch never moves it back
    consumer.process(fixture("delayed-event.json")).await;
    let again = stores.watermarks.shards(STREAM).await.unwrap();
    assert_eq!(again[0].applied_through, shards[0].applied_through);
}

#[tokio::test]
async fn a_failed_row_write_does_not_advance_the_watermark_past_it() {
    use awsmp_aws::watermark::WatermarkStore;
    use awsmp_testkit::faults::{FaultPlan, Rates};
    use awsmp_testkit::ports::{Ctx, Faulty};
    let (stores, mut consumer) = stores_and_consumer();
    let every_call = Rates {
        throttle: 1000,
        ..Rates::default()
    };
    let ctx = Ctx::new(FaultPlan::new(7, every_call));
    consumer.rows = Arc::new(Faulty::new(stores.rows.clone(), &ctx));
    let (response, _) = consumer.process(fixture("delayed-event.json")).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert!(stores.watermarks.shards(STREAM).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_heartbeat_marker_advances_an_idle_shard_and_bills_nothing() {
    use awsmp_aws::watermark::WatermarkStore;
    use awsmp_contract::stream::HEARTBEAT_MARKER;
    // GIVEN a batch holding only the heartbeat marker of shard 3
    let (stores, consumer) = stores_and_consumer();
    let arrival = Utc.with_ymd_and_hms(2026, 11, 30, 13, 1, 0).unwrap();
    let record = awsmp_consumer::handler::kinesis_record(
        "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events",
        "shardId-000000000003",
        "49590338271490256608559692538361571095921575989136588901",
        "awsmp-heartbeat",
        arrival,
        HEARTBEAT_MARKER.to_vec(),
    );
    let mut event = KinesisEvent::default();
    event.records.push(record);
    // WHEN the consumer handles it
    let (response, report) = consumer.process(event).await;
    // THEN nothing is billed, rejected or claimed
    assert!(response.batch_item_failures.is_empty());
    assert!(stores.rows.rows().is_empty());
    assert!(stores.rejected.items().is_empty());
    assert!(stores.dedup.is_empty());
    assert_eq!(report.events_accepted, 0);
    // AND the shard's watermark is the marker's arrival
    let shards = stores.watermarks.shards(STREAM).await.unwrap();
    assert_eq!(shards[0].shard_id, "shardId-000000000003");
    assert_eq!(shards[0].applied_through, arrival);
}
