//! An in-memory Kinesis data stream: shards with hash-key ranges, sequence numbers that grow
//! across the stream, `SplitShard` and `MergeShards` that close the parents and open children
//! (<https://docs.aws.amazon.com/streams/latest/dev/kinesis-using-sdk-java-resharding.html>).
//! It is the producer's [`RecordSink`] and [`ShardMapSource`], and the event source mapping
//! ([`crate::esm`]) reads it.

use crate::faults::FaultPlan;
use awsmp_contract::clock::{Clock, FixedClock};
use awsmp_producer::partition::{ShardMap, ShardRange, partition_hash};
use awsmp_producer::shards::ShardMapError;
use awsmp_producer::{EntryOutcome, PutEntry, RecordSink, ShardMapSource, SinkError};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex, MutexGuard};

/// The first sequence number: Kinesis numbers are decimal strings of up to 128 bits.
const FIRST_SEQUENCE_NUMBER: u128 = 49_000_000_000_000_000_000;

/// Bits of a sequence number that count records within a shard.
const SHARD_SEQUENCE_BITS: u32 = 40;

/// A record as stored in its shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// Sequence number (unique in the stream, increasing).
    pub sequence_number: u128,
    /// Partition key.
    pub partition_key: String,
    /// Payload.
    pub data: Bytes,
    /// `approximateArrivalTimestamp`: the virtual clock at the put.
    pub arrival: DateTime<Utc>,
}

/// One shard.
#[derive(Debug, Clone)]
pub struct Shard {
    /// `shardId-000000000000`.
    pub id: String,
    /// Lowest hash key it owns.
    pub start: u128,
    /// Highest hash key it owns.
    pub end: u128,
    /// The shards it was split or merged from.
    pub parents: Vec<String>,
    /// Closed by a reshard: no more records.
    pub closed: bool,
    /// Its records, in sequence order.
    pub records: Vec<StoredRecord>,
}

#[derive(Debug, Default)]
struct State {
    shards: Vec<Shard>,
    next_shard: u32,
    /// Calls (and entries) seen per partition key, naming each fault site stably: the
    /// producer's concurrent calls to different shards may run in either order.
    put_calls: std::collections::BTreeMap<String, u64>,
    /// The open shards as a [`ShardMap`], built once per reshard: the producer lists the
    /// shards every minute of Tokio's paused time (an hour of it at every produce step), and a
    /// map's lookup index is thousands of searches to build.
    map: Option<ShardMap>,
}

impl State {
    fn nth(&mut self, key: String) -> String {
        let n = self.put_calls.entry(key.clone()).or_default();
        *n += 1;
        format!("{key}#{n}")
    }
}

impl State {
    fn open_shard(&mut self, start: u128, end: u128, parents: Vec<String>) -> String {
        let id = format!("shardId-{:012}", self.next_shard);
        self.next_shard += 1;
        self.map = None;
        self.shards.push(Shard {
            id: id.clone(),
            start,
            end,
            parents,
            closed: false,
            records: Vec::new(),
        });
        id
    }

    fn append(
        &mut self,
        hash: u128,
        partition_key: &str,
        data: Bytes,
        now: DateTime<Utc>,
    ) -> (String, u128) {
        let (index, shard) = self
            .shards
            .iter_mut()
            .enumerate()
            .find(|(_, s)| !s.closed && s.start <= hash && hash <= s.end)
            .expect("the open shards cover the whole hash key space");
        // Increasing within a shard, and a child's above its parents' (a later shard index):
        // what the consumer relies on, independent of the order of puts to other shards.
        let seq = FIRST_SEQUENCE_NUMBER
            + ((index as u128) << SHARD_SEQUENCE_BITS)
            + shard.records.len() as u128;
        shard.records.push(StoredRecord {
            sequence_number: seq,
            partition_key: partition_key.to_owned(),
            data,
            arrival: now,
        });
        (shard.id.clone(), seq)
    }
}

/// The stream.
#[derive(Debug)]
pub struct SimStream {
    state: Mutex<State>,
    clock: Arc<FixedClock>,
    faults: Arc<FaultPlan>,
}

