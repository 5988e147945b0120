//! Packing user records into Kinesis records (pure). With aggregation, the user records of one
//! shard share KPL aggregates up to the configured size, routed by an explicit hash key inside
//! that shard's range; a lone user record goes plain, as the KPL does. v2 singles become a v2
//! aggregate (table + refs, docs/wire-format.md); anything else is aggregated as it is.

use bytes::Bytes;

use crate::sink::PutEntry;
use awsmp_contract::limits::kinesis::{MAX_BYTES_PER_PUT, MAX_RECORD_BYTES, MAX_RECORDS_PER_PUT};
use std::ops::Range;
use std::sync::Arc;

use awsmp_contract::wire::v2::split_single_ranges;
use awsmp_contract::wire::{AggregateBuilder, AggregateV2Builder};

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
/// The same records as a [`Packer`] fed `users` in any number of calls (it is one).
pub fn pack<M>(
    users: Vec<UserRec<M>>,
    shard_of: impl Fn(u128) -> Option<usize>,
    aggregation: bool,
    max_aggregate_bytes: usize,
) -> Vec<Packed<M>> {
    let mut packer = Packer::new(aggregation, max_aggregate_bytes);
    let mut out = Vec::new();
    for u in users {
        packer.push(u, &shard_of, &mut out);
    }
    packer.finish(&mut out);
    out
}

/// Packs user records as they arrive, so that packing a window can overlap recording it: one
/// open aggregate per shard (or per partition key when the shard is unknown), finished when
/// the next user record of its shard does not fit, or by [`Packer::finish`]. Within a shard
/// the records keep arrival order, and how the user records are split over calls changes no
/// byte: each aggregate holds the same run of its shard's user records either way.
pub struct Packer<M> {
    aggregation: bool,
    max_aggregate_bytes: usize,
    /// Open aggregates by shard index.
    shards: Vec<Open<M>>,
    /// Open aggregates of user records of unknown shard, one per partition key in order of
    /// first use (so the records come out in the same order every run).
    unknown: Vec<Open<M>>,
    /// `unknown`'s positions by partition key.
    unknown_index: hashbrown::HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
}

/// One shard's aggregate being filled.
struct Open<M> {
    users: Vec<UserRec<M>>,
    builder: Option<Builder>,
    /// The v2 builder of this shard's last aggregate, emptied with its room kept: the next
    /// one's, so a shard's aggregates do not grow their tables and buffers again each time.
    spare: Option<AggregateV2Builder>,
    /// The bytes of this shard's last finished aggregate: what the next one reserves.
    last_len: usize,
}

impl<M> Default for Open<M> {
    fn default() -> Self {
        Open {
            users: Vec::new(),
            builder: None,
            spare: None,
            last_len: 0,
        }
    }
}

/// What a shard's first aggregate reserves for its refs, before one was finished.
const FIRST_REFS_CAPACITY: usize = 4 * 1024;

impl<M> Packer<M> {
    /// An empty packer: aggregates of at most `max_aggregate_bytes` (a lone user record goes
    /// plain), or every user record plain without `aggregation`.
    pub fn new(aggregation: bool, max_aggregate_bytes: usize) -> Self {
        Packer {
            aggregation,
            max_aggregate_bytes,
            shards: Vec::new(),
            unknown: Vec::new(),
            unknown_index: hashbrown::HashMap::default(),
        }
    }

    /// Adds `u` to its shard's open aggregate; an aggregate it does not fit in is finished
    /// into `out` first, and a plain record (no aggregation) goes there at once.
    pub fn push(
        &mut self,
        u: UserRec<M>,
        shard_of: impl Fn(u128) -> Option<usize>,
        out: &mut Vec<Packed<M>>,
    ) {
        if !self.aggregation {
            out.push(plain(u));
            return;
        }
        let max = self.max_aggregate_bytes;
        let open = match shard_of(u.hash) {
            Some(i) => {
                if self.shards.len() <= i {
                    self.shards.resize_with(i + 1, Open::default);
                }
                &mut self.shards[i]
            }
            None => {
                let unknown = &mut self.unknown;
                let i = *self
                    .unknown_index
                    .entry(u.partition_key.clone())
                    .or_insert_with(|| {
                        unknown.push(Open::default());
                        unknown.len() - 1
                    });
                &mut unknown[i]
            }
        };
        open.add(u, max, out);
    }

    /// Finishes every open aggregate into `out`; the packer is empty after.
    pub fn finish(&mut self, out: &mut Vec<Packed<M>>) {
        for open in self.shards.iter_mut().chain(self.unknown.iter_mut()) {
            open.finish(out);
        }
        self.unknown.clear();
        self.unknown_index.clear();
    }
}

