//! A KPL aggregate of v2 user records (docs/wire-format.md, "Aggregates"): the entry table
//! first, then one ref per event. Each ref carries its group's partition key, as a v1 user
//! record does, and the KPL writes each key once per aggregate: when the key names the group,
//! the entry leaves the group out, so one producer's entries are one table entry.

use std::hash::BuildHasher;

use bytes::{BufMut, Bytes, BytesMut};
use foldhash::fast::FixedState;
use hashbrown::HashTable;
use md5::{Digest, Md5};
use prost::encoding::{encode_varint, encoded_len_varint};

use super::kpl::{AGGREGATE_OVERHEAD, KPL_MAGIC};
use super::v2::{
    HEADER_LEN, KIND_REF, V2, encode_table, ref_len, split_single_ranges, table_entry_len,
};

/// Builds one v2 aggregate, tracking its exact encoded size as events are added. The refs'
/// KPL records are written as they come, into one buffer (no allocation per event); the
/// aggregate's bytes are what `prost` writes for the same `AggregatedRecord` (tested).
#[derive(Debug, Default)]
pub struct AggregateV2Builder {
    /// Partition keys in KPL table order (the table's user record uses the first).
    pks: ByteTable,
    /// Bytes of the KPL key table.
    pk_table_len: usize,
    /// The v2 table's entries in index order.
    entries: ByteTable,
    /// Bytes of the v2 table's message (after its header).
    table_len: usize,
    /// The refs' KPL `Record`s (field 3 of the `AggregatedRecord`), encoded.
    refs_body: Vec<u8>,
    refs: usize,
}

/// Fixed seed: lookups only, nothing hashed is written.
const HASHER: FixedState = FixedState::with_seed(0x6167_6772_6567_5f32);

fn hash_of(bytes: &[u8]) -> u64 {
    HASHER.hash_one(bytes)
}

/// Bytes a KPL `Record` (partition key index `pk_ix`, no explicit hash key, `data_len` data
/// bytes) takes in the aggregate's body.
fn kpl_record_len(pk_ix: u64, data_len: usize) -> usize {
    let inner = 1 + encoded_len_varint(pk_ix) + field_len(data_len);
    field_len(inner)
}

fn field_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// Protobuf keys of the KPL messages (field number << 3 | wire type).
const KEY_PK_TABLE: u8 = 1 << 3 | 2;
const KEY_RECORDS: u8 = 3 << 3 | 2;
const KEY_PK_INDEX: u8 = 1 << 3;
const KEY_DATA: u8 = 3 << 3 | 2;
/// The v2 ref's `entry_index` field (2, varint).
const KEY_ENTRY_INDEX: u8 = 2 << 3;

/// Appends a KPL `Record` (partition key index `pk_ix`, data `head` then `data`).
fn put_kpl_record(out: &mut impl BufMut, pk_ix: u64, head: &[u8], data: &[u8]) {
    let data_len = head.len() + data.len();
    out.put_u8(KEY_RECORDS);
    encode_varint(
        (1 + encoded_len_varint(pk_ix) + field_len(data_len)) as u64,
        out,
    );
    out.put_u8(KEY_PK_INDEX);
    encode_varint(pk_ix, out);
    out.put_u8(KEY_DATA);
    encode_varint(data_len as u64, out);
    out.put_slice(head);
    out.put_slice(data);
}

/// Byte strings in index order, end to end in one buffer, found by their hash: the builder's
/// partition keys and table entries. Cleared, it keeps its room, so a reused builder
/// ([`AggregateV2Builder::finish_and_clear`]) grows nothing again.
#[derive(Debug, Default)]
struct ByteTable {
    bytes: Vec<u8>,
    /// Each string's range of `bytes`.
    ranges: Vec<(usize, usize)>,
    /// Indexes into `ranges`, by the hash ([`hash_of`]) of their string.
    lookup: HashTable<u64>,
}

impl ByteTable {
    fn len(&self) -> u64 {
        self.ranges.len() as u64
    }

    fn get(&self, i: u64) -> &[u8] {
        let (a, b) = self.ranges[i as usize];
        &self.bytes[a..b]
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.ranges.iter().map(|&(a, b)| &self.bytes[a..b])
    }

