//! The v2 event encoding: binary user records (docs/wire-format.md). Byte 0 is the version
//! (`0x02`), byte 1 the kind, then a protobuf message:
//!
//! | kind | message | where |
//! |---|---|---|
//! | `0x00` table | `1: repeated bytes entries` (each an `Entry`) | first user record of an aggregate |
//! | `0x01` single | `1: Entry entry` + the event fields | a plain record, and `record()`'s payload |
//! | `0x02` ref | `2: uint64 entry_index` (0 when absent) + the event fields | every other user record of an aggregate |
//!
//! `Entry` is `1: license ARN, 2: account id, 3: dimension, 4: producer id?, 5: epoch (16
//! bytes)?` — what many events share, written once per aggregate. In a table the group (1–3)
//! is left out when the ref's KPL partition key names it (`licenseArn|account|dimension`,
//! the KPL's own per-aggregate key table): then a ref's group is its partition key's. The event fields are
//! `3: quantity, 4: timestamp (epoch milliseconds), 5: lane, 6: seq` (a generated id
//! `p:{epoch}:{lane}:{seq}`, the epoch from the entry) or `7: eventId` (any other id), and
//! `8: repeated Allocation {1: quantity, 2: repeated Tag {1: key, 2: value}}`.
//!
//! A single is its entry field followed by its event fields, so the producer turns it into a
//! ref by slicing: no re-encoding ([`split_single`]). Decoding borrows from the bytes
//! ([`EventV2`], [`EntryV2`]) and is strict: an unknown field, a repeated scalar, a string that
//! is not UTF-8 are refused, each with a specific reason.

use bytes::{BufMut, Bytes, BytesMut};
use chrono::DateTime;
use prost::encoding::{encode_varint, encoded_len_varint};

use crate::error::{DecodeError, V2Error};
use crate::event::{Event, Tag, UsageAllocation, truncate_to_millis};
use crate::event_id::GeneratedId;

// Sizing and splitting a single without decoding it (the producer's packing path).
mod in_order;
mod split;
pub use in_order::{RefV2, decode_ref_in_order};
pub use split::{
    SplitSingle, allocations_len, generated_single_len, put_generated_single, put_single_from_head,
    single_head,
};
pub use split::{encode_single_into, single_len, single_len_as, split_single, split_single_ranges};

/// The version byte of a v2 user record.
pub const V2: u8 = 0x02;
/// Kind byte: the aggregate's entry table.
pub const KIND_TABLE: u8 = 0x00;
/// Kind byte: one self-contained event.
pub const KIND_SINGLE: u8 = 0x01;
/// Kind byte: one event whose entry is an index into the aggregate's table.
pub const KIND_REF: u8 = 0x02;
/// Header bytes before the protobuf message.
pub const HEADER_LEN: usize = 2;
/// Longest varint (64 bits, 7 per byte).
const MAX_VARINT_LEN: usize = 10;

const WT_VARINT: u8 = 0;
const WT_LEN: u8 = 2;

