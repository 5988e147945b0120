//! Bad input in the middle of a batch: the records before it are written once, it is refused
//! with its reason code (or, when its row cannot be stored, it is the one batch item failure),
//! and nothing else is lost. The event source mapping resumes from the reported item, so
//! reporting an earlier one would replay, and an item that can never succeed would block, the
//! shard.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::domain::row::RowWrite;
use awsmp_consumer::domain::seq::{Lane, SeqNum};
use awsmp_consumer::error::{ConsumerError, Result};
use awsmp_consumer::handler::kinesis_record;
use awsmp_consumer::ports::{FinalizedGroups, UsageRowWriter};
use awsmp_consumer::{Consumer, Settings};
use awsmp_contract::Event;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::event::MAX_DIMENSION_BYTES;
use awsmp_contract::keys::{GroupKey, RowKey};
use awsmp_contract::row::{AttrValue, RawUsageRow};
use awsmp_contract::wire::encode_event;
use awsmp_producer::partition::partition_key;
use chrono::{DateTime, TimeZone, Utc};

const ARN: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const ACCOUNT: &str = "210987654321";
const STREAM: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events";
const SHARD: &str = "shardId-000000000000";

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 7).unwrap()
}

/// A plain record (sequence number `seq`) of one event: `quantity` units of `dimension`.
fn plain(seq: &str, dimension: &str, quantity: u64) -> KinesisEventRecord {
    let event =
        Event::new(ARN, ACCOUNT, dimension, quantity, at()).with_event_id(format!("e{seq}"));
    let pk = partition_key(ARN, ACCOUNT, dimension);
    kinesis_record(STREAM, SHARD, seq, &pk, at(), encode_event(&event))
}

/// Records 1, 2, 3: dimension `a` (1 unit), `middle` (2 units), `b` (4 units).
fn three(middle: &str) -> KinesisEvent {
    common::event(&[
        plain("1", "a", 1),
        plain("2", middle, 2),
        plain("3", "b", 4),
    ])
}

fn consumer(stores: &MemoryStores) -> Consumer {
    stores.consumer(Settings::default(), Arc::new(FixedClock::new(at())))
}

/// The stored quantity of dimension `dimension`'s row (the events' second).
fn quantity(stores: &MemoryStores, dimension: &str) -> Option<u64> {
    let key = RowKey {
        license_arn: ARN.into(),
        sort_key: format!("{ACCOUNT}#{dimension}#2026-11-30T12:00:07"),
    };
    stores.rows.quantities().get(&key).copied()
}

#[tokio::test]
async fn an_over_long_dimension_in_the_middle_is_refused_and_the_rest_written_once() {
    let stores = MemoryStores::new();
    let consumer = consumer(&stores);
    let long = "x".repeat(1100);
    // Delivered twice (a replay of the same batch): the same outcome, nothing added twice.
    for delivery in 1..=2 {
        let (response, report) = consumer.process(three(&long)).await;
        assert!(
            response.batch_item_failures.is_empty(),
            "{:?}",
            response.batch_item_failures
        );
        assert_eq!(report.rejected.get("DimensionTooLong"), Some(&1));
        assert_eq!(
            consumer.metrics.total("EventRejected"),
            f64::from(delivery),
            "{:?}",
            consumer.metrics.lines()
        );
    }
    assert_eq!(quantity(&stores, "a"), Some(1));
    assert_eq!(quantity(&stores, "b"), Some(4));
    assert_eq!(stores.rows.rows().len(), 2, "no row of the refused event");
    let rejected = stores.rejected.items();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let (key, refused) = rejected.iter().next().unwrap();
    assert!(key.ends_with("/2/record"), "the middle record: {key}");
    assert_eq!(refused.reason, "DimensionTooLong");
    // A record refused by the event rules keeps its bytes (the event's 2 units with them).
    let data = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        refused.data_base64.as_deref().unwrap(),
    )
    .unwrap();
    let event: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(event["quantity"], 2);
    assert_eq!(refused.sequence_number, "2");
}

