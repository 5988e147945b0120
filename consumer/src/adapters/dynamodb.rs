//! DynamoDB adapters: the usage table (conditional row writes), the dedup table, the
//! rejected-events table and the aggregated-usage table (finalized group-hours). Each holds a
//! client and a table name; SDK ↔ domain conversion lives here.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue as Av, KeysAndAttributes};
use awsmp_aws::dynamodb::{is_conditional_failure, is_retryable, row_from_item, to_sdk};
use awsmp_contract::attrs::{self as a, ROW_VERSION, audit_timestamp};
use awsmp_contract::keys::{GroupKey, RowKey, parse_aggregated_sort_key};
use awsmp_contract::row::{Allocation, AttrValue, RawUsageRow};

use crate::domain::row::{Change, RowWrite, SpanWrite, coverage};
use crate::error::{ConsumerError, Result};
use crate::ports::{FinalizedGroups, RejectedEvent, RejectedEventStore, UsageRowWriter};

pub use awsmp_contract::limits::dynamodb::MAX_BATCH_GET_KEYS;
/// Rounds of `UnprocessedKeys` before the lookup fails (and the batch is retried by Lambda).
const MAX_UNPROCESSED_ROUNDS: u32 = 8;
/// `BatchGetItem` chunks of one finalized lookup in flight at once. Our bound: a batch of a
/// few thousand events touches a few hundred group-hours, a handful of chunks, and four keep
/// one lookup to a quarter of the handler's default 16 concurrent store calls.
pub const MAX_CONCURRENT_LOOKUP_CHUNKS: usize = 4;

pub use super::dedup_table::{DynamoDbDedupStore, claim_outcome, dedup_attrs};

pub(super) fn ddb_err<E, R>(
    operation: &'static str,
    resource: &str,
    e: SdkError<E, R>,
) -> ConsumerError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    ConsumerError::DynamoDb {
        operation,
        resource: resource.to_owned(),
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}

