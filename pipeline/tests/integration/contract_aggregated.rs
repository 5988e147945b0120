//! The `AggregatedStore` contract, run against the in-memory twin (plain `cargo test`, page
//! size 2) and the DynamoDB adapter on the local stack (`#[ignore]`d; `scripts/test` runs it):
//! the first put wins and stores no outcome, attempt marks (numbered, and saying whether the
//! record was still pending) and their retraction hold only while pending and only for the mark
//! they name, a write-back finalizes once, only for the attempt mark it requires (none, or
//! exactly the one read — expiry's conditions), sets the `ttl` attribute and takes the record
//! out of the sparse pending index, and no update creates a record.
//!
//! Run against the stack: `awsmp-local up && set -a && . $AWSMP_LOCAL_DIR/env && set +a &&
//! cargo test -p awsmp-pipeline --test integration contract_aggregated:: -- --include-ignored`

use crate::contract_support;

use async_trait::async_trait;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::keys::HourBucket;
use awsmp_contract::row::AttrValue;
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::adapters::dynamodb::DynamoDbAggregatedStore;
use awsmp_pipeline::adapters::memory::MemoryAggregatedStore;
use awsmp_pipeline::ports::{
    AggregatedItem, AggregatedStore, Attempt, AttemptCondition, WriteBack,
};
use contract_support::*;

/// An aggregated table under test: the port, plus the `ttl` attribute it does not read and
/// the attempt mark of a record marked before `attemptNumber` existed.
#[async_trait]
trait AggregatedTable: Send + Sync {
    fn store(&self) -> &dyn AggregatedStore;
    async fn ttl(&self, group: &GroupKey) -> Option<i64>;
    /// `attemptedQuantity` = `quantity`, no `attemptNumber`.
    async fn mark_unnumbered(&self, group: &GroupKey, quantity: u64);
}

#[async_trait]
impl AggregatedTable for MemoryAggregatedStore {
    fn store(&self) -> &dyn AggregatedStore {
        self
    }
    async fn ttl(&self, group: &GroupKey) -> Option<i64> {
        MemoryAggregatedStore::ttl(self, group)
    }
    async fn mark_unnumbered(&self, group: &GroupKey, quantity: u64) {
        let mut item = self.get(group).await.unwrap().unwrap();
        item.attempted_quantity = Some(quantity);
        item.attempt_number = None;
        self.insert(item);
    }
}

struct Dynamo {
    store: DynamoDbAggregatedStore,
    client: aws_sdk_dynamodb::Client,
    table: String,
}

#[async_trait]
impl AggregatedTable for Dynamo {
    fn store(&self) -> &dyn AggregatedStore {
        &self.store
    }
    async fn ttl(&self, group: &GroupKey) -> Option<i64> {
        let sk = group.aggregated_sort_key();
        let key = [
            (a::LICENSE_ARN, group.license_arn.as_str()),
            (a::AGGREGATED_SORT_KEY, sk.as_str()),
        ];
        let item = get_item(&self.client, &self.table, key).await?;
        item.get(a::TTL).and_then(AttrValue::as_n)?.parse().ok()
    }
    async fn mark_unnumbered(&self, group: &GroupKey, quantity: u64) {
        use aws_sdk_dynamodb::types::AttributeValue as Av;
        self.client
            .update_item()
            .table_name(&self.table)
            .key(a::LICENSE_ARN, Av::S(group.license_arn.clone()))
            .key(a::AGGREGATED_SORT_KEY, Av::S(group.aggregated_sort_key()))
            .update_expression("SET attemptedQuantity = :q REMOVE attemptNumber")
            .expression_attribute_values(":q", Av::N(quantity.to_string()))
            .send()
            .await
            .unwrap();
    }
}

fn success(ttl: Option<i64>) -> WriteBack {
    WriteBack {
        status: AggregatedStatus::Success,
        reason: None,
        metering_record_id: Some("mr-1".into()),
        ttl,
        if_attempt: AttemptCondition::Any,
    }
}

/// Expiry's write of `status`, requiring `if_attempt`.
fn expiry(status: AggregatedStatus, if_attempt: AttemptCondition) -> WriteBack {
    WriteBack {
        status,
        reason: Some("PendingPastBillableWindow".into()),
        metering_record_id: None,
        ttl: None,
        if_attempt,
    }
}

