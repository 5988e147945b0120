//! Packing user records into Kinesis records (pure). With aggregation, the user records of one
//! shard share KPL aggregates up to the configured size, routed by an explicit hash key inside
//! that shard's range; a lone user record goes plain, as the KPL does.

use bytes::Bytes;

use crate::limits::{MAX_BYTES_PER_PUT, MAX_RECORD_BYTES, MAX_RECORDS_PER_PUT};
use crate::sink::PutEntry;
use crate::wire::AggregateBuilder;

/// A user record waiting to be packed.
#[derive(Debug)]
pub struct UserRec<M> {
    /// The v1 payload.
    pub payload: Bytes,
    /// Its group's partition key.
    pub partition_key: String,
    /// MD5 of the partition key as a 128-bit integer.
    pub hash: u128,
    /// Caller bookkeeping, kept in packing order.
    pub meta: M,
}

/// A Kinesis record and the user records inside it.
#[derive(Debug)]
pub struct Packed<M> {
    /// What to put.
    pub entry: PutEntry,
    /// The hash Kinesis routes it by (explicit hash key, else partition key hash).
    pub route_hash: u128,
    /// The user records' bookkeeping, in the order they sit in the record.
    pub users: Vec<M>,
}

/// Packs `users` into Kinesis records. `shard_of` maps a hash to a shard index; user records
/// of unknown shard are aggregated only with records of the same partition key. Each user
/// record must satisfy `payload + partition key ≤ MAX_RECORD_BYTES` (checked at `record()`).
pub fn pack<M>(
    users: Vec<UserRec<M>>,
    shard_of: impl Fn(u128) -> Option<usize>,
    aggregation: bool,
    max_aggregate_bytes: usize,
) -> Vec<Packed<M>> {
    if !aggregation {
        return users.into_iter().map(plain).collect();
    }
    // Group by shard (or by partition key when the shard is unknown), keeping arrival order.
    let mut groups: Vec<Vec<UserRec<M>>> = Vec::new();
    let mut by_shard: std::collections::HashMap<Result<usize, String>, usize> =
        std::collections::HashMap::new();
    for u in users {
        let key = shard_of(u.hash).ok_or_else(|| u.partition_key.clone());
        let gi = *by_shard.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[gi].push(u);
    }
    let mut out = Vec::new();
    for group in groups {
        let mut current: Vec<UserRec<M>> = Vec::new();
        let mut builder = AggregateBuilder::new();
        for u in group {
            let limit = max_aggregate_bytes.min(
                MAX_RECORD_BYTES
                    - current
                        .first()
                        .map_or(u.partition_key.len(), |f| f.partition_key.len()),
            );
            if !current.is_empty()
                && builder.encoded_len_with(&u.partition_key, None, u.payload.len()) > limit
            {
                out.push(finish(
                    std::mem::take(&mut current),
                    std::mem::take(&mut builder),
                ));
            }
            builder.add(&u.partition_key, None, u.payload.clone());
            current.push(u);
        }
        if !current.is_empty() {
            out.push(finish(current, builder));
        }
    }
    out
}

fn plain<M>(u: UserRec<M>) -> Packed<M> {
    Packed {
        entry: PutEntry {
            data: u.payload,
            partition_key: u.partition_key,
            explicit_hash_key: None,
        },
        route_hash: u.hash,
        users: vec![u.meta],
    }
}

fn finish<M>(mut users: Vec<UserRec<M>>, builder: AggregateBuilder) -> Packed<M> {
    if users.len() == 1 {
        return plain(users.pop().expect("one user record"));
    }
    let first_pk = users[0].partition_key.clone();
    let route_hash = users[0].hash;
    // The first user record's hash lies in the shard every user record here maps to; without
    // the explicit key, Kinesis would route by the first partition key, which is the same
    // shard only while our shard map is current. Same-key aggregates need no explicit key.
    let mixed = users.iter().any(|u| u.partition_key != first_pk);
    Packed {
        entry: PutEntry {
            data: builder.finish(),
            partition_key: first_pk,
            explicit_hash_key: mixed.then(|| route_hash.to_string()),
        },
        route_hash,
        users: users.into_iter().map(|u| u.meta).collect(),
    }
}

/// Accumulates one PutRecords call within the per-call limits.
#[derive(Debug, Default, Clone, Copy)]
pub struct CallLimits {
    entries: usize,
    bytes: usize,
}

impl CallLimits {
    /// Whether a record of `size` bytes (data + partition key) still fits.
    pub fn fits(&self, size: usize) -> bool {
        self.entries < MAX_RECORDS_PER_PUT && self.bytes + size <= MAX_BYTES_PER_PUT
    }

    /// Counts a record in.
    pub fn add(&mut self, size: usize) {
        self.entries += 1;
        self.bytes += size;
    }

    /// Records counted.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// True once no further record can fit.
    pub fn is_full(&self) -> bool {
        self.entries >= MAX_RECORDS_PER_PUT || self.bytes >= MAX_BYTES_PER_PUT
    }
}