    /// The index of `key`, whose hash is `hash`.
    fn find(&self, hash: u64, key: &[u8]) -> Option<u64> {
        self.lookup.find(hash, |&i| self.get(i) == key).copied()
    }

    /// Adds `key`, whose hash is `hash`, at the next index.
    fn push(&mut self, hash: u64, key: &[u8]) {
        let (bytes, ranges) = (&self.bytes, &self.ranges);
        self.lookup
            .insert_unique(hash, self.ranges.len() as u64, |&i| {
                let (a, b) = ranges[i as usize];
                hash_of(&bytes[a..b])
            });
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.ranges.push((start, self.bytes.len()));
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ranges.clear();
        self.lookup.clear();
    }
}

/// Where `(pk_ix, entry_ix)` stand for an event about to be added, and what it adds.
struct Placed {
    pk: Option<u64>,
    entry: Option<u64>,
    pk_ix: u64,
    entry_ix: u64,
    pk_hash: u64,
    entry_hash: u64,
}

impl AggregateV2Builder {
    /// An empty aggregate.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty aggregate whose refs' buffer holds `bytes` before it grows (what the refs
    /// about to be added take: one allocation per aggregate instead of one per doubling).
    pub fn with_refs_capacity(bytes: usize) -> Self {
        Self {
            refs_body: Vec::with_capacity(bytes),
            ..Self::default()
        }
    }

    /// Events added.
    pub fn len(&self) -> usize {
        self.refs
    }

    /// True when no event was added.
    pub fn is_empty(&self) -> bool {
        self.refs == 0
    }

    fn total(&self, pk_table_len: usize, table_len: usize, refs_body_len: usize) -> usize {
        AGGREGATE_OVERHEAD
            + pk_table_len
            + kpl_record_len(0, HEADER_LEN + table_len)
            + refs_body_len
    }

    /// Encoded size of the whole aggregate as it stands (0 when empty).
    pub fn encoded_len(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        self.total(self.pk_table_len, self.table_len, self.refs_body.len())
    }

    /// Encoded size of the whole aggregate if the v2 single `single` (partition key
    /// `partition_key`) were added; `None` when `single` is not a v2 single.
    pub fn encoded_len_with(&self, partition_key: &str, single: &Bytes) -> Option<usize> {
        let (entry, fields) = split_single_ranges(single, partition_key)?;
        Some(self.encoded_len_with_split(partition_key, &single[entry], fields.len()))
    }

    fn place(&self, partition_key: &str, entry: &[u8]) -> Placed {
        let pk_hash = hash_of(partition_key.as_bytes());
        let entry_hash = hash_of(entry);
        let pk = self.pks.find(pk_hash, partition_key.as_bytes());
        let found = self.entries.find(entry_hash, entry);
        Placed {
            pk,
            entry: found,
            pk_ix: pk.unwrap_or(self.pks.len()),
            entry_ix: found.unwrap_or(self.entries.len()),
            pk_hash,
            entry_hash,
        }
    }

    fn len_placed(
        &self,
        at: &Placed,
        partition_key: &str,
        entry: &[u8],
        fields_len: usize,
    ) -> usize {
        let table_len = match at.entry {
            Some(_) => self.table_len,
            None => self.table_len + table_entry_len(entry.len()),
        };
        let pk_table_len = match at.pk {
            Some(_) => self.pk_table_len,
            None => self.pk_table_len + field_len(partition_key.len()),
        };
        let refs =
            self.refs_body.len() + kpl_record_len(at.pk_ix, ref_len(at.entry_ix, fields_len));
        self.total(pk_table_len, table_len, refs)
    }

    /// [`AggregateV2Builder::encoded_len_with`] for a single already split by
    /// [`split_single_ranges`] into `entry` and `fields_len` bytes of event fields.
    pub fn encoded_len_with_split(
        &self,
        partition_key: &str,
        entry: &[u8],
        fields_len: usize,
    ) -> usize {
        let at = self.place(partition_key, entry);
        self.len_placed(&at, partition_key, entry, fields_len)
    }

    /// Adds the v2 single `single`; false (nothing added) when it is not one.
    pub fn add(&mut self, partition_key: &str, single: &Bytes) -> bool {
        let Some((entry, fields)) = split_single_ranges(single, partition_key) else {
            return false;
        };
        self.add_split(partition_key, &single[entry], &single[fields]);
        true
    }