async fn commit_point(s: &dyn AggregatedStore, g: &GroupKey) {
    let mut first = AggregatedItem::new(g.clone(), 5, None);
    first.status = Some(AggregatedStatus::Error);
    first.attempted_quantity = Some(5);
    assert!(s.put_if_absent(&first, now()).await.unwrap());
    let second = AggregatedItem::new(g.clone(), 9, None);
    assert!(
        !s.put_if_absent(&second, now()).await.unwrap(),
        "the first put wins"
    );
    let stored = s.get(g).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.quantity,
            stored.pending,
            stored.status,
            stored.attempted_quantity
        ),
        (5, true, None, None),
        "a put stores no outcome and no attempt"
    );
}

async fn attempts(s: &dyn AggregatedStore, g: &GroupKey) {
    assert!(s.mark_attempted(g, 5, now()).await.unwrap(), "pending");
    let item = s.get(g).await.unwrap().unwrap();
    assert_eq!(
        (item.attempted_quantity, item.submission_attempted_at),
        (Some(5), Some(now()))
    );
    assert_eq!(
        item.attempt(),
        Some(Attempt {
            quantity: 5,
            number: Some(1)
        })
    );
    s.retract_attempt(g, 6, None, now()).await.unwrap();
    assert_eq!(
        s.get(g).await.unwrap().unwrap().attempted_quantity,
        Some(5),
        "not its mark"
    );
    assert!(s.mark_attempted(g, 7, now()).await.unwrap());
    s.retract_attempt(g, 7, Some(5), now()).await.unwrap();
    let item = s.get(g).await.unwrap().unwrap();
    assert_eq!(
        (item.attempted_quantity, item.submission_attempted_at),
        (Some(5), Some(now()))
    );
    s.retract_attempt(g, 5, None, now()).await.unwrap();
    let item = s.get(g).await.unwrap().unwrap();
    assert_eq!(
        (item.attempted_quantity, item.submission_attempted_at),
        (None, None)
    );
    assert_eq!(
        (item.attempt(), item.attempt_number),
        (None, Some(2)),
        "a taken back mark keeps its number"
    );
    assert!(s.mark_attempted(g, 5, now()).await.unwrap());
}

async fn write_backs(t: &dyn AggregatedTable, g: &GroupKey) {
    let s = t.store();
    assert!(
        s.write_back(g, &success(Some(1_830_000_000)), now())
            .await
            .unwrap()
    );
    let item = s.get(g).await.unwrap().unwrap();
    assert_eq!(
        (
            item.pending,
            item.status,
            item.metering_record_id.as_deref()
        ),
        (false, Some(AggregatedStatus::Success), Some("mr-1"))
    );
    assert_eq!(t.ttl(g).await, Some(1_830_000_000));
    let error = WriteBack {
        status: AggregatedStatus::Error,
        reason: Some("x".into()),
        metering_record_id: None,
        ttl: None,
        if_attempt: AttemptCondition::Any,
    };
    assert!(
        !s.write_back(g, &error, now()).await.unwrap(),
        "finalized once"
    );
    assert!(
        !s.mark_attempted(g, 8, now()).await.unwrap(),
        "finalized: not to be sent"
    );
    s.retract_attempt(g, 5, None, now()).await.unwrap();
    let item = s.get(g).await.unwrap().unwrap();
    assert_eq!(
        (item.status, item.attempted_quantity),
        (Some(AggregatedStatus::Success), Some(5)),
        "no mark moves once finalized"
    );
}

/// Expiry's write of `SubmissionExpired` (requires no attempt on file).
fn expired() -> WriteBack {
    expiry(
        AggregatedStatus::SubmissionExpired,
        AttemptCondition::NoAttempt,
    )
}

/// Expiry's write of `NeedsReconciliation` for the attempt it read.
fn reconcile(quantity: u64, number: Option<u64>) -> WriteBack {
    let read = Attempt { quantity, number };
    expiry(
        AggregatedStatus::NeedsReconciliation,
        AttemptCondition::Exactly(read),
    )
}

