//! Writing a v2 single (the entry and event fields), sizing one without encoding it, and
//! splitting one into its table entry and event fields without decoding it: the producer's
//! packing path (docs/wire-format.md).

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use prost::encoding::encoded_len_varint;

use bytes::BufMut;
use prost::encoding::encode_varint;

use super::{
    HEADER_LEN, KIND_SINGLE, Reader, V2, WT_LEN, WT_VARINT, bytes_field_len, key, put_bytes,
    put_varint,
};
use crate::event::{Event, GroupRef, Tag, UsageAllocation};
use crate::event_id::GeneratedId;

/// The length of [`super::encode_single_bytes`]`(event, generated)` without encoding: what the
/// producer charges a collapsed event for before the window's sums are encoded.
pub fn single_len(event: &Event, generated: Option<GeneratedId>) -> usize {
    single_len_as(event, event.producer_id.as_deref(), generated)
}

/// The length of [`encode_single_into`]`(out, event, producer_id, generated)`.
#[inline]
pub fn single_len_as(
    event: &Event,
    producer_id: Option<&str>,
    generated: Option<GeneratedId>,
) -> usize {
    resolved_single_len(event, producer_id, resolve_id(event, generated))
}

/// The id written as generated: `generated`, else the event's id when it is of the exact
/// generated form (docs/row-contract.md, "Event ids": the one that reads back to the same
/// string).
pub(super) fn resolve_id(event: &Event, generated: Option<GeneratedId>) -> Option<GeneratedId> {
    generated
        .or_else(|| GeneratedId::parse(&event.event_id).filter(|g| g.to_string() == event.event_id))
}

/// [`super::encode_single_bytes`] appended to `out` (exactly [`single_len_as`] bytes), with
/// `producer_id` written as the event's (the producer's default for an event without one,
/// borrowed instead of copied into the event).
#[inline]
pub fn encode_single_into(
    out: &mut BytesMut,
    event: &Event,
    producer_id: Option<&str>,
    generated: Option<GeneratedId>,
) {
    write_single(out, event, producer_id, resolve_id(event, generated));
}

/// [`single_len`] with the id already resolved: `Some` exactly when it is written as a
/// generated id.
pub(super) fn resolved_single_len(
    event: &Event,
    producer_id: Option<&str>,
    id: Option<GeneratedId>,
) -> usize {
    let varint = |v: u64| 1 + encoded_len_varint(v);
    let mut fields = varint(event.timestamp.timestamp_millis() as u64);
    if event.quantity != 0 {
        fields += varint(event.quantity);
    }
    fields += match id {
        Some(g) => {
            (if g.lane != 0 {
                varint(u64::from(g.lane))
            } else {
                0
            }) + varint(g.seq)
        }
        None => bytes_field_len(event.event_id.len()),
    };
    fields += allocations_len(event.usage_allocations.as_deref());
    HEADER_LEN
        + bytes_field_len(entry_len(event.group(), producer_id, id.map(|g| g.epoch)))
        + fields
}

/// The bytes every v2 single of `group` starts with when written with `producer_id` and a
/// generated id of `epoch` (its header and entry): what a bound group handle
/// ([`crate::Meter`]) encodes once, then [`put_generated_single`] writes per event.
pub fn single_head(group: GroupRef<'_>, producer_id: Option<&str>, epoch: u128) -> Box<[u8]> {
    let mut out =
        BytesMut::with_capacity(HEADER_LEN + 2 + entry_len(group, producer_id, Some(epoch)));
    put_head(&mut out, group, producer_id, Some(epoch));
    out.to_vec().into_boxed_slice()
}

/// The length of [`put_generated_single`]`(out, head, quantity, millis, id)`.
pub fn generated_single_len(head: &[u8], quantity: u64, millis: i64, id: GeneratedId) -> usize {
    let varint = |v: u64| 1 + encoded_len_varint(v);
    let quantity = if quantity == 0 { 0 } else { varint(quantity) };
    let lane = if id.lane == 0 {
        0
    } else {
        varint(u64::from(id.lane))
    };
    head.len() + quantity + varint(millis as u64) + lane + varint(id.seq)
}