/// True when `data` is a binary user record (a control byte other than JSON whitespace
/// first), which [`decode_v2`] reads or refuses (`UnknownWireVersion`).
pub fn is_binary(data: &[u8]) -> bool {
    matches!(data.first(), Some(b) if *b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
}

fn key(out: &mut BytesMut, field: u32, wire_type: u8) {
    encode_varint(u64::from(field << 3 | u32::from(wire_type)), out);
}

fn put_varint(out: &mut BytesMut, field: u32, v: u64) {
    key(out, field, WT_VARINT);
    encode_varint(v, out);
}

fn put_bytes(out: &mut BytesMut, field: u32, v: &[u8]) {
    key(out, field, WT_LEN);
    encode_varint(v.len() as u64, out);
    out.put_slice(v);
}

/// Bytes of a length-delimited field `field` (< 16) holding `len` bytes.
fn bytes_field_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// Encodes `event` as a v2 single (kind `0x01`). The event should have passed
/// [`Event::validate`]; the producer guarantees that before it encodes. A generated id is
/// written as its lane and sequence with the epoch in the entry; any other id as its string.
pub fn encode_single(event: &Event) -> Vec<u8> {
    encode_single_bytes(event, None).into()
}

/// [`encode_single`] into one buffer, as [`Bytes`]. `generated` is the event's id when the
/// caller just generated it (its string is `generated`'s `Display`), saving the parse.
pub fn encode_single_bytes(event: &Event, generated: Option<GeneratedId>) -> Bytes {
    let (producer_id, id) = (
        event.producer_id.as_deref(),
        split::resolve_id(event, generated),
    );
    // The exact size: a full buffer freezes into `Bytes` without another allocation.
    let len = split::resolved_single_len(event, producer_id, id);
    let mut out = BytesMut::with_capacity(len);
    split::write_single(&mut out, event, producer_id, id);
    debug_assert_eq!(out.len(), len, "single_len matches the encoding");
    out.freeze()
}

/// Bytes of the ref (kind `0x02`) for an event whose entry has index `entry_index` (index 0,
/// the common case, is not written: protobuf's default).
pub fn ref_len(entry_index: u64, fields_len: usize) -> usize {
    let ix = if entry_index == 0 {
        0
    } else {
        1 + encoded_len_varint(entry_index)
    };
    HEADER_LEN + ix + fields_len
}

/// The ref (kind `0x02`) of an event split by [`split_single`].
pub fn encode_ref(entry_index: u64, fields: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(ref_len(entry_index, fields.len()));
    out.put_slice(&[V2, KIND_REF]);
    if entry_index != 0 {
        put_varint(&mut out, 2, entry_index);
    }
    out.put_slice(fields);
    out.freeze()
}

/// Bytes one entry of `entry_len` bytes adds to a table's message.
pub fn table_entry_len(entry_len: usize) -> usize {
    1 + encoded_len_varint(entry_len as u64) + entry_len
}

/// The table (kind `0x00`) of `entries` (the `Entry` message bytes, in index order).
pub fn encode_table<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> Bytes {
    let mut out = BytesMut::with_capacity(256);
    out.put_slice(&[V2, KIND_TABLE]);
    for e in entries {
        put_bytes(&mut out, 1, e);
    }
    out.freeze()
}

/// A protobuf reader over borrowed bytes that tells a truncated field from a bad varint.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    #[inline]
    fn done(&self) -> bool {
        self.at >= self.buf.len()
    }

    /// A varint: one byte (field keys, small numbers) read inline, longer ones by
    /// [`Reader::long_varint`].
    #[inline]
    fn varint(&mut self) -> Result<u64, V2Error> {
        match self.buf.get(self.at) {
            Some(&b) if b < 0x80 => {
                self.at += 1;
                Ok(u64::from(b))
            }
            _ => self.long_varint(),
        }
    }

    fn long_varint(&mut self) -> Result<u64, V2Error> {
        let rest = self.buf.get(self.at..).unwrap_or_default();
        let mut v = 0u64;
        for (i, &b) in rest.iter().take(MAX_VARINT_LEN).enumerate() {
            if i == MAX_VARINT_LEN - 1 && b > 1 {
                return Err(V2Error::BadVarint("a varint overflows 64 bits".into()));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.at += i + 1;
                return Ok(v);
            }
        }
        // The tenth byte ends a varint or fails above: only a varint cut short gets here.
        Err(V2Error::Truncated("a varint runs past the end".into()))
    }

    /// The next `(field, wire type)`.
    #[inline]
    fn key(&mut self) -> Result<(u64, u8), V2Error> {
        let k = self.varint()?;
        Ok((k >> 3, (k & 7) as u8))
    }

    fn bytes(&mut self) -> Result<&'a [u8], V2Error> {
        let len = self.varint()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| self.at.checked_add(l))
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| {
                V2Error::Truncated(format!(
                    "a {len}-byte field with {} bytes left",
                    self.buf.len() - self.at
                ))
            })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn str(&mut self, field: &str) -> Result<&'a str, V2Error> {
        std::str::from_utf8(self.bytes()?)
            .map_err(|_| V2Error::Malformed(format!("{field} is not UTF-8")))
    }
}