    /// [`AggregateV2Builder::add`] for a single already split by [`split_single_ranges`]:
    /// the entry is copied only when it is new to the table.
    pub fn add_split(&mut self, partition_key: &str, entry: &[u8], fields: &[u8]) {
        let at = self.place(partition_key, entry);
        self.add_placed(&at, partition_key, entry, fields);
    }

    /// Adds the split single if the aggregate then stays within `limit` bytes, or when it is
    /// empty (one event always fits a record); returns whether it was added.
    pub fn add_split_within(
        &mut self,
        partition_key: &str,
        entry: &[u8],
        fields: &[u8],
        limit: usize,
    ) -> bool {
        let at = self.place(partition_key, entry);
        if !self.is_empty() && self.len_placed(&at, partition_key, entry, fields.len()) > limit {
            return false;
        }
        self.add_placed(&at, partition_key, entry, fields);
        true
    }

    fn add_placed(&mut self, at: &Placed, partition_key: &str, entry: &[u8], fields: &[u8]) {
        if at.pk.is_none() {
            self.pk_table_len += field_len(partition_key.len());
            debug_assert_eq!(at.pk_ix, self.pks.len(), "placed at the next index");
            self.pks.push(at.pk_hash, partition_key.as_bytes());
        }
        if at.entry.is_none() {
            self.table_len += table_entry_len(entry.len());
            debug_assert_eq!(at.entry_ix, self.entries.len(), "placed at the next index");
            self.entries.push(at.entry_hash, entry);
        }
        // The ref: version and kind, the entry index unless 0 (protobuf's default), fields.
        let mut head = [0u8; 2 + 1 + 10];
        head[..2].copy_from_slice(&[V2, KIND_REF]);
        let mut n = 2;
        if at.entry_ix != 0 {
            let cap = head.len() - 2;
            let mut rest = &mut head[2..];
            rest.put_u8(KEY_ENTRY_INDEX);
            encode_varint(at.entry_ix, &mut rest);
            n = 2 + cap - rest.len();
        }
        debug_assert_eq!(n + fields.len(), ref_len(at.entry_ix, fields.len()));
        put_kpl_record(&mut self.refs_body, at.pk_ix, &head[..n], fields);
        self.refs += 1;
    }

    /// Encodes magic + protobuf body (the key table, the table, then the refs) + MD5 trailer.
    pub fn finish(self) -> Bytes {
        self.encode()
    }

    /// [`AggregateV2Builder::finish`], leaving the builder empty with its room kept (its
    /// buffers and lookup tables), for the next aggregate to fill without growing them again.
    pub fn finish_and_clear(&mut self) -> Bytes {
        let out = self.encode();
        self.clear();
        out
    }

    /// Empties the builder, keeping its room.
    pub fn clear(&mut self) {
        self.pks.clear();
        self.pk_table_len = 0;
        self.entries.clear();
        self.table_len = 0;
        self.refs_body.clear();
        self.refs = 0;
    }