/// [`put_generated_single`] followed by the event's `allocations` (if any): the bytes
/// [`encode_single_into`] writes for an event with generated id `id` whose head is `head`.
/// A fast path (docs/producer-internals.md, "The fast-path rule"); equivalence test, through the producer:
/// `producer::plain_tests::a_plain_event_is_staged_as_the_checked_path_stages_it`.
#[inline]
pub fn put_single_from_head(
    out: &mut BytesMut,
    head: &[u8],
    quantity: u64,
    millis: i64,
    id: GeneratedId,
    allocations: Option<&[UsageAllocation]>,
) {
    put_generated_single(out, head, quantity, millis, id);
    put_allocations(out, allocations);
}

/// Appends the single of an event without allocations, with generated id `id`, whose head
/// ([`single_head`]) is `head`: the bytes [`encode_single_into`] writes for that event.
/// A fast path (docs/producer-internals.md, "The fast-path rule"); equivalence test:
/// `wire::v2::split::tests::a_single_from_its_head_is_the_single_of_its_event` (and, in
/// debug builds, every sum written so is also laid out the long way and compared,
/// `engine::window`). Inline: the producer writes every event of a meter (no collapse) with it,
/// from another crate.
#[inline]
pub fn put_generated_single(
    out: &mut BytesMut,
    head: &[u8],
    quantity: u64,
    millis: i64,
    id: GeneratedId,
) {
    out.extend_from_slice(head);
    put_generated_fields(out, quantity, millis, id);
}

/// A v2 single of an event laid out for packing, before it is written: the id written for it,
/// its length and where it splits for an aggregate under partition key `pk` — `split` is
/// `(entry, fields)`, offsets from the single's first byte, such that
/// [`split_single_ranges`]`(single, pk)` is `(entry..fields, fields..single.len())`. The split
/// comes from the lengths the writer knows, so packing need not read the single back (the
/// window's close encodes every sum this way); the id is resolved once for both.
pub struct SplitSingle {
    id: Option<GeneratedId>,
    /// Bytes [`SplitSingle::write`] appends.
    pub len: usize,
    /// Where the written bytes split: the [`split_single_ranges`] boundaries.
    pub split: (u32, u32),
}

impl SplitSingle {
    /// The layout of [`encode_single_into`]`(out, event, producer_id, generated)` under `pk`.
    pub fn of(
        event: &Event,
        producer_id: Option<&str>,
        generated: Option<GeneratedId>,
        pk: &str,
    ) -> Self {
        let id = resolve_id(event, generated);
        let group = event.group();
        let entry = entry_len(group, producer_id, id.map(|g| g.epoch));
        let entry_field = HEADER_LEN + 1 + encoded_len_varint(entry as u64);
        let fields = entry_field + entry;
        let names = [
            group.license_arn.as_bytes(),
            group.customer_aws_account_id.as_bytes(),
            group.dimension.as_bytes(),
        ];
        // The table entry leaves the group out when the key names it (as the reader decides).
        let group_len: usize = names.iter().map(|n| bytes_field_len(n.len())).sum();
        let entry_start = if names_group(pk.as_bytes(), names) {
            entry_field + group_len
        } else {
            entry_field
        };
        SplitSingle {
            id,
            len: resolved_single_len(event, producer_id, id),
            split: (entry_start as u32, fields as u32),
        }
    }

    /// Appends the single: [`encode_single_into`]'s bytes, exactly `len` of them.
    pub fn write(&self, out: &mut BytesMut, event: &Event, producer_id: Option<&str>) {
        write_single(out, event, producer_id, self.id);
    }
}

/// A v2 single split for an aggregate: its table entry and its event fields, both slices of
/// `single`. The entry leaves the group out when `pk` (the user record's partition key) names
/// it as `licenseArn|customerAWSAccountId|dimension`. `None` when `single` is not a single this
/// module wrote.
pub fn split_single(single: &Bytes, pk: &str) -> Option<(Bytes, Bytes)> {
    let (entry, fields) = split_single_ranges(single, pk)?;
    Some((single.slice(entry), single.slice(fields)))
}