/// Reads fields of `buf` until its end, calling `f(field, wire type, reader)` for each.
fn fields<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u64, u8, &mut Reader<'a>) -> Result<(), V2Error>,
) -> Result<(), V2Error> {
    let mut r = Reader::new(buf);
    while !r.done() {
        let (field, wt) = r.key()?;
        f(field, wt, &mut r)?;
    }
    Ok(())
}

fn once<T>(slot: &mut Option<T>, v: T, name: &str) -> Result<(), V2Error> {
    if slot.replace(v).is_some() {
        return Err(V2Error::Malformed(format!("{name} appears twice")));
    }
    Ok(())
}

fn unexpected(what: &str, field: u64, wt: u8) -> V2Error {
    V2Error::Malformed(format!("{what}: unknown field {field} (wire type {wt})"))
}

/// A group as the wire names it: license ARN, buyer account id, dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupV2<'a> {
    /// License ARN.
    pub license_arn: &'a str,
    /// Buyer account id.
    pub customer_aws_account_id: &'a str,
    /// Dimension.
    pub dimension: &'a str,
}

impl<'a> GroupV2<'a> {
    /// The group a partition key `licenseArn|customerAWSAccountId|dimension` names (neither a
    /// license ARN nor an account id holds a `|`); `None` for a hashed key (`g:…`).
    pub fn from_partition_key(pk: &'a str) -> Option<Self> {
        let mut parts = pk.splitn(3, '|');
        Some(Self {
            license_arn: parts.next()?,
            customer_aws_account_id: parts.next()?,
            dimension: parts.next()?,
        })
    }
}

/// One table entry, borrowed from the record's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryV2<'a> {
    /// The group; `None` in a ref's entry when the user record's partition key names it.
    pub group: Option<GroupV2<'a>>,
    /// Producer id, if any.
    pub producer_id: Option<&'a str>,
    /// The producer epoch of the entry's generated ids, if any.
    pub epoch: Option<u128>,
}

impl<'a> EntryV2<'a> {
    /// Decodes one `Entry` message.
    pub fn decode(buf: &'a [u8]) -> Result<Self, V2Error> {
        let (mut l, mut a, mut d, mut p, mut e) = (None, None, None, None, None);
        fields(buf, |field, wt, r| match (field, wt) {
            (1, WT_LEN) => once(&mut l, r.str("licenseArn")?, "licenseArn"),
            (2, WT_LEN) => once(&mut a, r.str("customerAWSAccountId")?, "account"),
            (3, WT_LEN) => once(&mut d, r.str("dimension")?, "dimension"),
            (4, WT_LEN) => once(&mut p, r.str("producerId")?, "producerId"),
            (5, WT_LEN) => {
                let b: [u8; 16] = r
                    .bytes()?
                    .try_into()
                    .map_err(|_| V2Error::Malformed("the epoch is not 16 bytes".into()))?;
                once(&mut e, u128::from_be_bytes(b), "epoch")
            }
            (f, w) => Err(unexpected("entry", f, w)),
        })?;
        let group = match (l, a, d) {
            (Some(license_arn), Some(customer_aws_account_id), Some(dimension)) => Some(GroupV2 {
                license_arn,
                customer_aws_account_id,
                dimension,
            }),
            (None, None, None) => None,
            _ => {
                return Err(V2Error::Malformed(
                    "an entry with part of a group (licenseArn, account, dimension)".into(),
                ));
            }
        };
        Ok(Self {
            group,
            producer_id: p,
            epoch: e,
        })
    }
}

/// The id of a v2 event as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdV2<'a> {
    /// A generated id: lane and sequence (the epoch is the entry's).
    Generated {
        /// Lane.
        lane: u8,
        /// Sequence (≥ 1).
        seq: u64,
    },
    /// Any other id.
    Supplied(&'a str),
}

/// Where a v2 event's entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryAt<'a> {
    /// Inline (a single).
    Inline(EntryV2<'a>),
    /// An index into the aggregate's table (a ref).
    Index(u64),
}