pub(super) fn s(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

pub(super) fn n(v: impl ToString) -> Av {
    Av::N(v.to_string())
}

/// The usage table.
#[derive(Debug, Clone)]
pub struct DynamoDbUsageRows {
    client: Client,
    table: String,
}

impl DynamoDbUsageRows {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

/// The expression parts of one `UpdateItem` as they are assembled: `SET` and `ADD` clauses,
/// attribute names and values.
#[derive(Default)]
struct UpdateParts {
    set: Vec<String>,
    add: Vec<String>,
    names: Vec<(String, String)>,
    values: Vec<(String, Av)>,
    /// Placeholder of each watermark attribute (`#w0`, `#w1`, …), shared by update and condition.
    lane_names: HashMap<String, String>,
}

impl UpdateParts {
    /// The contract attributes every write sets, and the `rowVersion` increment.
    fn new(w: &RowWrite) -> Self {
        let mut p = UpdateParts::default();
        for clause in [
            "#acct = :acct",
            "#dim = :dim",
            "#ts = :ts",
            "#mp = :mp",
            "#ca = if_not_exists(#ca, :now)",
            "#ua = :now",
        ] {
            p.set.push(clause.to_owned());
        }
        p.add.push("#rv :one".to_owned());
        for (k, v) in [
            ("#la", a::LICENSE_ARN),
            ("#acct", a::CUSTOMER_AWS_ACCOUNT_ID),
            ("#dim", a::DIMENSION),
            ("#ts", a::TIMESTAMP),
            ("#mp", a::METERING_PENDING),
            ("#ca", a::CREATED_AT),
            ("#ua", a::UPDATED_AT),
            ("#q", a::QUANTITY),
            ("#rv", ROW_VERSION),
        ] {
            p.name(k, v);
        }
        p.value(":acct", s(&w.customer_aws_account_id));
        p.value(":dim", s(&w.dimension));
        p.value(":ts", s(&w.timestamp));
        p.value(":mp", s(&w.metering_pending));
        p.value(":now", s(&w.now));
        p.value(":one", n(1));
        p
    }

    fn name(&mut self, token: impl Into<String>, attr: impl Into<String>) {
        self.names.push((token.into(), attr.into()));
    }

    fn value(&mut self, token: impl Into<String>, v: Av) {
        self.values.push((token.into(), v));
    }

    /// The expression token (`#w0`) of a watermark attribute, named on first use.
    fn lane_name(&mut self, attr: String) -> String {
        let next = format!("#w{}", self.lane_names.len());
        let names = &mut self.names;
        self.lane_names
            .entry(attr.clone())
            .or_insert_with(|| {
                names.push((next.clone(), attr));
                next
            })
            .clone()
    }

    /// The quantity change: an `ADD`, or a `SET` of quantity (and allocations).
    fn change(&mut self, change: &Change) {
        match change {
            Change::Add(q) => {
                self.add.push("#q :dq".into());
                self.value(":dq", n(q));
            }
            Change::Set {
                quantity,
                allocations,
            } => {
                self.set.push("#q = :q".into());
                self.value(":q", n(quantity));
                if let Some(allocs) = allocations {
                    self.set.push("#al = :al".into());
                    self.name("#al", a::USAGE_ALLOCATIONS);
                    let list = AttrValue::L(allocs.iter().map(Allocation::to_attr).collect());
                    self.value(":al", to_sdk(&list));
                }
            }
        }
    }
}

/// The `UpdateItem` for `w`: update expression, condition, names and values. Pure, so the
/// expression can be checked without a table.
pub fn update_request(mut req: UpdateItemFluentBuilder, w: &RowWrite) -> UpdateItemFluentBuilder {
    let mut p = UpdateParts::new(w);
    if let Some(ttl) = w.ttl {
        p.set.push("#ttl = :ttl".into());
        p.name("#ttl", a::TTL);
        p.value(":ttl", n(ttl));
    }
    for (i, (lane, seq)) in w.watermarks.iter().enumerate() {
        let nm = p.lane_name(lane.attribute());
        p.set.push(format!("{nm} = :wm{i}"));
        p.value(format!(":wm{i}"), s(seq.sortable()));
    }
    for (i, (lane, spans)) in w.spans.iter().enumerate() {
        let nm = p.lane_name(coverage::attribute(lane));
        let list = |items: &[String]| Av::L(items.iter().map(s).collect());
        match spans {
            SpanWrite::Append(item) => {
                p.set.push(format!(
                    "{nm} = list_append(if_not_exists({nm}, :nil), :cov{i})"
                ));
                p.value(format!(":cov{i}"), list(std::slice::from_ref(item)));
                if !p.values.iter().any(|(k, _)| k == ":nil") {
                    p.value(":nil", Av::L(Vec::new()));
                }
            }
            SpanWrite::Replace(items) => {
                p.set.push(format!("{nm} = :cov{i}"));
                p.value(format!(":cov{i}"), list(items));
            }
        }
    }
    p.change(&w.change);
    let condition = w.condition(&mut |attr| p.lane_name(attr)).render();
    for (k, v) in condition.names {
        if !p.names.iter().any(|(t, _)| *t == k) {
            p.name(k, v);
        }
    }
    for (k, v) in &condition.values {
        p.value(k.clone(), to_sdk(v));
    }
    let condition = condition.expression;
    let expr = format!("SET {} ADD {}", p.set.join(", "), p.add.join(", "));
    // Only names the expressions use may be sent (DynamoDB refuses unused ones).
    let used = |k: &str| expr.contains(k) || condition.contains(k);
    for (k, v) in p.names {
        if used(&k) {
            req = req.expression_attribute_names(k, v);
        }
    }
    for (k, v) in p.values {
        req = req.expression_attribute_values(k, v);
    }
    req.update_expression(expr).condition_expression(condition)
}

#[async_trait]
impl UsageRowWriter for DynamoDbUsageRows {
    async fn read(&self, key: &RowKey) -> Result<Option<RawUsageRow>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(a::LICENSE_ARN, s(&key.license_arn))
            .key(a::USAGE_SORT_KEY, s(&key.sort_key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb_err("GetItem", &self.table, e))?;
        Ok(out.item.as_ref().map(row_from_item))
    }

    async fn write(&self, w: &RowWrite) -> Result<bool> {
        let req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(a::LICENSE_ARN, s(&w.key.license_arn))
            .key(a::USAGE_SORT_KEY, s(&w.key.sort_key));
        match update_request(req, w).send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }
}

/// The rejected-events table (hash key `recordKey`, TTL attribute `ttl`).
#[derive(Debug, Clone)]
pub struct DynamoDbRejectedEventStore {
    client: Client,
    table: String,
}

impl DynamoDbRejectedEventStore {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

/// The item stored for `e`.
pub fn rejected_item(e: &RejectedEvent) -> HashMap<String, Av> {
    let mut item = HashMap::from([
        ("recordKey".to_owned(), s(&e.record_key)),
        ("reason".to_owned(), s(&e.reason)),
        ("detail".to_owned(), s(&e.detail)),
        ("stream".to_owned(), s(&e.stream)),
        ("shardId".to_owned(), s(&e.shard_id)),
        ("sequenceNumber".to_owned(), s(&e.sequence_number)),
        ("partitionKey".to_owned(), s(&e.partition_key)),
        (
            "approximateArrivalTimestamp".to_owned(),
            s(audit_timestamp(e.arrival)),
        ),
        ("dataLength".to_owned(), n(e.data_len)),
        ("rejectedAt".to_owned(), s(audit_timestamp(e.rejected_at))),
    ]);
    if !e.sub_sequence_numbers.is_empty() {
        item.insert(
            "subSequenceNumbers".into(),
            Av::L(e.sub_sequence_numbers.iter().map(n).collect()),
        );
    }
    let opt_s = [
        ("data", &e.data_base64),
        ("eventId", &e.event_id),
        ("producerId", &e.producer_id),
        (a::LICENSE_ARN, &e.license_arn),
        (a::CUSTOMER_AWS_ACCOUNT_ID, &e.customer_aws_account_id),
        (a::DIMENSION, &e.dimension),
        ("rowSortKey", &e.row_sort_key),
    ];
    for (k, v) in opt_s {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            item.insert(k.to_owned(), s(v));
        }
    }
    if let Some(q) = e.quantity {
        item.insert(a::QUANTITY.into(), n(q));
    }
    if let Some(t) = e.ttl {
        item.insert(a::TTL.into(), n(t));
    }
    item
}

#[async_trait]
impl RejectedEventStore for DynamoDbRejectedEventStore {
    async fn put(&self, e: &RejectedEvent) -> Result<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(rejected_item(e)))
            .send()
            .await
            .map_err(|err| ddb_err("PutItem", &self.table, err))?;
        Ok(())
    }
}

