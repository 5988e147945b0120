//! meter-ingest adapters: the mapping table (and the short-TTL cache in front of it), rate
//! counters and claims in the dedup table, the held-events table (DynamoDB), and the usage
//! stream over the producer's [`RecordSink`] (Kinesis `PutRecords`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue as Av, ReturnValue};
use awsmp_contract::attrs::audit_timestamp;
use awsmp_contract::clock::Clock;
use awsmp_contract::retry::RetryPolicy;
use awsmp_producer::sink::{EntryOutcome, PutEntry, RecordSink};
use chrono::{DateTime, Utc};

use crate::error::{IngestError, Result};
use crate::mapping::MappingEntry;
use crate::ports::{Disposition, HeldEvent, HeldStore, MappingStore, RateCounter, UsageStream};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use awsmp_aws::dynamodb::{is_retryable, n, s};
use awsmp_consumer::adapters::dynamodb::{DynamoDbDedupStore, dedup_attrs};

fn ddb_err<E, R>(operation: &'static str, resource: &str, e: SdkError<E, R>) -> IngestError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    IngestError::DynamoDb {
        operation,
        resource: resource.to_owned(),
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}

/// Longest an absent mapping entry is cached. Our bound: a module deployed right after its
/// entry was written has its first events held for at most this long (then they are released).
pub const MAX_NEGATIVE_CACHE: std::time::Duration = std::time::Duration::from_secs(5);

/// Mapping-table attributes.
pub mod mapping_attrs {
    /// Hash key: the qualified invoked ARN.
    pub const INVOKED_ARN: &str = "invokedArn";
    /// The entry's environment.
    pub const ENVIRONMENT: &str = "environment";
    /// The whole entry as JSON (docs/meter-ingest.md, "Mapping").
    pub const ENTRY: &str = "entry";
    /// ISO-8601 time of the last write.
    pub const UPDATED_AT: &str = "updatedAt";
}

/// The mapping table.
#[derive(Debug, Clone)]
pub struct DynamoDbMappingStore {
    client: Client,
    table: String,
}

impl DynamoDbMappingStore {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

#[async_trait]
impl MappingStore for DynamoDbMappingStore {
    async fn get(&self, invoked_arn: &str) -> Result<Option<MappingEntry>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(mapping_attrs::INVOKED_ARN, s(invoked_arn))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb_err("GetItem", &self.table, e))?;
        let Some(item) = out.item else {
            return Ok(None);
        };
        let malformed = |detail: String| IngestError::MalformedItem {
            table: self.table.clone(),
            detail,
        };
        let json = item
            .get(mapping_attrs::ENTRY)
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| malformed(format!("{invoked_arn}: no {}", mapping_attrs::ENTRY)))?;
        let entry: MappingEntry =
            serde_json::from_str(json).map_err(|e| malformed(format!("{invoked_arn}: {e}")))?;
        entry.validate().map_err(malformed)?;
        Ok(Some(entry))
    }

    async fn put(&self, entry: &MappingEntry) -> Result<()> {
        let json = serde_json::to_string(entry).map_err(|e| IngestError::Config(e.to_string()))?;
        self.client
            .put_item()
            .table_name(&self.table)
            .item(mapping_attrs::INVOKED_ARN, s(&entry.invoked_arn))
            .item(mapping_attrs::ENVIRONMENT, s(&entry.environment))
            .item(mapping_attrs::ENTRY, s(json))
            .item(mapping_attrs::UPDATED_AT, s(audit_timestamp(Utc::now())))
            .send()
            .await
            .map_err(|e| ddb_err("PutItem", &self.table, e))?;
        Ok(())
    }
}

type CacheEntry = (Option<MappingEntry>, DateTime<Utc>);

/// A short-TTL cache in front of a [`MappingStore`]: a present entry is kept for `ttl`, an
/// absent one for at most [`MAX_NEGATIVE_CACHE`], so a new entry is seen quickly.
pub struct CachedMappingStore {
    inner: Arc<dyn MappingStore>,
    ttl: chrono::Duration,
    negative_ttl: chrono::Duration,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<String, CacheEntry>>,
}

