//! In-memory twins of the meter-ingest ports ([`crate::ports`]), with the semantics of
//! their DynamoDB adapters in [`super::dynamodb`] (the same contract tests run on both).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::mapping::MappingEntry;
use crate::ports::{Disposition, HeldEvent, HeldStore, MappingStore, RateCounter};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a test thread panicked holding plain data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The mapping in memory; counts its reads (to test the cache in front of it).
#[derive(Debug, Clone, Default)]
pub struct MemoryMappingStore {
    entries: Arc<Mutex<HashMap<String, MappingEntry>>>,
    reads: Arc<AtomicU64>,
}

impl MemoryMappingStore {
    /// An empty mapping.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads made so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Remove an entry (a module retired).
    pub fn remove(&self, invoked_arn: &str) {
        lock(&self.entries).remove(invoked_arn);
    }
}

#[async_trait]
impl MappingStore for MemoryMappingStore {
    async fn get(&self, invoked_arn: &str) -> Result<Option<MappingEntry>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(lock(&self.entries).get(invoked_arn).cloned())
    }

    async fn put(&self, entry: &MappingEntry) -> Result<()> {
        lock(&self.entries).insert(entry.invoked_arn.clone(), entry.clone());
        Ok(())
    }
}

/// A counter's total and expiry.
type Counter = (u64, DateTime<Utc>);

/// Rate counters in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryRateCounter {
    counters: Arc<Mutex<HashMap<String, Counter>>>,
}

impl MemoryRateCounter {
    /// No counters.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl RateCounter for MemoryRateCounter {
    async fn add(&self, key: &str, n: u64, expires_at: DateTime<Utc>) -> Result<u64> {
        let mut counters = lock(&self.counters);
        let c = counters.entry(key.to_owned()).or_insert((0, expires_at));
        c.0 += n;
        c.1 = expires_at;
        Ok(c.0)
    }
}

/// Held and rejected events in memory, by key.
#[derive(Debug, Clone, Default)]
pub struct MemoryHeldStore {
    items: Arc<Mutex<BTreeMap<String, HeldEvent>>>,
}

impl MemoryHeldStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every item, by key.
    pub fn items(&self) -> Vec<HeldEvent> {
        lock(&self.items).values().cloned().collect()
    }
}

#[async_trait]
impl HeldStore for MemoryHeldStore {
    async fn put(&self, event: &HeldEvent) -> Result<()> {
        lock(&self.items).insert(event.key.clone(), event.clone());
        Ok(())
    }

    async fn list(&self, disposition: Disposition) -> Result<Vec<HeldEvent>> {
        Ok(lock(&self.items)
            .values()
            .filter(|h| h.disposition == disposition)
            .cloned()
            .collect())
    }
}

/// Every meter-ingest store in memory, the stream a [`MemoryRecordSink`], and captured metrics.
#[derive(Clone)]
pub struct MemoryIngestStores {
    /// The mapping.
    pub mappings: MemoryMappingStore,
    /// Event-id claims.
    pub dedup: awsmp_consumer::adapters::memory::MemoryDedupStore,
    /// Rate counters.
    pub rates: MemoryRateCounter,
    /// Held and rejected events.
    pub held: MemoryHeldStore,
    /// The usage stream.
    pub stream: awsmp_producer::MemoryRecordSink,
    /// Captured EMF lines.
    pub metrics: awsmp_aws::emf::MetricsSink,
}

impl Default for MemoryIngestStores {
    fn default() -> Self {
        Self {
            mappings: MemoryMappingStore::new(),
            dedup: awsmp_consumer::adapters::memory::MemoryDedupStore::new(),
            rates: MemoryRateCounter::new(),
            held: MemoryHeldStore::new(),
            stream: awsmp_producer::MemoryRecordSink::new(
                awsmp_producer::partition::ShardMap::uniform(2),
            ),
            metrics: awsmp_aws::emf::MetricsSink::capture("meter-ingest"),
        }
    }
}

impl MemoryIngestStores {
    /// Empty stores.
    pub fn new() -> Self {
        Self::default()
    }

    /// meter-ingest over these stores (the mapping read directly, uncached) on `clock`.
    pub fn ingest(
        &self,
        settings: crate::IngestSettings,
        clock: Arc<dyn awsmp_contract::clock::Clock>,
    ) -> crate::MeterIngest {
        let stream = super::dynamodb::RecordSinkStream::new(
            self.stream.clone(),
            "memory",
            settings.store_retry,
        );
        crate::MeterIngest {
            settings,
            mappings: Arc::new(self.mappings.clone()),
            dedup: Arc::new(self.dedup.clone()),
            rates: Arc::new(self.rates.clone()),
            stream: Arc::new(stream),
            held: Arc::new(self.held.clone()),
            metrics: self.metrics.clone(),
            clock,
        }
    }
}