impl<M> Open<M> {
    fn add(&mut self, u: UserRec<M>, max_aggregate_bytes: usize, out: &mut Vec<Packed<M>>) {
        // Each v2 single is split once: its entry and event fields, sized and then added.
        let split = split_of(&u);
        let v2 = split.is_some();
        if self.builder.as_ref().is_some_and(|b| b.is_v2() != v2) {
            // A v1 payload after v2 singles (or the reverse): a builder holds one kind.
            self.finish(out);
        }
        let limit = |users: &[UserRec<M>]| {
            max_aggregate_bytes.min(
                MAX_RECORD_BYTES
                    - users
                        .first()
                        .map_or(&u.partition_key, |f| &f.partition_key)
                        .len(),
            )
        };
        let builder = self.builder.get_or_insert_with(|| {
            Builder::new(v2, &mut self.spare, self.last_len, max_aggregate_bytes)
        });
        if !builder.add_within(&u, split.as_ref(), limit(&self.users)) {
            self.finish(out);
            let builder = self.builder.insert(Builder::new(
                v2,
                &mut self.spare,
                self.last_len,
                max_aggregate_bytes,
            ));
            let added = builder.add_within(&u, split.as_ref(), limit(&[]));
            debug_assert!(added, "an empty aggregate takes any user record");
        }
        self.users.push(u);
    }

    fn finish(&mut self, out: &mut Vec<Packed<M>>) {
        let Some(builder) = self.builder.take() else {
            return;
        };
        let next = Vec::with_capacity(self.users.len());
        let users = std::mem::replace(&mut self.users, next);
        let (packed, spare) = finish(users, builder);
        self.last_len = packed.entry.data.len();
        self.spare = spare;
        out.push(packed);
    }
}

/// A v2 single's entry and event fields, as ranges of its payload.
type Split = (Range<usize>, Range<usize>);

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
    /// An empty aggregate: a v2 one is `spare` when there is one, else reserves as many
    /// bytes for its refs as its shard's last aggregate took (`last_len`, 0 before the
    /// first), at most `max_aggregate_bytes`.
    fn new(
        v2: bool,
        spare: &mut Option<AggregateV2Builder>,
        last_len: usize,
        max_aggregate_bytes: usize,
    ) -> Self {
        if v2 {
            if let Some(b) = spare.take() {
                debug_assert!(b.is_empty(), "a spare builder is empty");
                return Builder::V2(b);
            }
            let reserve = if last_len == 0 {
                FIRST_REFS_CAPACITY
            } else {
                last_len
            };
            Builder::V2(AggregateV2Builder::with_refs_capacity(
                reserve.min(max_aggregate_bytes),
            ))
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

    fn is_v2(&self) -> bool {
        matches!(self, Builder::V2(_))
    }

    /// The aggregate's bytes, and (v2) the builder emptied with its room kept.
    fn finish(self) -> (Bytes, Option<AggregateV2Builder>) {
        match self {
            Builder::V1(b) => (b.finish(), None),
            Builder::V2(mut b) => {
                let bytes = b.finish_and_clear();
                (bytes, Some(b))
            }
        }
    }

    /// Drops the aggregate unwritten; (v2) the builder emptied with its room kept.
    fn discard(self) -> Option<AggregateV2Builder> {
        match self {
            Builder::V1(_) => None,
            Builder::V2(mut b) => {
                b.clear();
                Some(b)
            }
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

/// The record of an aggregate's user records (a lone one goes plain), and (v2) its builder
/// emptied for the shard's next aggregate.
fn finish<M>(
    mut users: Vec<UserRec<M>>,
    builder: Builder,
) -> (Packed<M>, Option<AggregateV2Builder>) {
    if users.len() == 1 {
        let spare = builder.discard();
        return (plain(users.pop().expect("one user record")), spare);
    }
    let first_pk = users[0].partition_key.clone();
    let route_hash = users[0].hash;
    // The first user record's hash lies in the shard every user record here maps to; without
    // the explicit key, Kinesis would route by the first partition key, which is the same
    // shard only while our shard map is current. Same-key aggregates need no explicit key.
    let mixed = users
        .iter()
        .any(|u| !Arc::ptr_eq(&u.partition_key, &first_pk) && u.partition_key != first_pk);
    let (data, spare) = builder.finish();
    let packed = Packed {
        entry: PutEntry {
            data,
            partition_key: first_pk.to_string(),
            explicit_hash_key: mixed.then(|| route_hash.to_string()),
        },
        route_hash,
        users: users.into_iter().map(|u| u.meta).collect(),
    };
    (packed, spare)
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
