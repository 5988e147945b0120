//! A KPL aggregate of v2 user records (docs/wire-format.md, "Aggregates"): the entry table
//! first, then one ref per event. Each ref carries its group's partition key, as a v1 user
//! record does, and the KPL writes each key once per aggregate: when the key names the group,
//! the entry leaves the group out, so one producer's entries are one table entry.

use std::collections::HashMap;

use bytes::Bytes;
use prost::encoding::encoded_len_varint;

use super::kpl::AGGREGATE_OVERHEAD;
use super::kpl::{encode_message, pb};
use super::v2::{
    HEADER_LEN, encode_ref, encode_table, ref_len, split_single_ranges, table_entry_len,
};

/// Builds one v2 aggregate, tracking its exact encoded size as events are added.
#[derive(Debug, Default)]
pub struct AggregateV2Builder {
    /// Partition keys in KPL table order (the table's user record uses the first).
    pks: Vec<String>,
    pk_lookup: HashMap<String, u64>,
    /// Bytes of the KPL key table.
    pk_table_len: usize,
    entries: Vec<Bytes>,
    lookup: HashMap<Bytes, u64>,
    /// Bytes of the v2 table's message (after its header).
    table_len: usize,
    /// `(partition key index, ref)` per event.
    refs: Vec<(u64, Bytes)>,
    /// Bytes the refs take in the KPL body.
    refs_body_len: usize,
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

impl AggregateV2Builder {
    /// An empty aggregate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Events added.
    pub fn len(&self) -> usize {
        self.refs.len()
    }

    /// True when no event was added.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
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
        self.total(self.pk_table_len, self.table_len, self.refs_body_len)
    }

    /// Encoded size of the whole aggregate if the v2 single `single` (partition key
    /// `partition_key`) were added; `None` when `single` is not a v2 single.
    pub fn encoded_len_with(&self, partition_key: &str, single: &Bytes) -> Option<usize> {
        let (entry, fields) = split_single_ranges(single, partition_key)?;
        Some(self.encoded_len_with_split(partition_key, &single[entry], fields.len()))
    }

    /// [`AggregateV2Builder::encoded_len_with`] for a single already split by
    /// [`split_single_ranges`] into `entry` and `fields_len` bytes of event fields.
    pub fn encoded_len_with_split(
        &self,
        partition_key: &str,
        entry: &[u8],
        fields_len: usize,
    ) -> usize {
        let (ix, table_len) = match self.lookup.get(entry) {
            Some(ix) => (*ix, self.table_len),
            None => (
                self.entries.len() as u64,
                self.table_len + table_entry_len(entry.len()),
            ),
        };
        let (pk_ix, pk_table_len) = match self.pk_lookup.get(partition_key) {
            Some(i) => (*i, self.pk_table_len),
            None => (
                self.pks.len() as u64,
                self.pk_table_len + field_len(partition_key.len()),
            ),
        };
        let refs = self.refs_body_len + kpl_record_len(pk_ix, ref_len(ix, fields_len));
        self.total(pk_table_len, table_len, refs)
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
        let pk_ix = match self.pk_lookup.get(partition_key) {
            Some(i) => *i,
            None => {
                let i = self.pks.len() as u64;
                self.pk_table_len += field_len(partition_key.len());
                self.pk_lookup.insert(partition_key.to_owned(), i);
                self.pks.push(partition_key.to_owned());
                i
            }
        };
        let ix = match self.lookup.get(entry) {
            Some(ix) => *ix,
            None => {
                let ix = self.entries.len() as u64;
                let entry = Bytes::copy_from_slice(entry);
                self.table_len += table_entry_len(entry.len());
                self.lookup.insert(entry.clone(), ix);
                self.entries.push(entry);
                ix
            }
        };
        let r = encode_ref(ix, fields);
        self.refs_body_len += kpl_record_len(pk_ix, r.len());
        self.refs.push((pk_ix, r));
    }

    /// Encodes magic + protobuf body (table, then the refs) + MD5 trailer.
    pub fn finish(self) -> Bytes {
        let expected = self.encoded_len();
        // The table's user record carries the first partition key (index 0); every ref keeps
        // the index it was given, so the KPL key table is `pks` as it stands.
        let table = pb::Record {
            partition_key_index: 0,
            explicit_hash_key_index: None,
            data: encode_table(self.entries.iter().map(|e| &e[..])),
            tags: Vec::new(),
        };
        let mut records = Vec::with_capacity(self.refs.len() + 1);
        records.push(table);
        records.extend(self.refs.into_iter().map(|(pk_ix, data)| pb::Record {
            partition_key_index: pk_ix,
            explicit_hash_key_index: None,
            data,
            tags: Vec::new(),
        }));
        let out = encode_message(pb::AggregatedRecord {
            partition_key_table: self.pks,
            explicit_hash_key_table: Vec::new(),
            records,
        });
        debug_assert_eq!(out.len(), expected, "v2 size tracking matches");
        out
    }
}