impl CachedMappingStore {
    /// `inner`, cached for `ttl` on `clock`.
    pub fn new(
        inner: Arc<dyn MappingStore>,
        ttl: std::time::Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let ttl = chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        let negative = chrono::Duration::from_std(MAX_NEGATIVE_CACHE).unwrap_or(ttl);
        Self {
            inner,
            ttl,
            negative_ttl: ttl.min(negative),
            clock,
            cache: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl MappingStore for CachedMappingStore {
    async fn get(&self, invoked_arn: &str) -> Result<Option<MappingEntry>> {
        let now = self.clock.now();
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((entry, until)) = cache.get(invoked_arn)
                && now < *until
            {
                return Ok(entry.clone());
            }
        }
        let entry = self.inner.get(invoked_arn).await?;
        let ttl = if entry.is_some() {
            self.ttl
        } else {
            self.negative_ttl
        };
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(invoked_arn.to_owned(), (entry.clone(), now + ttl));
        Ok(entry)
    }

    async fn put(&self, entry: &MappingEntry) -> Result<()> {
        self.inner.put(entry).await?;
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&entry.invoked_arn);
        Ok(())
    }
}

/// Rate counters in the dedup table (`ADD` on a `count` attribute, with its TTL).
#[derive(Debug, Clone)]
pub struct DynamoDbRateCounter {
    client: Client,
    table: String,
}

impl DynamoDbRateCounter {
    /// Over the dedup `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

/// The counter attribute of a rate item in the dedup table.
pub const RATE_COUNT: &str = "eventCount";

#[async_trait]
impl RateCounter for DynamoDbRateCounter {
    async fn add(&self, key: &str, count: u64, expires_at: DateTime<Utc>) -> Result<u64> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(dedup_attrs::DEDUP_KEY, s(key))
            .update_expression("ADD #c :n SET #ex = :ex")
            .expression_attribute_names("#c", RATE_COUNT)
            .expression_attribute_names("#ex", dedup_attrs::EXPIRES_AT)
            .expression_attribute_values(":n", n(count))
            .expression_attribute_values(":ex", n(expires_at.timestamp()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| ddb_err("UpdateItem", &self.table, e))?;
        out.attributes
            .as_ref()
            .and_then(|a| a.get(RATE_COUNT))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| IngestError::MalformedItem {
                table: self.table.clone(),
                detail: format!("{key}: no {RATE_COUNT} after ADD"),
            })
    }
}

/// Held-events table attributes.
pub mod held_attrs {
    /// Hash key.
    pub const HELD_KEY: &str = "heldKey";
    /// `Held`, `Rejected` or `Released`.
    pub const DISPOSITION: &str = "disposition";
    /// Reason code.
    pub const REASON: &str = "reason";
    /// Detail.
    pub const DETAIL: &str = "detail";
    /// The invoked ARN.
    pub const INVOKED_ARN: &str = "invokedArn";
    /// The request id.
    pub const REQUEST_ID: &str = "requestId";
    /// The module's event id.
    pub const EVENT_ID: &str = "eventId";
    /// Quantity.
    pub const QUANTITY: &str = "quantity";
    /// The event's JSON.
    pub const PAYLOAD: &str = "payload";
    /// ISO-8601 receive time.
    pub const RECEIVED_AT: &str = "receivedAt";
    /// TTL (epoch seconds), rejected events only.
    pub const TTL: &str = "ttl";
}

/// The held-events table.
#[derive(Debug, Clone)]
pub struct DynamoDbHeldStore {
    client: Client,
    table: String,
}

impl DynamoDbHeldStore {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

/// The item of `h`.
pub fn held_item(h: &HeldEvent) -> HashMap<String, Av> {
    use held_attrs::*;
    let mut item = HashMap::from([
        (HELD_KEY.to_owned(), s(&h.key)),
        (DISPOSITION.to_owned(), s(h.disposition.as_str())),
        (REASON.to_owned(), s(&h.reason)),
        (DETAIL.to_owned(), s(&h.detail)),
        (INVOKED_ARN.to_owned(), s(&h.invoked_arn)),
        (REQUEST_ID.to_owned(), s(&h.request_id)),
        (EVENT_ID.to_owned(), s(&h.event_id)),
        (QUANTITY.to_owned(), n(h.quantity)),
        (PAYLOAD.to_owned(), s(&h.payload)),
        (RECEIVED_AT.to_owned(), s(audit_timestamp(h.received_at))),
    ]);
    if let Some(t) = h.ttl {
        item.insert(TTL.to_owned(), n(t));
    }
    item
}

/// The [`HeldEvent`] of an item, or what is missing.
pub fn held_from_item(item: &HashMap<String, Av>) -> std::result::Result<HeldEvent, String> {
    use held_attrs::*;
    let text = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(|| format!("no {k}"))
    };
    let number = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
    };
    let disposition = text(DISPOSITION)?;
    let received = text(RECEIVED_AT)?;
    Ok(HeldEvent {
        key: text(HELD_KEY)?,
        disposition: Disposition::parse(&disposition)
            .ok_or_else(|| format!("disposition {disposition:?}"))?,
        reason: text(REASON)?,
        detail: text(DETAIL)?,
        invoked_arn: text(INVOKED_ARN)?,
        request_id: text(REQUEST_ID)?,
        event_id: text(EVENT_ID)?,
        quantity: number(QUANTITY)
            .and_then(|q| u64::try_from(q).ok())
            .ok_or("no quantity")?,
        payload: text(PAYLOAD)?,
        received_at: DateTime::parse_from_rfc3339(&received)
            .map_err(|e| format!("receivedAt {received:?}: {e}"))?
            .with_timezone(&Utc),
        ttl: number(TTL),
    })
}

