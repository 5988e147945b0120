//! Packing user records into Kinesis records (pure). With aggregation, the user records of one
//! shard share KPL aggregates up to the configured size, routed by an explicit hash key inside
//! that shard's range; a lone user record goes plain, as the KPL does. v2 singles become a v2
//! aggregate (table + refs, docs/wire-format.md); anything else is aggregated as it is.

use bytes::Bytes;

use crate::limits::{MAX_BYTES_PER_PUT, MAX_RECORD_BYTES, MAX_RECORDS_PER_PUT};
use crate::sink::PutEntry;
use std::ops::Range;
use std::sync::Arc;

use crate::wire::v2::split_single_ranges;
use crate::wire::{AggregateBuilder, AggregateV2Builder};

/// A user record waiting to be packed.
#[derive(Debug)]
pub struct UserRec<M> {
    /// The self-contained payload (v1 JSON or a v2 single).
    pub payload: Bytes,
    /// Where a v2 single `payload` splits, when its writer knew: `(entry, fields)` such that
    /// [`split_single_ranges`]`(payload, partition_key)` is `(entry..fields, fields..len)`;
    /// packing then takes it as is instead of reading the single. `None`: read when packed.
    pub split: Option<(u32, u32)>,
    /// Its group's partition key (shared by the group's user records).
    pub partition_key: Arc<str>,
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
    let groups = by_shard(users, shard_of);
    let mut out = Vec::new();
    for group in groups {
        // Each v2 single is split once: its entry and event fields, sized and then added.
        let splits: Vec<Option<Split>> = group.iter().map(split_of).collect();
        let v2 = splits.iter().all(Option::is_some);
        let mut current: Vec<UserRec<M>> = Vec::with_capacity(group.len());
        // The refs' bytes still to pack (about): what the next aggregate reserves.
        let mut refs_left: usize = splits.iter().flatten().map(ref_bytes).sum();
        let capacity = |left: usize| left.min(max_aggregate_bytes);
        let mut builder = Builder::new(v2, capacity(refs_left));
        // Users not yet in a finished aggregate: the next one's capacity.
        let mut group_len = group.len();
        for (u, split) in group.into_iter().zip(splits) {
            let limit = |current: &[UserRec<M>]| {
                max_aggregate_bytes.min(
                    MAX_RECORD_BYTES
                        - current
                            .first()
                            .map_or(u.partition_key.len(), |f| f.partition_key.len()),
                )
            };
            if !builder.add_within(&u, split.as_ref(), limit(&current)) {
                let rest = group_len - current.len();
                group_len = rest;
                out.push(finish(
                    std::mem::replace(&mut current, Vec::with_capacity(rest)),
                    std::mem::replace(&mut builder, Builder::new(v2, capacity(refs_left))),
                ));
                let added = builder.add_within(&u, split.as_ref(), limit(&current));
                debug_assert!(added, "an empty aggregate takes any user record");
            }
            refs_left -= split.as_ref().map_or(0, ref_bytes);
            current.push(u);
        }
        if !current.is_empty() {
            out.push(finish(current, builder));
        }
    }
    out
}

/// `users` grouped by shard (or by partition key when the shard is unknown), keeping arrival
/// order; each group's vector sized once, from a first pass that counts its users.
fn by_shard<M>(
    users: Vec<UserRec<M>>,
    shard_of: impl Fn(u128) -> Option<usize>,
) -> Vec<Vec<UserRec<M>>> {
    let mut index: hashbrown::HashMap<Result<usize, Arc<str>>, usize, foldhash::fast::RandomState> =
        hashbrown::HashMap::default();
    let mut counts: Vec<usize> = Vec::new();
    let of: Vec<usize> = users
        .iter()
        .map(|u| {
            let key = shard_of(u.hash).ok_or_else(|| u.partition_key.clone());
            let gi = *index.entry(key).or_insert_with(|| {
                counts.push(0);
                counts.len() - 1
            });
            counts[gi] += 1;
            gi
        })
        .collect();
    let mut groups: Vec<Vec<UserRec<M>>> = counts.into_iter().map(Vec::with_capacity).collect();
    for (u, gi) in users.into_iter().zip(of) {
        groups[gi].push(u);
    }
    groups
}