/// [`split_single`] as byte ranges of `single` (no reference counting, no copy).
pub fn split_single_ranges(single: &[u8], pk: &str) -> Option<(Range<usize>, Range<usize>)> {
    let rest = single.get(HEADER_LEN..)?;
    if single[..HEADER_LEN] != [V2, KIND_SINGLE] || rest.first() != Some(&(1 << 3 | WT_LEN)) {
        return None;
    }
    let mut r = Reader::new(&rest[1..]);
    let len = usize::try_from(r.varint().ok()?).ok()?;
    let start = HEADER_LEN + 1 + r.at;
    let end = start.checked_add(len).filter(|e| *e <= single.len())?;
    let entry = &single[start..end];
    // Fields 1–3 (the group) come first, as encode_single writes them.
    let mut er = Reader::new(entry);
    let mut group: [&[u8]; 3] = [&[]; 3];
    for slot in &mut group {
        let (_, wt) = er.key().ok()?;
        if wt != WT_LEN {
            return None;
        }
        *slot = er.bytes().ok()?;
    }
    let named = names_group(pk.as_bytes(), group);
    // A key that names the group proves it UTF-8 (slices of a str at `|`); otherwise check.
    if !named && group.iter().any(|g| std::str::from_utf8(g).is_err()) {
        return None;
    }
    let entry_start = if named { start + er.at } else { start };
    Some((entry_start..end, end..single.len()))
}

/// Whether `pk` is `license|account|dimension` of `group`, split as
/// [`super::GroupV2::from_partition_key`] splits it (at the first two `|`).
fn names_group(pk: &[u8], [license, account, dimension]: [&[u8]; 3]) -> bool {
    pk.len() == license.len() + account.len() + dimension.len() + 2
        && !license.contains(&b'|')
        && !account.contains(&b'|')
        && pk.starts_with(license)
        && pk[license.len()] == b'|'
        && pk[license.len() + 1..].starts_with(account)
        && pk[license.len() + 1 + account.len()] == b'|'
        && pk.ends_with(dimension)
}

/// Bytes of an event's entry (what [`put_entry`] writes inside its field).
/// `producer_id` is the one written: the event's, or the producer's default for an event
/// without one.
fn entry_len(group: GroupRef<'_>, producer_id: Option<&str>, epoch: Option<u128>) -> usize {
    bytes_field_len(group.license_arn.len())
        + bytes_field_len(group.customer_aws_account_id.len())
        + bytes_field_len(group.dimension.len())
        + producer_id.map_or(0, |p| bytes_field_len(p.len()))
        + epoch.map_or(0, |_| bytes_field_len(16))
}

/// Writes the entry's fields (the group, the producer id, the epoch of a generated id).
fn put_entry(
    e: &mut BytesMut,
    group: GroupRef<'_>,
    producer_id: Option<&str>,
    epoch: Option<u128>,
) {
    put_bytes(e, 1, group.license_arn.as_bytes());
    put_bytes(e, 2, group.customer_aws_account_id.as_bytes());
    put_bytes(e, 3, group.dimension.as_bytes());
    if let Some(p) = producer_id {
        put_bytes(e, 4, p.as_bytes());
    }
    if let Some(epoch) = epoch {
        put_bytes(e, 5, &epoch.to_be_bytes());
    }
}

/// The event fields of an event with a generated id, before any allocation: quantity,
/// timestamp (epoch milliseconds), lane, sequence. Shared by [`write_single`] and the bound
/// group handle's payload (`split::put_head`), so both write the same bytes.
#[inline]
fn put_generated_fields(out: &mut BytesMut, quantity: u64, millis: i64, id: GeneratedId) {
    let mut fields = VarintFields::default();
    if quantity != 0 {
        fields.put(3, quantity);
    }
    // Two's complement for a (never validated) negative instant, as protobuf int64 does.
    fields.put(4, millis as u64);
    if id.lane != 0 {
        fields.put(5, u64::from(id.lane));
    }
    fields.put(6, id.seq);
    out.extend_from_slice(&fields.buf[..fields.len]);
}

/// Up to four varint fields (of numbers below 16) written on the stack, for one append: what
/// `put_varint` writes for each, without a capacity check per byte.
struct VarintFields {
    buf: [u8; 4 * (1 + MAX_VARINT_LEN)],
    len: usize,
}