/// One v2 event, borrowed from the record's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventV2<'a> {
    /// Its entry.
    pub entry: EntryAt<'a>,
    /// Quantity.
    pub quantity: u64,
    /// Client time, epoch milliseconds.
    pub timestamp_ms: i64,
    /// Its id.
    pub id: IdV2<'a>,
    /// The raw `Allocation` messages (decoded by [`EventV2::allocations`]); empty: none.
    allocations: Option<&'a [u8]>,
    /// The bytes of the whole message (to walk the allocations again).
    body: &'a [u8],
}

/// One decoded v2 user record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordV2<'a> {
    /// The aggregate's entry table.
    Table(Vec<EntryV2<'a>>),
    /// One event.
    Event(EventV2<'a>),
}

/// Decodes one v2 user record (`data` starts with a binary version byte).
pub fn decode_v2(data: &[u8]) -> Result<RecordV2<'_>, V2Error> {
    match data {
        [V2, KIND_TABLE, body @ ..] => {
            let mut entries = Vec::new();
            fields(body, |field, wt, r| match (field, wt) {
                (1, WT_LEN) => {
                    entries.push(EntryV2::decode(r.bytes()?)?);
                    Ok(())
                }
                (f, w) => Err(unexpected("table", f, w)),
            })?;
            Ok(RecordV2::Table(entries))
        }
        [V2, kind @ (KIND_SINGLE | KIND_REF), body @ ..] => {
            decode_event_v2(*kind, body).map(RecordV2::Event)
        }
        [V2, kind, ..] => Err(V2Error::Malformed(format!("unknown kind {kind:#04x}"))),
        [V2] => Err(V2Error::Truncated("no kind byte".into())),
        [v, ..] => Err(V2Error::UnknownVersion(*v)),
        [] => Err(V2Error::Truncated("empty user record".into())),
    }
}

fn decode_event_v2(kind: u8, body: &[u8]) -> Result<EventV2<'_>, V2Error> {
    let (mut entry, mut q, mut ts, mut lane, mut seq, mut sid) =
        (None, None, None, None, None, None);
    let mut allocations: Option<&[u8]> = None;
    fields(body, |field, wt, r| match (field, wt) {
        (1, WT_LEN) if kind == KIND_SINGLE => {
            let e = EntryV2::decode(r.bytes()?)?;
            once(&mut entry, EntryAt::Inline(e), "entry")
        }
        (2, WT_VARINT) if kind == KIND_REF => {
            once(&mut entry, EntryAt::Index(r.varint()?), "entry_index")
        }
        (3, WT_VARINT) => once(&mut q, r.varint()?, "quantity"),
        (4, WT_VARINT) => once(&mut ts, r.varint()? as i64, "timestamp"),
        (5, WT_VARINT) => once(&mut lane, r.varint()?, "lane"),
        (6, WT_VARINT) => once(&mut seq, r.varint()?, "seq"),
        (7, WT_LEN) => once(&mut sid, r.str("eventId")?, "eventId"),
        (8, WT_LEN) => {
            let start = r.at;
            r.bytes()?;
            allocations.get_or_insert(&body[start..]);
            Ok(())
        }
        (f, w) => Err(unexpected("event", f, w)),
    })?;
    let id = match (seq, sid) {
        (Some(seq), None) if seq > 0 => IdV2::Generated {
            lane: u8::try_from(lane.unwrap_or(0))
                .map_err(|_| V2Error::Malformed(format!("lane {lane:?} out of range")))?,
            seq,
        },
        (None, Some(s)) if lane.is_none() => IdV2::Supplied(s),
        _ => {
            return Err(V2Error::Malformed(
                "an event needs exactly one of seq (≥ 1) and eventId".into(),
            ));
        }
    };
    let entry = match (entry, kind) {
        (Some(e), _) => e,
        (None, KIND_REF) => EntryAt::Index(0),
        (None, _) => return Err(V2Error::Malformed("a single without its entry".into())),
    };
    Ok(EventV2 {
        entry,
        quantity: q.unwrap_or(0),
        timestamp_ms: ts.ok_or_else(|| V2Error::Malformed("event without timestamp".into()))?,
        id,
        allocations,
        body,
    })
}