/// A v2 single's entry and event fields, as ranges of its payload.
type Split = (Range<usize>, Range<usize>);

/// About what a split single's ref takes in an aggregate: its event fields and the bytes
/// around them (the KPL record's keys and lengths, the ref's header and entry index).
fn ref_bytes((_, fields): &Split) -> usize {
    fields.len() + 10
}

/// `u`'s split: the one its writer gave ([`UserRec::split`]), else read from its payload.
fn split_of<M>(u: &UserRec<M>) -> Option<Split> {
    match u.split {
        Some((entry, fields)) if entry <= fields && fields as usize <= u.payload.len() => {
            let (entry, fields) = (entry as usize, fields as usize);
            let split = (entry..fields, fields..u.payload.len());
            debug_assert_eq!(
                Some(&split),
                split_single_ranges(&u.payload, &u.partition_key).as_ref(),
                "a given split is the single's own"
            );
            Some(split)
        }
        _ => split_single_ranges(&u.payload, &u.partition_key),
    }
}

/// The aggregate being filled: v1 user records as they are, or v2 singles as table + refs.
enum Builder {
    V1(AggregateBuilder),
    V2(AggregateV2Builder),
}

impl Builder {
    /// An empty aggregate; a v2 one reserves `refs_capacity` bytes for its refs.
    fn new(v2: bool, refs_capacity: usize) -> Self {
        if v2 {
            Builder::V2(AggregateV2Builder::with_refs_capacity(refs_capacity))
        } else {
            Builder::V1(AggregateBuilder::new())
        }
    }

    /// Adds `u` (`split`: its entry and fields; every one of a v2 group has them) if the
    /// aggregate stays within `limit` bytes, or when it is empty; returns whether it did.
    fn add_within<M>(&mut self, u: &UserRec<M>, split: Option<&Split>, limit: usize) -> bool {
        match (self, split) {
            (Builder::V2(b), Some((entry, fields))) => b.add_split_within(
                &u.partition_key,
                &u.payload[entry.clone()],
                &u.payload[fields.clone()],
                limit,
            ),
            (Builder::V1(b), _) => {
                if !b.is_empty()
                    && b.encoded_len_with(&u.partition_key, None, u.payload.len()) > limit
                {
                    return false;
                }
                b.add(&u.partition_key, None, u.payload.clone());
                true
            }
            (Builder::V2(_), None) => unreachable!("every payload of a v2 group is a single"),
        }
    }

    fn finish(self) -> Bytes {
        match self {
            Builder::V1(b) => b.finish(),
            Builder::V2(b) => b.finish(),
        }
    }
}

fn plain<M>(u: UserRec<M>) -> Packed<M> {
    Packed {
        entry: PutEntry {
            data: u.payload,
            partition_key: u.partition_key.to_string(),
            explicit_hash_key: None,
        },
        route_hash: u.hash,
        users: vec![u.meta],
    }
}

fn finish<M>(mut users: Vec<UserRec<M>>, builder: Builder) -> Packed<M> {
    if users.len() == 1 {
        return plain(users.pop().expect("one user record"));
    }
    let first_pk = users[0].partition_key.clone();
    let route_hash = users[0].hash;
    // The first user record's hash lies in the shard every user record here maps to; without
    // the explicit key, Kinesis would route by the first partition key, which is the same
    // shard only while our shard map is current. Same-key aggregates need no explicit key.
    let mixed = users
        .iter()
        .any(|u| !Arc::ptr_eq(&u.partition_key, &first_pk) && u.partition_key != first_pk);
    Packed {
        entry: PutEntry {
            data: builder.finish(),
            partition_key: first_pk.to_string(),
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