/// Finalized group-hours from the aggregated-usage table.
#[derive(Debug, Clone)]
pub struct DynamoDbFinalizedGroups {
    client: Client,
    table: String,
}

impl DynamoDbFinalizedGroups {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

impl DynamoDbFinalizedGroups {
    /// The finalized groups among at most [`MAX_BATCH_GET_KEYS`] groups, added to `found`;
    /// `UnprocessedKeys` are asked for again, at most [`MAX_UNPROCESSED_ROUNDS`] rounds.
    async fn finalized_chunk(
        &self,
        chunk: &[GroupKey],
        found: &mut HashSet<GroupKey>,
    ) -> Result<()> {
        let keys: Vec<HashMap<String, Av>> = chunk
            .iter()
            .map(|g| {
                HashMap::from([
                    (a::LICENSE_ARN.to_owned(), s(&g.license_arn)),
                    (
                        a::AGGREGATED_SORT_KEY.to_owned(),
                        s(g.aggregated_sort_key()),
                    ),
                ])
            })
            .collect();
        let mut request = Some(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .projection_expression("#la, #sk")
                .expression_attribute_names("#la", a::LICENSE_ARN)
                .expression_attribute_names("#sk", a::AGGREGATED_SORT_KEY)
                .consistent_read(true)
                .build()
                .map_err(|source| ConsumerError::Request {
                    operation: "BatchGetItem",
                    resource: self.table.clone(),
                    source,
                })?,
        );
        let mut round = 0;
        while let Some(ka) = request.take() {
            if round == MAX_UNPROCESSED_ROUNDS {
                return Err(ConsumerError::UnprocessedKeys {
                    resource: self.table.clone(),
                    rounds: round,
                });
            }
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(20 << round.min(6))).await;
            }
            round += 1;
            let out = self
                .client
                .batch_get_item()
                .request_items(&self.table, ka)
                .send()
                .await
                .map_err(|e| ddb_err("BatchGetItem", &self.table, e))?;
            for item in out
                .responses
                .unwrap_or_default()
                .remove(&self.table)
                .unwrap_or_default()
            {
                found.insert(self.aggregated_group(&item)?);
            }
            request = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.table))
                .filter(|k| !k.keys.is_empty());
        }
        Ok(())
    }

    /// The group-hour of an aggregated-usage item, from its keys.
    fn aggregated_group(&self, item: &HashMap<String, Av>) -> Result<GroupKey> {
        let la = item.get(a::LICENSE_ARN).and_then(|v| v.as_s().ok());
        let sk = item.get(a::AGGREGATED_SORT_KEY).and_then(|v| v.as_s().ok());
        let (Some(la), Some((acct, dim, hour))) =
            (la, sk.and_then(|sk| parse_aggregated_sort_key(sk)))
        else {
            return Err(ConsumerError::MalformedItem {
                table: self.table.clone(),
                detail: "aggregated record without a readable key".into(),
            });
        };
        Ok(GroupKey::new(la, acct, dim, hour))
    }
}

