//! The straight-line reader of an aggregate's refs as the producer writes them: the consumer's
//! hot path reads most v2 user records through it (docs/wire-format.md).

use super::{EntryAt, EventV2, IdV2, KIND_REF, V2, WT_VARINT};

/// A ref (kind `0x02`) with a generated id and no allocations, its fields in the order the
/// producer writes them (entry index, quantity, timestamp, lane, sequence; each at most once,
/// an absent entry index, quantity or lane being protobuf's default 0), read as straight-line
/// code: one comparison of each key with the field expected next, where [`decode_v2`] matches
/// every key against every field. `None` for any other record, which `decode_v2` reads or
/// refuses; where it answers, it answers what `decode_v2` does (the property test
/// `the_in_order_reader_answers_as_decode_v2` in `producer/tests/wire_v2.rs`).
pub fn decode_ref_in_order(data: &[u8]) -> Option<EventV2<'_>> {
    let [V2, KIND_REF, body @ ..] = data else {
        return None;
    };
    let mut buf = body;
    let mut key = Some(in_order_varint(&mut buf)?);
    let entry = in_order_field(&mut buf, &mut key, 2)?.unwrap_or(0);
    let quantity = in_order_field(&mut buf, &mut key, 3)?.unwrap_or(0);
    let timestamp = in_order_field(&mut buf, &mut key, 4)??;
    let lane = in_order_field(&mut buf, &mut key, 5)?.unwrap_or(0);
    let seq = in_order_field(&mut buf, &mut key, 6)??;
    // Anything after the sequence (an id string, allocations, a field out of order) is
    // `decode_v2`'s to read.
    if key.is_some() || seq == 0 {
        return None;
    }
    Some(EventV2 {
        entry: EntryAt::Index(entry),
        quantity,
        timestamp_ms: timestamp as i64,
        id: IdV2::Generated {
            lane: u8::try_from(lane).ok()?,
            seq,
        },
        allocations: None,
        body,
    })
}

/// A varint of `buf` as `Reader::varint` reads it (`prost`'s unrolled reader past one byte);
/// `None` for a varint `Reader::varint` refuses.
#[inline(always)]
fn in_order_varint(buf: &mut &[u8]) -> Option<u64> {
    match buf.split_first() {
        Some((&b, rest)) if b < 0x80 => {
            *buf = rest;
            Some(u64::from(b))
        }
        _ => prost::encoding::decode_varint(buf).ok(),
    }
}

/// For [`decode_ref_in_order`]: varint field `field`'s value when `key` is its key (then the
/// next key, or `None` at the end, read into `key`); `Some(None)` when it is not; `None` for
/// a varint that does not read.
#[inline(always)]
fn in_order_field(buf: &mut &[u8], key: &mut Option<u64>, field: u8) -> Option<Option<u64>> {
    if *key != Some(u64::from(field << 3 | WT_VARINT)) {
        return Some(None);
    }
    let v = in_order_varint(buf)?;
    *key = if buf.is_empty() {
        None
    } else {
        Some(in_order_varint(buf)?)
    };
    Some(Some(v))
}