/// A fresh pending record of 5 for `dimension`.
async fn fresh(s: &dyn AggregatedStore, license: &str, dimension: &str, h: HourBucket) -> GroupKey {
    let g = group(license, dimension, h);
    let item = AggregatedItem::new(g.clone(), 5, None);
    assert!(s.put_if_absent(&item, now()).await.unwrap());
    g
}

/// Expiry's conditions against marks written after its read: `SubmissionExpired` never lands
/// over an attempt, `NeedsReconciliation` only on exactly the attempt read (quantity and
/// number).
async fn attempt_conditions(s: &dyn AggregatedStore, license: &str, h: HourBucket) {
    // GIVEN a record read with no attempt on file, marked since
    let g = fresh(s, license, "raced", h).await;
    assert_eq!(s.get(&g).await.unwrap().unwrap().attempt(), None);
    assert!(s.mark_attempted(&g, 5, now()).await.unwrap());
    assert!(
        !s.write_back(&g, &expired(), now()).await.unwrap(),
        "an attempt is on file: never SubmissionExpired"
    );
    // WHEN it is marked again (the same quantity resent), the attempt read before is not it
    assert!(s.mark_attempted(&g, 5, now()).await.unwrap());
    for (q, n) in [(5, Some(1)), (6, Some(2)), (5, None)] {
        assert!(
            !s.write_back(&g, &reconcile(q, n), now()).await.unwrap(),
            "({q}, {n:?}) is not the attempt on file"
        );
    }
    assert!(s.get(&g).await.unwrap().unwrap().pending);
    assert!(
        s.write_back(&g, &reconcile(5, Some(2)), now())
            .await
            .unwrap()
    );
    let item = s.get(&g).await.unwrap().unwrap();
    assert_eq!(
        (item.pending, item.status),
        (false, Some(AggregatedStatus::NeedsReconciliation))
    );
}

/// Expiry's conditions on records without a numbered mark: one whose only mark was taken back
/// has no attempt on file and may expire; one marked before attempt numbers existed has the
/// unnumbered attempt.
async fn unnumbered_attempts(t: &dyn AggregatedTable, license: &str, h: HourBucket) {
    let s = t.store();
    let g = fresh(s, license, "retracted", h).await;
    assert!(s.mark_attempted(&g, 5, now()).await.unwrap());
    s.retract_attempt(&g, 5, None, now()).await.unwrap();
    assert!(s.write_back(&g, &expired(), now()).await.unwrap());
    assert_eq!(
        s.get(&g).await.unwrap().unwrap().status,
        Some(AggregatedStatus::SubmissionExpired)
    );

    let g = fresh(s, license, "unnumbered", h).await;
    t.mark_unnumbered(&g, 5).await;
    let read = Attempt {
        quantity: 5,
        number: None,
    };
    assert_eq!(s.get(&g).await.unwrap().unwrap().attempt(), Some(read));
    assert!(!s.write_back(&g, &expired(), now()).await.unwrap());
    assert!(
        !s.write_back(&g, &reconcile(5, Some(1)), now())
            .await
            .unwrap()
    );
    assert!(s.write_back(&g, &reconcile(5, None), now()).await.unwrap());
}

async fn no_creation(s: &dyn AggregatedStore, g: &GroupKey) {
    assert!(s.get(g).await.unwrap().is_none());
    assert!(!s.mark_attempted(g, 1, now()).await.unwrap());
    s.retract_attempt(g, 1, None, now()).await.unwrap();
    assert!(!s.write_back(g, &success(None), now()).await.unwrap());
    assert!(
        s.get(g).await.unwrap().is_none(),
        "no update creates a record"
    );
}