#[async_trait]
impl FinalizedGroups for DynamoDbFinalizedGroups {
    async fn finalized(&self, groups: &[GroupKey]) -> Result<HashSet<GroupKey>> {
        use futures::{StreamExt, TryStreamExt};
        // Owned chunks: a closure over borrowed ones is not `Send` through `async_trait`.
        let chunks = groups.chunks(MAX_BATCH_GET_KEYS).map(<[GroupKey]>::to_vec);
        let chunks: Vec<HashSet<GroupKey>> = futures::stream::iter(chunks)
            .map(|chunk: Vec<GroupKey>| async move {
                let mut found = HashSet::new();
                self.finalized_chunk(&chunk, &mut found).await?;
                Ok::<_, ConsumerError>(found)
            })
            .buffer_unordered(MAX_CONCURRENT_LOOKUP_CHUNKS)
            .try_collect()
            .await?;
        Ok(chunks.into_iter().flatten().collect())
    }
}

/// A [`Consumer`](crate::Consumer) over DynamoDB for `config`'s tables, EMF metrics on stdout
/// and the system clock (what the Lambda runs).
pub fn consumer_from_config(config: &crate::Config, client: Client) -> crate::Consumer {
    use std::sync::Arc;
    crate::Consumer {
        settings: config.settings.clone(),
        dedup: Arc::new(DynamoDbDedupStore::new(client.clone(), &config.dedup_table)),
        rejected: Arc::new(DynamoDbRejectedEventStore::new(
            client.clone(),
            &config.rejected_table,
        )),
        rows: Arc::new(DynamoDbUsageRows::new(client.clone(), &config.usage_table)),
        finalized: Arc::new(DynamoDbFinalizedGroups::new(
            client.clone(),
            &config.aggregated_table,
        )),
        watermarks: config.ingest_watermark_table.as_ref().map(|t| {
            Arc::new(awsmp_aws::watermark::DynamoDbWatermarkStore::new(client, t))
                as Arc<dyn awsmp_aws::watermark::WatermarkStore>
        }),
        archive: None,
        metrics: awsmp_aws::emf::MetricsSink::stdout(
            config.metrics_namespace.clone(),
            "kinesis-consumer",
        ),
        clock: Arc::new(awsmp_contract::clock::SystemClock),
        names: crate::domain::intern::NameCache::new(),
    }
}