impl EventV2<'_> {
    /// True when the event carries allocations.
    pub fn has_allocations(&self) -> bool {
        self.allocations.is_some()
    }

    /// Its allocations (`None`: it has none).
    pub fn allocations(&self) -> Result<Option<Vec<UsageAllocation>>, V2Error> {
        if self.allocations.is_none() {
            return Ok(None);
        }
        let mut out = Vec::new();
        fields(self.body, |field, wt, r| {
            if (field, wt) != (8, WT_LEN) {
                // Validated by decode_event_v2: skip every other field.
                return match wt {
                    WT_VARINT => r.varint().map(drop),
                    _ => r.bytes().map(drop),
                };
            }
            let (mut q, mut tags) = (None, Vec::new());
            fields(r.bytes()?, |field, wt, r| match (field, wt) {
                (1, WT_VARINT) => once(&mut q, r.varint()?, "AllocatedUsageQuantity"),
                (2, WT_LEN) => {
                    let (mut k, mut v) = (None, None);
                    fields(r.bytes()?, |field, wt, r| match (field, wt) {
                        (1, WT_LEN) => once(&mut k, r.str("Key")?, "Key"),
                        (2, WT_LEN) => once(&mut v, r.str("Value")?, "Value"),
                        (f, w) => Err(unexpected("tag", f, w)),
                    })?;
                    tags.push(Tag::new(k.unwrap_or(""), v.unwrap_or("")));
                    Ok(())
                }
                (f, w) => Err(unexpected("allocation", f, w)),
            })?;
            out.push(UsageAllocation::new(q.unwrap_or(0), tags));
            Ok(())
        })?;
        Ok(Some(out))
    }

    /// The event with its entry, as an owned [`Event`], validated like a v1 payload. `pk` is
    /// the user record's partition key: it names the group when the entry does not.
    pub fn to_event(&self, entry: &EntryV2<'_>, pk: Option<&str>) -> Result<Event, DecodeError> {
        let group = entry
            .group
            .or_else(|| pk.and_then(GroupV2::from_partition_key))
            .ok_or_else(|| {
                V2Error::UnknownGroup(format!(
                    "neither the entry nor the partition key {pk:?} names a group"
                ))
            })?;
        let event_id = match self.id {
            IdV2::Supplied(s) => s.to_owned(),
            IdV2::Generated { lane, seq } => {
                let epoch = entry.epoch.ok_or_else(|| {
                    DecodeError::V2(V2Error::Malformed(
                        "a generated id whose entry has no epoch".into(),
                    ))
                })?;
                GeneratedId { epoch, lane, seq }.to_string()
            }
        };
        let timestamp = DateTime::from_timestamp_millis(self.timestamp_ms).ok_or_else(|| {
            DecodeError::MalformedTimestamp(format!("{} ms is out of range", self.timestamp_ms))
        })?;
        let event = Event {
            event_id,
            license_arn: group.license_arn.to_owned(),
            customer_aws_account_id: group.customer_aws_account_id.to_owned(),
            dimension: group.dimension.to_owned(),
            quantity: self.quantity,
            timestamp: truncate_to_millis(timestamp),
            producer_id: entry.producer_id.map(str::to_owned),
            usage_allocations: self.allocations().map_err(DecodeError::V2)?,
        };
        event.validate(false)?;
        Ok(event)
    }
}

/// Decodes a self-contained payload: a v1 JSON event or a v2 single.
pub fn decode_payload(data: &[u8]) -> Result<Event, DecodeError> {
    if !is_binary(data) {
        return super::decode_event(data);
    }
    match decode_v2(data).map_err(DecodeError::V2)? {
        RecordV2::Event(
            e @ EventV2 {
                entry: EntryAt::Inline(entry),
                ..
            },
        ) => e.to_event(&entry, None),
        RecordV2::Event(_) => Err(DecodeError::V2(V2Error::UnknownGroup(
            "a ref outside an aggregate has no table".into(),
        ))),
        RecordV2::Table(_) => Err(DecodeError::V2(V2Error::Malformed(
            "a table outside an aggregate".into(),
        ))),
    }
}
