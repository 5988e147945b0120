//! The billing archive on the in-memory adapters: every applied event archived once (a
//! replayed batch rewrites the same object), nothing archived for records the batch leaves to
//! its retry, and a failed archive write fails the batch so the replay archives it.

use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::kinesis::KinesisEvent;
use awsmp_consumer::Settings;
use awsmp_consumer::adapters::archive::MemoryBillingArchive;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::archive::{ArchiveObject, BillingArchive};
use awsmp_consumer::error::{ConsumerError, Result};
use awsmp_contract::Event;
use awsmp_contract::clock::FixedClock;
use chrono::{TimeZone, Utc};

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

fn batch(n: usize) -> KinesisEvent {
    let at = Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 5).unwrap();
    let records = (0..n)
        .map(|i| {
            let ev =
                Event::new(LICENSE, "210987654321", "api", 2, at).with_event_id(format!("e-{i}"));
            awsmp_consumer::handler::kinesis_record(
                "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events",
                "shardId-000000000000",
                &(100 + i).to_string(),
                "pk",
                at,
                awsmp_contract::wire::encode_event(&ev),
            )
        })
        .collect();
    let mut e = KinesisEvent::default();
    e.records = records;
    e
}

fn consumer(archive: Arc<dyn BillingArchive>) -> (MemoryStores, awsmp_consumer::Consumer) {
    let stores = MemoryStores::new();
    let now = Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 9).unwrap();
    let mut c = stores.consumer(Settings::default(), Arc::new(FixedClock::new(now)));
    c.archive = Some(archive);
    (stores, c)
}

#[tokio::test]
async fn every_applied_event_is_archived_once_and_a_replay_rewrites_the_same_object() {
    let archive = MemoryBillingArchive::new();
    let (stores, c) = consumer(Arc::new(archive.clone()));
    let (resp, report) = c.process(batch(5)).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(report.archived_events, 5);
    let keys = archive.keys();
    assert_eq!(
        keys,
        ["dt=2026-12-01/awsmp-usage-events/shardId-000000000000/100-104.jsonl"]
    );
    // A replay of the whole batch: same object, nothing added to rows or the archive.
    c.process(batch(5)).await;
    assert_eq!(archive.keys(), keys);
    let archived = archive.read_all();
    assert_eq!(archived.len(), 5);
    assert_eq!(archived.iter().map(|e| e.quantity).sum::<u64>(), 10);
    assert_eq!(
        stores.rows.quantities().values().sum::<u64>(),
        10,
        "rows agree with the archive"
    );
    assert!(
        archived
            .iter()
            .all(|e| e.billing_time == "2026-12-01T10:00:05" && e.license_arn == LICENSE)
    );
}

/// An archive that fails its first `failures` puts with a retryable error.
struct Flaky {
    inner: MemoryBillingArchive,
    failures: std::sync::atomic::AtomicU32,
}

#[async_trait]
impl BillingArchive for Flaky {
    async fn put(&self, object: &ArchiveObject) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.failures.load(Ordering::SeqCst) > 0 {
            self.failures.fetch_sub(1, Ordering::SeqCst);
            return Err(ConsumerError::Store {
                store: "billing archive",
                source: "injected".into(),
                retryable: true,
            });
        }
        self.inner.put(object).await
    }
}

#[tokio::test]
async fn a_failed_archive_write_fails_the_batch_and_the_replay_archives_it_exactly_once() {
    let inner = MemoryBillingArchive::new();
    // More failures than the store retry's attempts: the first invocation gives up.
    let flaky = Arc::new(Flaky {
        inner: inner.clone(),
        failures: std::sync::atomic::AtomicU32::new(5),
    });
    let (stores, c) = consumer(flaky);
    let (resp, report) = c.process(batch(3)).await;
    assert_eq!(
        resp.batch_item_failures.len(),
        1,
        "the batch is retried from its first record"
    );
    assert_eq!(report.archived_events, 0);
    assert!(inner.read_all().is_empty());
    // Lambda's retry: the rows already hold the events, the archive now takes them.
    let (resp, report) = c.process(batch(3)).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(report.archived_events, 3);
    assert_eq!(inner.read_all().len(), 3);
    assert_eq!(stores.rows.quantities().values().sum::<u64>(), 6);
}
