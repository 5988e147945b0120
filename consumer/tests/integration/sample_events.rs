//! The deploy's Kinesis sample (`infra/events/kinesis-consumer.json`, a batch as Lambda
//! delivers it to the consumer) run through the consumer over in-memory stores.

use std::sync::Arc;

use aws_lambda_events::event::kinesis::KinesisEvent;
use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::RowKey;
use chrono::{TimeZone, Utc};

#[tokio::test]
async fn the_kinesis_sample_is_billed_at_its_arrival_second() {
    // GIVEN the consumer with its default policy and the sample batch
    let path = format!(
        "{}/../infra/events/kinesis-consumer.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let event: KinesisEvent = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let stores = MemoryStores::new();
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 9).unwrap();
    let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(now)));
    // WHEN it handles the batch
    let response = consumer.handle(event).await;
    // THEN nothing failed or was rejected, and the event's quantity is in its arrival second
    assert!(response.batch_item_failures.is_empty());
    assert!(stores.rejected.items().is_empty());
    let key = RowKey {
        license_arn:
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
                .into(),
        sort_key: "210987654321#api#2026-11-30T12:00:07".into(),
    };
    assert_eq!(stores.rows.quantities().get(&key), Some(&6));
}
