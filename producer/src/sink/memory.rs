//! [`RecordSink`] that keeps every record in memory: for tests, benches and examples.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::{EntryOutcome, PutEntry, RecordSink, SinkError};
use crate::partition::{ShardMap, partition_hash};
use awsmp_contract::error::DecodeError;
use awsmp_contract::event::Event;
use awsmp_contract::wire::decode_events;

/// A record the sink accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// What was put, byte for byte.
    pub entry: PutEntry,
    /// The shard it routed to (explicit hash key if any, else the partition key's hash).
    pub shard_id: String,
    /// Its sequence number in the sink (global order of acceptance).
    pub sequence_number: u64,
}

#[derive(Default)]
struct State {
    records: Vec<StoredRecord>,
    calls: Vec<(usize, usize)>,
}

/// An in-memory stream: accepts every entry (unless paused), routes it to a shard of a
/// [`ShardMap`] like Kinesis does, and keeps it.
#[derive(Clone)]
pub struct MemoryRecordSink {
    shards: Arc<ShardMap>,
    state: Arc<Mutex<State>>,
    paused: watch::Sender<bool>,
    keep: bool,
}

impl Default for MemoryRecordSink {
    fn default() -> Self {
        Self::new(ShardMap::uniform(1))
    }
}

impl MemoryRecordSink {
    /// A sink over `shards`.
    pub fn new(shards: ShardMap) -> Self {
        MemoryRecordSink {
            shards: Arc::new(shards),
            state: Arc::default(),
            paused: watch::Sender::new(false),
            keep: true,
        }
    }

    /// A sink that acknowledges and counts but does not keep records (benchmarks).
    pub fn discarding(shards: ShardMap) -> Self {
        MemoryRecordSink {
            keep: false,
            ..Self::new(shards)
        }
    }

    /// While paused, calls wait (they are in flight) until [`MemoryRecordSink::resume`].
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Lets waiting and future calls through.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Everything accepted so far, in order.
    pub fn records(&self) -> Vec<StoredRecord> {
        self.state.lock().expect("sink state").records.clone()
    }

    /// `(entries, bytes)` of every call received, in order.
    pub fn calls(&self) -> Vec<(usize, usize)> {
        self.state.lock().expect("sink state").calls.clone()
    }

    /// Every event in the accepted records, deaggregated and decoded, in stream order.
    pub fn events(&self) -> Result<Vec<Event>, DecodeError> {
        let mut out = Vec::new();
        for r in self.records() {
            for u in decode_events(&r.entry.data)? {
                out.push(u.event?);
            }
        }
        Ok(out)
    }
}

impl RecordSink for MemoryRecordSink {
    async fn put_records(&self, entries: Vec<PutEntry>) -> Result<Vec<EntryOutcome>, SinkError> {
        let mut rx = self.paused.subscribe();
        // An error means the sender is gone, which cannot happen while `self` is alive.
        let _ = rx.wait_for(|paused| !*paused).await;
        let mut st = self.state.lock().expect("sink state");
        let bytes = entries.iter().map(PutEntry::billed_size).sum();
        st.calls.push((entries.len(), bytes));
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let hash = match &entry.explicit_hash_key {
                Some(ehk) => ehk.parse::<u128>().map_err(|e| SinkError::Rejected {
                    message: format!("explicit hash key {ehk:?} is not a 128-bit integer"),
                    source: Some(Box::new(e)),
                })?,
                None => partition_hash(&entry.partition_key),
            };
            let shard_id = self
                .shards
                .shard_index(hash)
                .map(|i| self.shards.shards()[i].shard_id.clone())
                .unwrap_or_else(|| "shardId-unmapped".into());
            let sequence_number = st.records.len() as u64;
            out.push(EntryOutcome::Ok {
                shard_id: shard_id.clone(),
                sequence_number: sequence_number.to_string(),
            });
            if self.keep {
                st.records.push(StoredRecord {
                    entry,
                    shard_id,
                    sequence_number,
                });
            }
        }
        Ok(out)
    }
}