#[tokio::test]
async fn a_dimension_at_the_limit_is_written() {
    let stores = MemoryStores::new();
    let consumer = consumer(&stores);
    let longest = "y".repeat(MAX_DIMENSION_BYTES);
    let (response, _) = consumer.process(three(&longest)).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(quantity(&stores, &longest), Some(2));
    assert!(stores.rejected.items().is_empty());
    // Its sort key stays within DynamoDB's 1,024-byte limit for a sort key.
    let keys = stores.rows.rows();
    assert!(keys.keys().all(|k| k.sort_key.len() <= 1024), "{keys:?}");
}

/// The memory rows, except that any write to a row of dimension `bad` fails while `broken`.
/// Not the test kit's `Faulty`: this is a refusal of one input (every write of that row, not
/// retryable, as DynamoDB refuses an item it cannot take), which no `Fault` names — each of
/// those is a transient failure of a call, or ends the invocation.
struct FailingRows {
    inner: Arc<dyn UsageRowWriter>,
    bad: String,
    broken: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl UsageRowWriter for FailingRows {
    async fn read(&self, key: &RowKey) -> Result<Option<RawUsageRow>> {
        self.inner.read(key).await
    }

    async fn write(&self, write: &RowWrite) -> Result<bool> {
        if write.dimension == self.bad && self.broken.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(refused_by_the_test("usage"));
        }
        self.inner.write(write).await
    }
}

/// The error a test double answers for a call it refuses on `table`.
fn refused_by_the_test(table: &str) -> ConsumerError {
    ConsumerError::MalformedItem {
        table: table.into(),
        detail: "refused by the test".into(),
    }
}

#[tokio::test]
async fn a_row_write_that_fails_in_the_middle_names_its_own_record() {
    let stores = MemoryStores::new();
    let mut consumer = consumer(&stores);
    let rows = Arc::new(FailingRows {
        inner: Arc::new(stores.rows.clone()),
        bad: "bad".into(),
        broken: true.into(),
    });
    consumer.rows = rows.clone() as Arc<dyn UsageRowWriter>;
    let batch = three("bad");
    let (response, report) = consumer.process(batch.clone()).await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        failed,
        vec!["2"],
        "the failed record, not the batch's first"
    );
    assert_eq!(report.failed_from.as_deref(), Some("2"));
    assert_eq!(quantity(&stores, "a"), Some(1));
    assert_eq!(quantity(&stores, "bad"), None);
    // The mapping retries from the reported item; the row can be written now.
    rows.broken
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let retry = common::event(&batch.records[1..]);
    let (response, _) = consumer.process(retry).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(quantity(&stores, "a"), Some(1));
    assert_eq!(quantity(&stores, "bad"), Some(2));
    assert_eq!(
        quantity(&stores, "b"),
        Some(4),
        "written once, not again on the retry"
    );
    assert!(stores.rejected.items().is_empty());
}

/// The memory lookup, except that a lookup naming dimension `bad` fails while `broken` (as
/// DynamoDB refuses a whole `BatchGetItem` for one key it cannot take). Kept for the reason
/// [`FailingRows`] is: the refusal follows the input, and a `FaultPlan` decides per call.
struct FailingLookup {
    inner: Arc<dyn FinalizedGroups>,
    bad: String,
    broken: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl FinalizedGroups for FailingLookup {
    async fn finalized(&self, groups: &[GroupKey]) -> Result<HashSet<GroupKey>> {
        if self.broken.load(std::sync::atomic::Ordering::SeqCst)
            && groups.iter().any(|g| g.dimension == self.bad)
        {
            return Err(refused_by_the_test("aggregated"));
        }
        self.inner.finalized(groups).await
    }
}

#[tokio::test]
async fn a_finalized_lookup_failing_for_one_group_names_that_groups_record() {
    let stores = MemoryStores::new();
    let mut consumer = consumer(&stores);
    let lookup = Arc::new(FailingLookup {
        inner: Arc::new(stores.finalized.clone()),
        bad: "bad".into(),
        broken: true.into(),
    });
    consumer.finalized = lookup.clone() as Arc<dyn FinalizedGroups>;
    let batch = three("bad");
    let (response, _) = consumer.process(batch.clone()).await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        failed,
        vec!["2"],
        "the failed record, not the batch's first"
    );
    assert_eq!(quantity(&stores, "a"), Some(1));
    assert_eq!(quantity(&stores, "bad"), None);
    assert_eq!(quantity(&stores, "b"), Some(4));
    lookup
        .broken
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let (response, _) = consumer.process(common::event(&batch.records[1..])).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        [
            quantity(&stores, "a"),
            quantity(&stores, "bad"),
            quantity(&stores, "b")
        ],
        [Some(1), Some(2), Some(4)]
    );
}

