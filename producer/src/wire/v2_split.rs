//! Sizing a v2 single without encoding it (and writing it into a caller's buffer), and
//! splitting one into its table entry and event fields without decoding it: the producer's
//! packing path (docs/wire-format.md).

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use prost::encoding::encoded_len_varint;

use super::{HEADER_LEN, KIND_SINGLE, Reader, V2, WT_LEN, bytes_field_len, entry_len};
use crate::event::Event;
use crate::event_id::GeneratedId;

/// The length of [`encode_single_bytes`]`(event, generated)` without encoding: what the
/// producer charges a collapsed event for before the window's sums are encoded.
pub fn single_len(event: &Event, generated: Option<GeneratedId>) -> usize {
    single_len_as(event, event.producer_id.as_deref(), generated)
}

/// The length of [`encode_single_into`]`(out, event, producer_id, generated)`.
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
pub fn encode_single_into(
    out: &mut BytesMut,
    event: &Event,
    producer_id: Option<&str>,
    generated: Option<GeneratedId>,
) {
    super::write_single(out, event, producer_id, resolve_id(event, generated));
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
    for a in event.usage_allocations.iter().flatten() {
        let mut m = 0;
        if a.allocated_usage_quantity != 0 {
            m += varint(a.allocated_usage_quantity);
        }
        for t in &a.tags {
            m += bytes_field_len(bytes_field_len(t.key.len()) + bytes_field_len(t.value.len()));
        }
        fields += bytes_field_len(m);
    }
    HEADER_LEN + bytes_field_len(entry_len(event, producer_id, id.map(|g| g.epoch))) + fields
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