    fn encode(&self) -> Bytes {
        let expected = self.encoded_len();
        // The table's user record carries the first partition key (index 0); every ref keeps
        // the index it was given, so the KPL key table is `pks` as it stands.
        let table = encode_table(self.entries.iter());
        let mut out = BytesMut::with_capacity(expected);
        out.put_slice(&KPL_MAGIC);
        for pk in self.pks.iter() {
            out.put_u8(KEY_PK_TABLE);
            encode_varint(pk.len() as u64, &mut out);
            out.put_slice(pk);
        }
        put_kpl_record(&mut out, 0, &[], &table);
        out.put_slice(&self.refs_body);
        let digest = Md5::digest(&out[KPL_MAGIC.len()..]);
        out.put_slice(digest.as_slice());
        debug_assert_eq!(out.len(), expected, "v2 size tracking matches");
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::kpl::{encode_message, pb};
    use crate::wire::v2::{encode_ref, split_single};
    use crate::{Event, wire::encode_single};
    use chrono::{TimeZone, Utc};

    /// The hand-written encoding is byte for byte what `prost` writes for the same message.
    #[test]
    fn the_aggregate_is_prosts_encoding() {
        let t = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let mut b = AggregateV2Builder::new();
        let mut refs = Vec::new();
        let mut pks: Vec<String> = Vec::new();
        let mut entries: Vec<Bytes> = Vec::new();
        for i in 0..300u64 {
            let g = i % 7;
            let arn = format!("arn:aws:license-manager::123456789012:license:l-{g:032x}");
            let mut e = Event::new(&arn, "123456789012", "reqs", i * 1_000, t)
                .with_event_id(format!("id-{i}"));
            if i % 3 == 0 {
                e = e.with_producer_id(format!("p{}", i % 2));
            }
            // Every fourth event names its group by another key: the entry keeps the group.
            let pk = if i % 4 == 0 {
                format!("k{g}")
            } else {
                format!("{arn}|123456789012|reqs")
            };
            let single = Bytes::from(encode_single(&e));
            assert!(b.add(&pk, &single));
            let (entry, fields) = split_single(&single, &pk).unwrap();
            let pk_ix = pks.iter().position(|p| *p == pk).unwrap_or_else(|| {
                pks.push(pk.clone());
                pks.len() - 1
            });
            let ix = entries.iter().position(|x| *x == entry).unwrap_or_else(|| {
                entries.push(entry.clone());
                entries.len() - 1
            });
            refs.push(pb::Record {
                partition_key_index: pk_ix as u64,
                explicit_hash_key_index: None,
                data: encode_ref(ix as u64, &fields),
                tags: Vec::new(),
            });
        }
        let mut records = vec![pb::Record {
            partition_key_index: 0,
            explicit_hash_key_index: None,
            data: encode_table(entries.iter().map(|e| &e[..])),
            tags: Vec::new(),
        }];
        records.extend(refs);
        let want = encode_message(pb::AggregatedRecord {
            partition_key_table: pks,
            explicit_hash_key_table: Vec::new(),
            records,
        });
        assert_eq!(b.encoded_len(), want.len());
        assert_eq!(b.finish(), want);
    }

    /// `n` singles of groups `first..first + groups` (each its own partition key), with ids.
    fn singles(first: u64, groups: u64, n: u64) -> Vec<(String, Bytes)> {
        let t = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        (0..n)
            .map(|i| {
                let g = first + i % groups;
                let arn = format!("arn:aws:license-manager::123456789012:license:l-{g:032x}");
                let e = Event::new(&arn, "123456789012", "reqs", i + 1, t)
                    .with_event_id(format!("id-{g}-{i}"))
                    .with_producer_id(format!("p{}", g % 2));
                (
                    format!("{arn}|123456789012|reqs"),
                    Bytes::from(encode_single(&e)),
                )
            })
            .collect()
    }

    fn fresh(singles: &[(String, Bytes)]) -> Bytes {
        let mut b = AggregateV2Builder::new();
        for (pk, single) in singles {
            assert!(b.add(pk, single));
        }
        b.finish()
    }

    /// A builder emptied by `finish_and_clear` or `clear` keeps its room, and writes the next
    /// aggregate byte for byte as a new builder does: no key, entry or ref of the last one
    /// is left in its tables, sizes or buffers (the packer reuses one per shard).
    #[test]
    fn a_reused_builder_writes_what_a_new_one_writes() {
        let first = singles(0, 5, 40);
        let second = singles(3, 4, 25);
        let mut b = AggregateV2Builder::new();
        for (pk, single) in &first {
            assert!(b.add(pk, single));
        }
        assert_eq!(b.finish_and_clear(), fresh(&first));
        assert!(b.is_empty());
        assert_eq!(b.encoded_len(), 0);
        assert!(b.refs_body.capacity() > 0, "the room is kept");
        for (pk, single) in &second {
            assert!(b.add(pk, single));
        }
        assert_eq!(b.encoded_len(), fresh(&second).len());
        assert_eq!(b.finish_and_clear(), fresh(&second));
        // Cleared half-way (an aggregate dropped unwritten), then filled again.
        for (pk, single) in &first[..7] {
            assert!(b.add(pk, single));
        }
        b.clear();
        for (pk, single) in &second {
            assert!(b.add(pk, single));
        }
        assert_eq!(b.finish(), fresh(&second));
    }
}
