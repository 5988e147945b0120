//! The `UsageStore` contract, run against the in-memory twin (plain `cargo test`, with a page
//! size of 2 so every index read pages) and the DynamoDB adapter on the local stack
//! (`#[ignore]`d; `scripts/test` runs it): the sparse pending index lists exactly the pending
//! groups of an hour, group reads find every pending row, stamps never create a row and are
//! idempotent, a folded row that grew records the exact late difference once, the age-out
//! sweep expires only rows still pending in its hour, and a row's `ttl` survives every stamp.
//!
//! Run against the stack: `awsmp-local up && set -a && . $AWSMP_LOCAL_DIR/env && set +a &&
//! cargo test -p awsmp-pipeline --test integration contract_usage:: -- --include-ignored`

use crate::contract_support;

use async_trait::async_trait;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::{GroupKey, RowKey};
use awsmp_contract::reasons::LATE_USAGE;
use awsmp_contract::row::{AttrValue, RawUsageRow, conforming_row};
use awsmp_contract::status::RawStatus;
use awsmp_pipeline::adapters::dynamodb::DynamoDbUsageStore;
use awsmp_pipeline::adapters::memory::MemoryUsageStore;
use awsmp_pipeline::ports::{FoldedFinalize, UsageStore};
use contract_support::*;

/// A usage table under test: the port, plus raw item access the port does not offer.
#[async_trait]
trait UsageTable: Send + Sync {
    fn store(&self) -> &dyn UsageStore;
    async fn put_row(&self, row: &RawUsageRow);
    async fn row(&self, key: &RowKey) -> Option<RawUsageRow>;
}

#[async_trait]
impl UsageTable for MemoryUsageStore {
    fn store(&self) -> &dyn UsageStore {
        self
    }
    async fn put_row(&self, row: &RawUsageRow) {
        assert!(MemoryUsageStore::put_row(self, row.clone()));
    }
    async fn row(&self, key: &RowKey) -> Option<RawUsageRow> {
        MemoryUsageStore::row(self, key)
    }
}

struct Dynamo {
    store: DynamoDbUsageStore,
    client: aws_sdk_dynamodb::Client,
    table: String,
}

#[async_trait]
impl UsageTable for Dynamo {
    fn store(&self) -> &dyn UsageStore {
        &self.store
    }
    async fn put_row(&self, row: &RawUsageRow) {
        put_item(&self.client, &self.table, row).await;
    }
    async fn row(&self, key: &RowKey) -> Option<RawUsageRow> {
        let k = [
            (a::LICENSE_ARN, key.license_arn.as_str()),
            (a::USAGE_SORT_KEY, key.sort_key.as_str()),
        ];
        get_item(&self.client, &self.table, k).await
    }
}

const TTL: u64 = 1_830_000_000;

fn row(group: &GroupKey, second: u32, quantity: u64) -> RawUsageRow {
    let mut row = conforming_row(group, second, quantity, None);
    row.insert(a::TTL.to_owned(), AttrValue::n(TTL));
    row
}

fn attr<'r>(row: &'r RawUsageRow, name: &str) -> Option<&'r str> {
    row.get(name).and_then(|v| v.as_s().or_else(|| v.as_n()))
}

async fn pending_count(t: &dyn UsageTable, g: &GroupKey) -> usize {
    let mut n = 0;
    t.store()
        .read_pending_rows(g, &mut |_| n += 1)
        .await
        .unwrap();
    n
}

/// GIVEN five pending rows of g1, three of g2, one of g3 an hour earlier and one finalized
/// row of g4, all of one license.
async fn seed(t: &dyn UsageTable, run: &str) -> [GroupKey; 4] {
    let (lic, h) = (license(run, 1), hour(run));
    let gs = [
        group(&lic, "a", h),
        group(&lic, "b", h),
        group(&lic, "c", h.minus_hours(1)),
        group(&lic, "d", h),
    ];
    for s in 0..5 {
        t.put_row(&row(&gs[0], s, 10 + u64::from(s))).await;
    }
    for s in 0..3 {
        t.put_row(&row(&gs[1], s, 1)).await;
    }
    t.put_row(&row(&gs[2], 0, 7)).await;
    let mut done = row(&gs[3], 0, 2);
    done.remove(a::METERING_PENDING);
    t.put_row(&done).await;
    gs
}