async fn index(s: &dyn AggregatedStore, run: &str, finalized: &GroupKey) {
    let (lic, h) = (license(run, 1), hour(run));
    for d in ["b", "c", "d", "e"] {
        let item = AggregatedItem::new(group(&lic, d, h), 1, None);
        assert!(s.put_if_absent(&item, now()).await.unwrap());
    }
    let other = AggregatedItem::new(group(&license(run, 2), "a", h), 1, None);
    assert!(s.put_if_absent(&other, now()).await.unwrap());
    let mut dims: Vec<String> = s
        .pending(h, Some(&lic))
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.group.dimension)
        .collect();
    dims.sort();
    assert_eq!(
        dims,
        ["b", "c", "d", "e"],
        "paged to the end; a finalized record left"
    );
    assert_eq!(finalized.license_arn, lic);
    let all = s.pending(h, None).await.unwrap();
    assert!(all.iter().any(|i| i.group.license_arn == license(run, 2)));
    assert!(
        s.pending(h.minus_hours(1), Some(&lic))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn contract(t: &dyn AggregatedTable, run: &str) {
    let (lic, h) = (license(run, 1), hour(run));
    let g = group(&lic, "a", h);
    commit_point(t.store(), &g).await;
    attempts(t.store(), &g).await;
    write_backs(t, &g).await;
    no_creation(t.store(), &group(&lic, "never", h)).await;
    index(t.store(), run, &g).await;
    attempt_conditions(t.store(), &license(run, 3), h).await;
    unnumbered_attempts(t, &license(run, 3), h).await;
}

#[tokio::test]
async fn the_memory_aggregated_store_keeps_the_contract() {
    contract(
        &MemoryAggregatedStore::new("aggregated").with_page_size(2),
        "mem",
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn the_dynamodb_aggregated_store_keeps_the_contract() {
    let client = dynamodb().await;
    let table = stack_var("AWSMP_AGGREGATED_USAGE_TABLE");
    let store = DynamoDbAggregatedStore::new(client.clone(), &table);
    contract(
        &Dynamo {
            store,
            client,
            table,
        },
        &run_id(),
    )
    .await;
}

/// The same writes, each at its own instant, on any aggregated table: put, mark, mark again,
/// retract to the first mark, retract to none, mark a third time, write back for exactly that
/// mark (with a TTL), and a mark that finds the record finalized.
async fn side_by_side_writes(s: &dyn AggregatedStore, g: &GroupKey) {
    let at = |second: i64| now() + chrono::Duration::milliseconds(second * 1000 + 250);
    assert!(
        s.put_if_absent(&AggregatedItem::new(g.clone(), 9, None), at(0))
            .await
            .unwrap()
    );
    assert!(s.mark_attempted(g, 9, at(1)).await.unwrap());
    assert!(s.mark_attempted(g, 8, at(2)).await.unwrap());
    s.retract_attempt(g, 8, Some(9), at(3)).await.unwrap();
    s.retract_attempt(g, 9, None, at(4)).await.unwrap();
    assert!(s.mark_attempted(g, 9, at(5)).await.unwrap());
    let third = Attempt {
        quantity: 9,
        number: Some(3),
    };
    let mut billed = success(Some(1_830_000_000));
    billed.reason = Some("billed".into());
    billed.if_attempt = AttemptCondition::Exactly(third);
    assert!(s.write_back(g, &billed, at(6)).await.unwrap());
    assert!(!s.mark_attempted(g, 9, at(7)).await.unwrap());
}

/// The twin's stored attributes are DynamoDB's, write for write: the same puts and updates —
/// each update applied by the twin, its rendering sent by the adapter — leave the same item,
/// numbers, audit timestamps and `ttl` included.
#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn the_memory_twin_stores_what_dynamodb_stores() {
    let client = dynamodb().await;
    let table = stack_var("AWSMP_AGGREGATED_USAGE_TABLE");
    let dynamo = DynamoDbAggregatedStore::new(client.clone(), &table);
    let memory = MemoryAggregatedStore::new("aggregated");
    let run = run_id();
    let g = group(&license(&run, 4), "side", hour(&run));
    side_by_side_writes(&memory, &g).await;
    side_by_side_writes(&dynamo, &g).await;
    let sk = g.aggregated_sort_key();
    let key = [
        (a::LICENSE_ARN, g.license_arn.as_str()),
        (a::AGGREGATED_SORT_KEY, sk.as_str()),
    ];
    let stored = get_item(&client, &table, key).await.unwrap();
    assert_eq!(memory.attributes(&g).unwrap(), stored);
    assert_eq!(memory.get(&g).await.unwrap(), dynamo.get(&g).await.unwrap());
}