#[async_trait]
impl HeldStore for DynamoDbHeldStore {
    async fn put(&self, event: &HeldEvent) -> Result<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(held_item(event)))
            .send()
            .await
            .map_err(|e| ddb_err("PutItem", &self.table, e))?;
        Ok(())
    }

    async fn list(&self, disposition: Disposition) -> Result<Vec<HeldEvent>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("#d = :d")
                .expression_attribute_names("#d", held_attrs::DISPOSITION)
                .expression_attribute_values(":d", s(disposition.as_str()))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb_err("Scan", &self.table, e))?;
            for item in page.items() {
                out.push(
                    held_from_item(item).map_err(|detail| IngestError::MalformedItem {
                        table: self.table.clone(),
                        detail,
                    })?,
                );
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }
}

/// The usage stream over any [`RecordSink`]: one `PutRecords`, then only the failed entries
/// again under the shared retry policy.
pub struct RecordSinkStream<S> {
    sink: S,
    stream: String,
    retry: RetryPolicy,
}

impl<S: RecordSink> RecordSinkStream<S> {
    /// Over `sink`, named `stream` in errors, retrying under `retry`.
    pub fn new(sink: S, stream: impl Into<String>, retry: RetryPolicy) -> Self {
        Self {
            sink,
            stream: stream.into(),
            retry,
        }
    }
}

#[async_trait]
impl<S: RecordSink> UsageStream for RecordSinkStream<S> {
    async fn put(&self, entries: Vec<PutEntry>) -> Result<()> {
        let pending = Mutex::new(entries);
        awsmp_aws::retry(&self.retry, || async {
            let batch = pending.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let outcomes =
                self.sink
                    .put_records(batch.clone())
                    .await
                    .map_err(|e| IngestError::StreamPut {
                        stream: self.stream.clone(),
                        retryable: e.is_retryable(),
                        source: Box::new(e),
                    })?;
            let failed: Vec<(PutEntry, EntryOutcome)> = batch
                .into_iter()
                .zip(outcomes)
                .filter(|(_, o)| !matches!(o, EntryOutcome::Ok { .. }))
                .collect();
            if failed.is_empty() {
                return Ok(());
            }
            let retryable = failed.iter().all(|(_, o)| {
                matches!(
                    o,
                    EntryOutcome::Throttled
                        | EntryOutcome::Failed {
                            retryable: true,
                            ..
                        }
                )
            });
            let detail = format!(
                "{} of the entries failed, e.g. {:?}",
                failed.len(),
                failed[0].1
            );
            *pending.lock().unwrap_or_else(|e| e.into_inner()) =
                failed.into_iter().map(|(e, _)| e).collect();
            Err(IngestError::StreamPut {
                stream: self.stream.clone(),
                source: detail.into(),
                retryable,
            })
        })
        .await
    }
}

/// meter-ingest over DynamoDB and Kinesis from its configuration (the Lambda's wiring), the
/// mapping behind its cache, on the system clock.
pub fn meter_ingest_from_config(
    config: &crate::IngestConfig,
    ddb: Client,
    kinesis: aws_sdk_kinesis::Client,
) -> crate::MeterIngest {
    let clock: Arc<dyn Clock> = Arc::new(awsmp_contract::clock::SystemClock);
    let mapping = Arc::new(DynamoDbMappingStore::new(
        ddb.clone(),
        &config.mapping_table,
    ));
    let sink = awsmp_producer::KinesisRecordSink::new(kinesis, &config.usage_stream);
    crate::MeterIngest {
        settings: config.settings.clone(),
        mappings: Arc::new(CachedMappingStore::new(
            mapping,
            config.mapping_cache,
            clock.clone(),
        )),
        dedup: Arc::new(DynamoDbDedupStore::new(ddb.clone(), &config.dedup_table)),
        rates: Arc::new(DynamoDbRateCounter::new(ddb.clone(), &config.dedup_table)),
        stream: Arc::new(RecordSinkStream::new(
            sink,
            &config.usage_stream,
            config.settings.store_retry,
        )),
        held: Arc::new(DynamoDbHeldStore::new(ddb, &config.held_table)),
        metrics: awsmp_aws::emf::MetricsSink::stdout(&config.metrics_namespace, "meter-ingest"),
        clock,
    }
}