async fn index_and_reads(t: &dyn UsageTable, run: &str, gs: &[GroupKey; 4]) {
    let (lic, h) = (license(run, 1), hour(run));
    let s = t.store();
    // The sparse index: only pending rows, per hour, paged to the end.
    let mut groups = s.pending_groups(h, Some(&lic)).await.unwrap();
    groups.sort();
    assert_eq!(groups, [gs[0].clone(), gs[1].clone()]);
    assert_eq!(
        s.pending_groups(h.minus_hours(1), Some(&lic))
            .await
            .unwrap(),
        [gs[2].clone()]
    );
    assert!(
        s.pending_groups(h, Some(&license(run, 2)))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(pending_count(t, &gs[0]).await, 5);
    assert_eq!(
        pending_count(t, &gs[3]).await,
        0,
        "a finalized row is not pending"
    );
}

async fn stamps(t: &dyn UsageTable, gs: &[GroupKey; 4]) {
    let s = t.store();
    let missing = key_of(&gs[1], 59);
    let stamp = Some((RawStatus::Aggregated, "r"));
    assert!(!s.finalize_row(&missing, stamp, now()).await.unwrap());
    assert!(
        t.row(&missing).await.is_none(),
        "a stamp never creates a row"
    );
    let k = key_of(&gs[1], 0);
    for _ in 0..2 {
        assert!(
            s.finalize_row(&k, stamp, now()).await.unwrap(),
            "idempotent"
        );
    }
    let r = t.row(&k).await.unwrap();
    assert_eq!(
        attr(&r, a::METERING_STATUS),
        Some(RawStatus::Aggregated.as_str())
    );
    assert_eq!(attr(&r, a::METERING_STATUS_REASON), Some("r"));
    assert!(!r.contains_key(a::METERING_PENDING));
    assert_eq!(attr(&r, a::TTL), Some(TTL.to_string().as_str()));
    assert_eq!(pending_count(t, &gs[1]).await, 2);
    // Finalizing without a status only clears the marker.
    let k1 = key_of(&gs[1], 1);
    assert!(s.finalize_row(&k1, None, now()).await.unwrap());
    let r1 = t.row(&k1).await.unwrap();
    assert!(!r1.contains_key(a::METERING_PENDING) && !r1.contains_key(a::METERING_STATUS));
}

async fn folded(t: &dyn UsageTable, gs: &[GroupKey; 4]) {
    let s = t.store();
    let gone = s
        .finalize_folded(&key_of(&gs[0], 58), 1, "r", now())
        .await
        .unwrap();
    assert_eq!(gone, FoldedFinalize::Gone);
    assert!(t.row(&key_of(&gs[0], 58)).await.is_none());
    // Second 0 holds 10, as folded.
    let k0 = key_of(&gs[0], 0);
    let out = s.finalize_folded(&k0, 10, "r", now()).await.unwrap();
    assert_eq!(out, FoldedFinalize::Stamped);
    let r0 = t.row(&k0).await.unwrap();
    assert_eq!(
        attr(&r0, a::METERING_STATUS),
        Some(RawStatus::Aggregated.as_str())
    );
    assert!(!r0.contains_key(a::LATE_QUANTITY));
    // Second 1 holds 11 but only 9 were folded: 2 late, recorded once.
    let k1 = key_of(&gs[0], 1);
    let first = s.finalize_folded(&k1, 9, "r", now()).await.unwrap();
    let again = s.finalize_folded(&k1, 9, "r", now()).await.unwrap();
    assert_eq!(
        (first, again),
        (
            FoldedFinalize::Late {
                quantity: 2,
                recorded_now: true
            },
            FoldedFinalize::Late {
                quantity: 2,
                recorded_now: false
            }
        )
    );
    let r1 = t.row(&k1).await.unwrap();
    assert_eq!(
        (
            attr(&r1, a::FOLDED_QUANTITY),
            attr(&r1, a::LATE_QUANTITY),
            attr(&r1, a::LATE_REASON)
        ),
        (Some("9"), Some("2"), Some(LATE_USAGE))
    );
    assert!(!r1.contains_key(a::METERING_PENDING));
    assert_eq!(attr(&r1, a::TTL), Some(TTL.to_string().as_str()));
}

async fn age_out(t: &dyn UsageTable, run: &str, gs: &[GroupKey; 4]) {
    let (lic, h) = (license(run, 1), hour(run));
    let s = t.store();
    let mut expired = s.expire_bucket(h, "expired", now()).await.unwrap();
    expired.sort_by(|x, y| x.key.cmp(&y.key));
    let got: Vec<(RowKey, Option<u64>)> =
        expired.into_iter().map(|e| (e.key, e.quantity)).collect();
    let want = vec![
        (key_of(&gs[0], 2), Some(12)),
        (key_of(&gs[0], 3), Some(13)),
        (key_of(&gs[0], 4), Some(14)),
        (key_of(&gs[1], 2), Some(1)),
    ];
    assert_eq!(got, want, "only rows still pending in the hour");
    let r = t.row(&key_of(&gs[0], 2)).await.unwrap();
    assert_eq!(
        attr(&r, a::METERING_STATUS),
        Some(RawStatus::AggregationExpired.as_str())
    );
    assert!(s.pending_groups(h, Some(&lic)).await.unwrap().is_empty());
    assert!(
        s.expire_bucket(h, "expired", now())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        pending_count(t, &gs[2]).await,
        1,
        "another hour is untouched"
    );
}

async fn contract(t: &dyn UsageTable, run: &str) {
    let gs = seed(t, run).await;
    index_and_reads(t, run, &gs).await;
    stamps(t, &gs).await;
    folded(t, &gs).await;
    age_out(t, run, &gs).await;
}

#[tokio::test]
async fn the_memory_usage_store_keeps_the_contract() {
    contract(&MemoryUsageStore::new("usage").with_page_size(2), "mem").await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn the_dynamodb_usage_store_keeps_the_contract() {
    let client = dynamodb().await;
    let table = stack_var("AWSMP_USAGE_TABLE");
    let store = DynamoDbUsageStore::new(client.clone(), &table);
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

/// The same stamps on any usage table: a row stamped with a status, a row stamped without
/// one, a folded row that grew (the late difference), a row aged out, and one stamp that finds
/// its row gone.
async fn side_by_side_stamps(t: &dyn UsageTable, g: &GroupKey) {
    let s = t.store();
    let mut created = row(g, 4, 1);
    created.insert(a::CREATED_AT.to_owned(), AttrValue::s("by-the-consumer"));
    for r in [row(g, 1, 3), row(g, 2, 5), row(g, 3, 12), created] {
        t.put_row(&r).await;
    }
    let at = |second: i64| now() + chrono::Duration::seconds(second);
    let why = Some((RawStatus::RejectedClientSide, "why"));
    assert!(s.finalize_row(&key_of(g, 1), why, at(1)).await.unwrap());
    assert!(s.finalize_row(&key_of(g, 4), None, at(2)).await.unwrap());
    let late = s
        .finalize_folded(&key_of(g, 3), 10, "agg", at(3))
        .await
        .unwrap();
    assert_eq!(
        late,
        FoldedFinalize::Late {
            quantity: 2,
            recorded_now: true
        }
    );
    let expired = s.expire_bucket(g.hour, "expired", at(4)).await.unwrap();
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert!(!s.finalize_row(&key_of(g, 9), None, at(5)).await.unwrap());
}

/// The twin's rows are DynamoDB's, stamp for stamp: the same rows and stamps — each update
/// applied by the twin, its rendering sent by the adapter — leave the same items, audit
/// timestamps included (`createdAt` kept where the consumer wrote one).
#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn the_memory_twin_stores_what_dynamodb_stores() {
    let client = dynamodb().await;
    let table = stack_var("AWSMP_USAGE_TABLE");
    let dynamo = Dynamo {
        store: DynamoDbUsageStore::new(client.clone(), &table),
        client,
        table,
    };
    let memory = MemoryUsageStore::new("usage");
    let run = run_id();
    let g = group(&license(&run, 5), "side", hour(&run));
    side_by_side_stamps(&memory, &g).await;
    side_by_side_stamps(&dynamo, &g).await;
    for second in [1, 2, 3, 4, 9] {
        let key = key_of(&g, second);
        assert_eq!(
            UsageTable::row(&memory, &key).await,
            dynamo.row(&key).await,
            "{second}"
        );
    }
}