/// Bytes of the longest varint (a `u64`).
const MAX_VARINT_LEN: usize = 10;

impl Default for VarintFields {
    fn default() -> Self {
        Self {
            buf: [0; 4 * (1 + MAX_VARINT_LEN)],
            len: 0,
        }
    }
}

impl VarintFields {
    /// Field `field` (< 16) of varint `v`; at most four per value.
    #[inline]
    fn put(&mut self, field: u8, mut v: u64) {
        debug_assert!(field < 16 && self.len + 1 + MAX_VARINT_LEN <= self.buf.len());
        self.buf[self.len] = field << 3 | WT_VARINT;
        self.len += 1;
        while v >= 0x80 {
            self.buf[self.len] = v as u8 | 0x80;
            v >>= 7;
            self.len += 1;
        }
        self.buf[self.len] = v as u8;
        self.len += 1;
    }
}

fn event_fields(out: &mut BytesMut, event: &Event, id: Option<GeneratedId>) {
    let millis = event.timestamp.timestamp_millis();
    match id {
        Some(id) => put_generated_fields(out, event.quantity, millis, id),
        None => {
            if event.quantity != 0 {
                put_varint(out, 3, event.quantity);
            }
            put_varint(out, 4, millis as u64);
            put_bytes(out, 7, event.event_id.as_bytes());
        }
    }
    put_allocations(out, event.usage_allocations.as_deref());
}

/// Bytes of an event's allocation fields (field 8, one per allocation: its quantity, field
/// 1, and its tags, field 2, each a key, field 1, and a value, field 2).
pub fn allocations_len(allocations: Option<&[UsageAllocation]>) -> usize {
    allocations
        .into_iter()
        .flatten()
        .map(|a| bytes_field_len(allocation_len(a)))
        .sum()
}

/// Bytes of one allocation's message (without its field's key and length).
fn allocation_len(a: &UsageAllocation) -> usize {
    let quantity = if a.allocated_usage_quantity == 0 {
        0
    } else {
        1 + encoded_len_varint(a.allocated_usage_quantity)
    };
    quantity
        + a.tags
            .iter()
            .map(|t| bytes_field_len(tag_len(t)))
            .sum::<usize>()
}

/// Bytes of one tag's message.
fn tag_len(t: &Tag) -> usize {
    bytes_field_len(t.key.len()) + bytes_field_len(t.value.len())
}

/// Appends an event's allocation fields ([`allocations_len`] bytes), each message written
/// in place after its length (sized first, not built apart and copied).
fn put_allocations(out: &mut BytesMut, allocations: Option<&[UsageAllocation]>) {
    for a in allocations.into_iter().flatten() {
        key(out, 8, WT_LEN);
        encode_varint(allocation_len(a) as u64, out);
        if a.allocated_usage_quantity != 0 {
            put_varint(out, 1, a.allocated_usage_quantity);
        }
        for t in &a.tags {
            key(out, 2, WT_LEN);
            encode_varint(tag_len(t) as u64, out);
            put_bytes(out, 1, t.key.as_bytes());
            put_bytes(out, 2, t.value.as_bytes());
        }
    }
}

/// Appends the single of `event` (id resolved, `producer_id` the one written) to `out`.
pub(super) fn write_single(
    out: &mut BytesMut,
    event: &Event,
    producer_id: Option<&str>,
    id: Option<GeneratedId>,
) {
    put_head(out, event.group(), producer_id, id.map(|g| g.epoch));
    event_fields(out, event, id);
}