/// The memory lookup, refusing every lookup of more than one group (as a `BatchGetItem`
/// DynamoDB keeps refusing), and noting the dimension of each group looked up alone.
struct OneByOne {
    inner: Arc<dyn FinalizedGroups>,
    alone: std::sync::Mutex<Vec<String>>,
}

#[async_trait]
impl FinalizedGroups for OneByOne {
    async fn finalized(&self, groups: &[GroupKey]) -> Result<HashSet<GroupKey>> {
        let [one] = groups else {
            return Err(refused_by_the_test("aggregated"));
        };
        self.alone.lock().unwrap().push(one.dimension.clone());
        self.inner.finalized(groups).await
    }
}

/// After a failed lookup the groups are looked up alone in key order, never a hash set's
/// (seeded per set, so two runs differ): under a fault schedule the order decides which
/// lookup a fault or a clock move meets, and a replay must meet the same one
/// (docs/simulation.md, "Running and replaying").
#[tokio::test]
async fn groups_looked_up_alone_are_looked_up_in_key_order() {
    let stores = MemoryStores::new();
    let mut consumer = consumer(&stores);
    let lookup = Arc::new(OneByOne {
        inner: Arc::new(stores.finalized.clone()),
        alone: std::sync::Mutex::default(),
    });
    consumer.finalized = lookup.clone() as Arc<dyn FinalizedGroups>;
    let dimensions = ["g", "c", "h", "a", "f", "b", "e", "d"];
    let records: Vec<KinesisEventRecord> = (1..)
        .zip(dimensions)
        .map(|(seq, d)| plain(&seq.to_string(), d, 1))
        .collect();
    let (response, _) = consumer.process(common::event(&records)).await;
    assert!(response.batch_item_failures.is_empty());
    let mut sorted = dimensions.map(str::to_owned).to_vec();
    sorted.sort();
    assert_eq!(*lookup.alone.lock().unwrap(), sorted);
    assert!(dimensions.iter().all(|d| quantity(&stores, d) == Some(1)));
}

/// The row of dimension `mid` at the events' second, with `attrs` besides its keys.
fn row_at_mid(attrs: Vec<(&str, AttrValue)>) -> RawUsageRow {
    let mut row = RawUsageRow::new();
    row.insert("licenseArn".into(), AttrValue::s(ARN));
    row.insert(
        "customerAWSAccountId_dimension_timestamp".into(),
        AttrValue::s(format!("{ACCOUNT}#mid#2026-11-30T12:00:07")),
    );
    for (k, v) in attrs {
        row.insert(k.into(), v);
    }
    row
}