impl SimStream {
    /// A stream of `shards` open shards with even hash ranges.
    pub fn new(shards: usize, clock: Arc<FixedClock>, faults: Arc<FaultPlan>) -> Self {
        let mut state = State::default();
        for range in ShardMap::uniform(shards.max(1)).shards() {
            state.open_shard(range.starting_hash_key, range.ending_hash_key, Vec::new());
        }
        Self {
            state: Mutex::new(state),
            clock,
            faults,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Put one record directly (a heartbeat marker, or a poison record): routed by
    /// `explicit_hash_key` when given, else by the partition key's MD5.
    pub fn put(&self, partition_key: &str, explicit_hash_key: Option<u128>, data: Bytes) -> String {
        let hash = explicit_hash_key.unwrap_or_else(|| partition_hash(partition_key));
        let now = self.clock.now();
        self.lock().append(hash, partition_key, data, now).0
    }

    /// Put one record stamped as arrived at `arrival` (an injected out-of-order arrival
    /// timestamp: earlier than records already in the shard).
    pub fn put_at(&self, partition_key: &str, data: Bytes, arrival: DateTime<Utc>) -> String {
        let hash = partition_hash(partition_key);
        self.lock().append(hash, partition_key, data, arrival).0
    }

    /// Every shard, open and closed (a copy).
    pub fn shards(&self) -> Vec<Shard> {
        self.lock().shards.clone()
    }

    /// Read every shard in place.
    pub fn with_shards<T>(&self, f: impl FnOnce(&[Shard]) -> T) -> T {
        f(&self.lock().shards)
    }

    /// The open shards: id and starting hash key.
    pub fn open_shards(&self) -> Vec<(String, u128)> {
        let s = self.lock();
        s.shards
            .iter()
            .filter(|s| !s.closed)
            .map(|s| (s.id.clone(), s.start))
            .collect()
    }

    /// `SplitShard` of the `index`-th open shard at the middle of its range: the parent closes,
    /// two children open. The shard ids, or `None` when its range cannot be split.
    pub fn split(&self, index: usize) -> Option<(String, String, String)> {
        let mut s = self.lock();
        let open: Vec<usize> = (0..s.shards.len())
            .filter(|i| !s.shards[*i].closed)
            .collect();
        let i = *open.get(index % open.len().max(1))?;
        let (start, end) = (s.shards[i].start, s.shards[i].end);
        if end - start < 2 {
            return None;
        }
        let mid = start + (end - start) / 2;
        s.map = None;
        s.shards[i].closed = true;
        let parent = s.shards[i].id.clone();
        let a = s.open_shard(start, mid, vec![parent.clone()]);
        let b = s.open_shard(mid + 1, end, vec![parent.clone()]);
        Some((parent, a, b))
    }

    /// `MergeShards` of the `index`-th open shard with its adjacent open neighbour: both
    /// close, one child opens. The ids, or `None` with a single open shard.
    pub fn merge(&self, index: usize) -> Option<(String, String, String)> {
        let mut s = self.lock();
        let mut open: Vec<usize> = (0..s.shards.len())
            .filter(|i| !s.shards[*i].closed)
            .collect();
        open.sort_by_key(|i| s.shards[*i].start);
        if open.len() < 2 {
            return None;
        }
        let k = index % (open.len() - 1);
        let (i, j) = (open[k], open[k + 1]);
        s.map = None;
        s.shards[i].closed = true;
        s.shards[j].closed = true;
        let (a, b) = (s.shards[i].id.clone(), s.shards[j].id.clone());
        let (start, end) = (s.shards[i].start, s.shards[j].end);
        let child = s.open_shard(start, end, vec![a.clone(), b.clone()]);
        Some((a, b, child))
    }

    /// The open shards as the producer sees them (ListShards).
    pub fn shard_map(&self) -> ShardMap {
        let mut s = self.lock();
        if s.map.is_none() {
            let ranges = s
                .shards
                .iter()
                .filter(|s| !s.closed)
                .map(|s| ShardRange {
                    shard_id: s.id.clone(),
                    starting_hash_key: s.start,
                    ending_hash_key: s.end,
                })
                .collect();
            s.map = Some(ShardMap::new(ranges).expect("open shards have non-empty ranges"));
        }
        s.map.clone().expect("built above")
    }

    /// Records put so far.
    pub fn len(&self) -> usize {
        self.lock().shards.iter().map(|s| s.records.len()).sum()
    }

    /// True when nothing was put.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Entry-level throttling and an applied-then-failed call, as the producer sees them from
/// `PutRecords` (<https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecords.html>).
impl RecordSink for SimStream {
    async fn put_records(&self, entries: Vec<PutEntry>) -> Result<Vec<EntryOutcome>, SinkError> {
        let now = self.clock.now();
        let mut s = self.lock();
        let keys: Vec<&str> = entries.iter().map(|e| e.partition_key.as_str()).collect();
        let call = s.nth(format!("{}:{}", entries.len(), keys.join(",")));
        if self.faults.roll(30, &["put-records-throttled", &call]) {
            self.faults.count("stream-throttle");
            return Err(SinkError::throttled(
                "injected: ProvisionedThroughputExceeded",
            ));
        }
        let mut out = Vec::with_capacity(entries.len());
        for (i, e) in entries.into_iter().enumerate() {
            let entry = s.nth(e.partition_key.clone());
            if self
                .faults
                .roll(40, &["put-entry-throttled", &call, &i.to_string(), &entry])
            {
                self.faults.count("stream-entry-throttle");
                out.push(EntryOutcome::Throttled);
                continue;
            }
            let hash = match &e.explicit_hash_key {
                Some(k) => k
                    .parse()
                    .unwrap_or_else(|_| partition_hash(&e.partition_key)),
                None => partition_hash(&e.partition_key),
            };
            let (shard_id, seq) = s.append(hash, &e.partition_key, e.data, now);
            out.push(EntryOutcome::Ok {
                shard_id,
                sequence_number: seq.to_string(),
            });
        }
        if self.faults.roll(25, &["put-records-lost", &call]) {
            // Applied, then the answer was lost: the producer resends, the stream holds twins.
            self.faults.count("stream-lost-response");
            return Err(SinkError::transient(
                "injected: response lost after PutRecords",
            ));
        }
        Ok(out)
    }
}

impl ShardMapSource for SimStream {
    async fn shard_map(&self) -> Result<ShardMap, ShardMapError> {
        Ok(SimStream::shard_map(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Rates;

    fn stream(shards: usize) -> SimStream {
        let clock = Arc::new(FixedClock::new("2026-11-30T10:00:00Z".parse().unwrap()));
        SimStream::new(shards, clock, Arc::new(FaultPlan::new(1, Rates::default())))
    }

    #[test]
    fn a_split_closes_the_parent_and_its_children_cover_its_range() {
        let s = stream(2);
        s.put("a", None, Bytes::from_static(b"x"));
        let (parent, a, b) = s.split(0).unwrap();
        let shards = s.shards();
        let p = shards.iter().find(|x| x.id == parent).unwrap();
        let (ca, cb) = (
            shards.iter().find(|x| x.id == a).unwrap(),
            shards.iter().find(|x| x.id == b).unwrap(),
        );
        assert!(p.closed && !ca.closed && !cb.closed);
        assert_eq!((ca.start, cb.end, ca.end + 1), (p.start, p.end, cb.start));
        assert_eq!(ca.parents, vec![parent.clone()]);
        assert_eq!(s.open_shards().len(), 3);
        let (x, y, child) = s.merge(0).unwrap();
        assert_eq!(s.open_shards().len(), 2);
        let c = s.shards().into_iter().find(|x| x.id == child).unwrap();
        assert_eq!(c.parents, vec![x, y]);
    }

    /// The producer's listing follows every reshard (the map is built once per reshard).
    #[test]
    fn the_shard_map_lists_the_open_shards_after_each_reshard() {
        let s = stream(2);
        let ids = |m: &ShardMap| -> Vec<String> {
            m.shards().iter().map(|r| r.shard_id.clone()).collect()
        };
        let open = |s: &SimStream| -> Vec<String> {
            let mut o = s.open_shards();
            o.sort_by_key(|(_, start)| *start);
            o.into_iter().map(|(id, _)| id).collect()
        };
        assert_eq!(ids(&s.shard_map()), open(&s));
        assert_eq!(s.shard_map(), s.shard_map());
        s.split(0).unwrap();
        assert_eq!(ids(&s.shard_map()).len(), 3);
        assert_eq!(ids(&s.shard_map()), open(&s));
        s.merge(1).unwrap();
        assert_eq!(ids(&s.shard_map()).len(), 2);
        assert_eq!(ids(&s.shard_map()), open(&s));
    }

    #[test]
    fn sequence_numbers_grow_across_the_stream() {
        let s = stream(2);
        for k in ["a", "b", "c", "d"] {
            s.put(k, None, Bytes::from_static(b"x"));
        }
        let mut seqs: Vec<u128> = s
            .shards()
            .iter()
            .flat_map(|x| x.records.iter().map(|r| r.sequence_number))
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), 4);
        assert_eq!(s.len(), 4);
    }
}