/// A single's bytes before its event fields: the header and the entry field.
fn put_head(
    out: &mut BytesMut,
    group: GroupRef<'_>,
    producer_id: Option<&str>,
    epoch: Option<u128>,
) {
    let entry = entry_len(group, producer_id, epoch);
    out.put_slice(&[V2, KIND_SINGLE]);
    key(out, 1, WT_LEN);
    encode_varint(entry as u64, out);
    put_entry(out, group, producer_id, epoch);
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use proptest::prelude::*;

    proptest! {
        /// A single written from its group's head is the single `encode_single_into` writes
        /// for the same event (no allocations, generated id), at the length sized for it.
        #[test]
        fn a_single_from_its_head_is_the_single_of_its_event(
            license in "[a-z:/0-9-]{0,90}",
            account in "[0-9]{0,14}",
            dimension in "[a-z-]{0,20}",
            producer_id in prop::option::of("[a-z0-9-]{0,12}"),
            quantity in prop_oneof![Just(0u64), any::<u64>()],
            millis in -1_000_000_000_000i64..260_000_000_000_000,
            (epoch, lane, seq) in (any::<u128>(), 0u8..64, any::<u64>()),
        ) {
            let t = DateTime::from_timestamp_millis(millis).unwrap();
            let event = Event::new(&license, &account, &dimension, quantity, t);
            let id = GeneratedId { epoch, lane, seq };
            let mut want = BytesMut::new();
            encode_single_into(&mut want, &event, producer_id.as_deref(), Some(id));
            let head = single_head(event.group(), producer_id.as_deref(), epoch);
            let mut got = BytesMut::new();
            put_generated_single(&mut got, &head, quantity, millis, id);
            prop_assert_eq!(&got[..], &want[..]);
            prop_assert_eq!(generated_single_len(&head, quantity, millis, id), want.len());
        }

        /// The split `SplitSingle` gives from its lengths is the one
        /// `split_single_ranges` reads from the bytes, and the bytes are `encode_single_into`'s:
        /// keys that name the group and keys that do not (`|` in its fields included), any
        /// producer id, generated ids and ids of their own, written after other bytes.
        #[test]
        fn a_written_single_splits_where_its_writer_says(
            license in "[a-z:/0-9|-]{0,90}",
            account in "[0-9|]{0,14}",
            dimension in "[a-z|-]{0,20}",
            producer_id in prop::option::of("[a-z0-9-]{0,12}"),
            quantity in prop_oneof![Just(0u64), any::<u64>()],
            millis in -1_000_000_000_000i64..260_000_000_000_000,
            id in prop_oneof![
                (any::<u128>(), 0u8..64, any::<u64>())
                    .prop_map(|(epoch, lane, seq)| Some(GeneratedId { epoch, lane, seq })),
                Just(None),
            ],
            own_id in "[a-f0-9-]{1,36}",
            key_names_group in any::<bool>(),
            before in 0usize..40,
        ) {
            let t = DateTime::from_timestamp_millis(millis).unwrap();
            let mut event = Event::new(&license, &account, &dimension, quantity, t);
            if id.is_none() {
                event.event_id = own_id;
            }
            let pk = if key_names_group {
                format!("{license}|{account}|{dimension}")
            } else {
                "another-key".to_owned()
            };
            let mut want = BytesMut::new();
            encode_single_into(&mut want, &event, producer_id.as_deref(), id);
            let mut out = BytesMut::from(&vec![7u8; before][..]);
            let laid = SplitSingle::of(&event, producer_id.as_deref(), id, &pk);
            laid.write(&mut out, &event, producer_id.as_deref());
            let (entry, fields) = laid.split;
            let single = &out[before..];
            prop_assert_eq!(single, &want[..]);
            prop_assert_eq!(laid.len, want.len());
            let (entry, fields) = (entry as usize, fields as usize);
            prop_assert_eq!(
                split_single_ranges(single, &pk),
                Some((entry..fields, fields..single.len()))
            );
        }

        /// The stack-written fields are what `prost`'s varint writer writes, field by field.
        #[test]
        fn generated_fields_are_protobuf_varints(
            quantity in prop_oneof![Just(0u64), any::<u64>()],
            millis in any::<i64>(),
            (epoch, lane, seq) in (any::<u128>(), any::<u8>(), any::<u64>()),
        ) {
            let mut want = BytesMut::new();
            if quantity != 0 {
                put_varint(&mut want, 3, quantity);
            }
            put_varint(&mut want, 4, millis as u64);
            if lane != 0 {
                put_varint(&mut want, 5, u64::from(lane));
            }
            put_varint(&mut want, 6, seq);
            let mut got = BytesMut::new();
            put_generated_fields(&mut got, quantity, millis, GeneratedId { epoch, lane, seq });
            prop_assert_eq!(&got[..], &want[..]);
        }
    }
}