/// Rows of other shapes than the consumer writes, by name: each one's attributes besides its
/// keys.
fn other_shapes() -> Vec<(&'static str, Vec<(String, AttrValue)>)> {
    use AttrValue as V;
    let pk = partition_key(ARN, ACCOUNT, "mid");
    let lane = Lane::new(SHARD, &pk).attribute();
    let high = || V::s(SeqNum::parse("99").unwrap().sortable());
    let pending = || ("meteringPending", V::s("2026-11-30T12"));
    let shapes: Vec<(&str, Vec<(&str, V)>)> = vec![
        ("keys only", vec![]),
        ("not pending", vec![("quantity", V::n(5u64))]),
        (
            "pending NULL",
            vec![("meteringPending", V::Null), ("quantity", V::n(5u64))],
        ),
        (
            "quantity a string",
            vec![pending(), ("quantity", V::s("5"))],
        ),
        (
            "quantity a fraction",
            vec![pending(), ("quantity", V::N("1.5".into()))],
        ),
        (
            "allocations a string",
            vec![pending(), ("usageAllocations", V::s("x"))],
        ),
        (
            "allocations empty",
            vec![pending(), ("usageAllocations", V::L(vec![]))],
        ),
        (
            "rowVersion a string",
            vec![pending(), ("rowVersion", V::s("1"))],
        ),
        (
            "a watermark past the record, no rowVersion",
            vec![pending(), (lane.as_str(), high())],
        ),
        (
            "the same, not pending",
            vec![(lane.as_str(), high()), ("quantity", V::n(5u64))],
        ),
        (
            "a watermark of another type",
            vec![pending(), (lane.as_str(), V::n(5u64))],
        ),
        (
            "quantity of another type",
            vec![pending(), ("quantity", V::Other)],
        ),
    ];
    shapes
        .into_iter()
        .map(|(name, attrs)| {
            (
                name,
                attrs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            )
        })
        .collect()
}

/// Whatever row of another shape already sits at the middle record's row key, its 2 units are
/// either added to that row or recorded as rejected with a reason — never skipped as a replay
/// the row cannot prove, never lost, never a batch failure.
#[tokio::test]
async fn an_existing_row_of_another_shape_never_absorbs_units_silently() {
    for (name, attrs) in other_shapes() {
        let attrs = attrs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let stores = MemoryStores::new();
        let consumer = consumer(&stores);
        let before = row_at_mid(attrs);
        let held = before
            .get("quantity")
            .and_then(|q| q.as_n()?.parse::<u64>().ok());
        stores.rows.put(before.clone());
        let (response, report) = consumer.process(three("mid")).await;
        assert!(response.batch_item_failures.is_empty(), "{name}");
        assert_eq!(
            report.replayed_parts, 0,
            "{name}: no replay the row cannot prove"
        );
        let added = quantity(&stores, "mid").map(|q| q - held.unwrap_or(0));
        let rejected: Vec<(String, Option<u64>)> = stores
            .rejected
            .items()
            .values()
            .map(|r| (r.reason.clone(), r.quantity))
            .collect();
        match added {
            Some(2) => assert!(rejected.is_empty(), "{name}: {rejected:?}"),
            _ => {
                assert_eq!(rejected.len(), 1, "{name}: {rejected:?}");
                assert_eq!(rejected[0].1, Some(2), "{name}: {rejected:?}");
                let row = &stores.rows.rows()[&mid_key()];
                assert_eq!(row, &before, "{name}: a refused row is left as it was");
            }
        }
        assert_eq!(quantity(&stores, "a"), Some(1), "{name}");
        assert_eq!(quantity(&stores, "b"), Some(4), "{name}");
    }
}

/// The row key of dimension `mid`.
fn mid_key() -> RowKey {
    RowKey {
        license_arn: ARN.into(),
        sort_key: format!("{ACCOUNT}#mid#2026-11-30T12:00:07"),
    }
}

/// A row the consumer wrote, its watermark past the record: a true replay, skipped.
#[tokio::test]
async fn a_consumer_row_whose_watermark_holds_the_record_skips_it_as_a_replay() {
    let stores = MemoryStores::new();
    let consumer = consumer(&stores);
    let pk = partition_key(ARN, ACCOUNT, "mid");
    let lane = Lane::new(SHARD, &pk).attribute();
    let row = row_at_mid(vec![
        ("meteringPending", AttrValue::s("2026-11-30T12")),
        ("quantity", AttrValue::n(2u64)),
        ("rowVersion", AttrValue::n(1u64)),
        (
            lane.as_str(),
            AttrValue::s(SeqNum::parse("2").unwrap().sortable()),
        ),
    ]);
    stores.rows.put(row.clone());
    let (response, report) = consumer.process(three("mid")).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(report.replayed_parts, 1);
    assert_eq!(stores.rows.rows()[&mid_key()], row);
    assert!(stores.rejected.items().is_empty());
}
