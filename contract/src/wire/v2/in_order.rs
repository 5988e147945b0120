//! The straight-line reader of an aggregate's refs as the producer writes them: the consumer's
//! hot path reads most v2 user records through it (docs/wire-format.md).

use super::{EntryAt, EventV2, IdV2, KIND_REF, V2, WT_VARINT};

/// A ref as [`decode_ref_in_order`] reads it: its numbers, nothing borrowed (what the consumer's
/// hot path copies per event is these 40 bytes, not an [`EventV2`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefV2 {
    /// Index of its entry in the aggregate's table.
    pub entry_index: u64,
    /// Quantity.
    pub quantity: u64,
    /// Client time, epoch milliseconds.
    pub timestamp_ms: i64,
    /// Lane of its generated id.
    pub lane: u8,
    /// Sequence of its generated id (≥ 1).
    pub seq: u64,
}

impl RefV2 {
    /// The event as [`decode_v2`](super::decode_v2) reads it from `data`, the record this ref
    /// was read from.
    pub fn to_event(self, data: &[u8]) -> EventV2<'_> {
        EventV2 {
            entry: EntryAt::Index(self.entry_index),
            quantity: self.quantity,
            timestamp_ms: self.timestamp_ms,
            id: IdV2::Generated {
                lane: self.lane,
                seq: self.seq,
            },
            allocations: None,
            body: data.get(super::HEADER_LEN..).unwrap_or_default(),
        }
    }
}

/// A ref (kind `0x02`) with a generated id and no allocations, its fields in the order the
/// producer writes them (entry index, quantity, timestamp, lane, sequence; each at most once,
/// an absent entry index, quantity or lane being protobuf's default 0), read as straight-line
/// code: one comparison of each key with the field expected next, where [`decode_v2`](super::decode_v2) matches
/// every key against every field. `None` for any other record, which `decode_v2` reads or
/// refuses; where it answers, it answers what `decode_v2` does — a fast path
/// (docs/producer-internals.md, "The fast-path rule") ([`RefV2::to_event`]; the property test
/// `the_in_order_reader_answers_as_decode_v2` in `producer/tests/integration/wire_v2.rs`).
pub fn decode_ref_in_order(data: &[u8]) -> Option<RefV2> {
    let [V2, KIND_REF, body @ ..] = data else {
        return None;
    };
    let mut buf: &[u8] = body;
    let entry = in_order_field(&mut buf, 2)?.unwrap_or(0);
    let quantity = in_order_field(&mut buf, 3)?.unwrap_or(0);
    let timestamp = in_order_field(&mut buf, 4)??;
    let lane = in_order_field(&mut buf, 5)?.unwrap_or(0);
    let seq = in_order_field(&mut buf, 6)??;
    // Anything after the sequence (an id string, allocations, a field out of order, a key
    // spelled in more than one byte) is `decode_v2`'s to read.
    if !buf.is_empty() || seq == 0 {
        return None;
    }
    Some(RefV2 {
        entry_index: entry,
        quantity,
        timestamp_ms: timestamp as i64,
        lane: u8::try_from(lane).ok()?,
        seq,
    })
}

/// For [`decode_ref_in_order`]: varint field `field`'s value when `buf` starts with its key
/// (one byte, as the producer writes every key); `Some(None)` when it does not; `None` for a
/// value that does not read.
#[inline(always)]
fn in_order_field(buf: &mut &[u8], field: u8) -> Option<Option<u64>> {
    match buf.split_first() {
        Some((&key, rest)) if key == field << 3 | WT_VARINT => {
            *buf = rest;
            in_order_varint(buf).map(Some)
        }
        _ => Some(None),
    }
}

/// A varint of `buf` as `Reader::varint` reads it; `None` for a varint it refuses. One byte is
/// read inline; a varint of up to 8 bytes (up to 2^56, a timestamp or a sequence) from one
/// 64-bit load, its 7-bit groups gathered in three steps, or byte by byte from a buffer of
/// fewer than 8 bytes (the last field of a record); a longer one by `prost`'s reader.
/// `tests::the_word_reader_is_prosts` compares them.
#[inline(always)]
fn in_order_varint(buf: &mut &[u8]) -> Option<u64> {
    match buf.split_first() {
        Some((&b, rest)) if b < 0x80 => {
            *buf = rest;
            Some(u64::from(b))
        }
        _ if buf.len() < 8 => short_varint(buf),
        _ => match word_varint(buf) {
            Some(v) => Some(v),
            None => prost::encoding::decode_varint(buf).ok(),
        },
    }
}

/// A varint of a buffer of fewer than 8 bytes, byte by byte (so it cannot overflow); `None`
/// when it runs past the end.
#[inline(always)]
fn short_varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

/// A varint of at most 8 bytes at the start of `buf` (which holds 8 or more), read from one
/// load; `None` (and `buf` untouched) for any other.
#[inline(always)]
fn word_varint(buf: &mut &[u8]) -> Option<u64> {
    let word = u64::from_le_bytes(*buf.first_chunk::<8>()?);
    // The last byte of a varint is the first without its high bit.
    let ends = !word & 0x8080_8080_8080_8080;
    if ends == 0 {
        return None;
    }
    let len = ends.trailing_zeros() as usize / 8 + 1;
    let mut v = word & 0x7f7f_7f7f_7f7f_7f7f & (u64::MAX >> (64 - 8 * len));
    v = (v & 0x007f_007f_007f_007f) | ((v & 0x7f00_7f00_7f00_7f00) >> 1);
    v = (v & 0x0000_3fff_0000_3fff) | ((v & 0x3fff_0000_3fff_0000) >> 2);
    v = (v & 0x0000_0000_0fff_ffff) | ((v & 0x0fff_ffff_0000_0000) >> 4);
    *buf = &buf[len..];
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// On any bytes (varints of every length, canonical or not, cut short or overlong),
        /// the reader takes what `prost` takes and leaves what it leaves.
        #[test]
        fn the_word_reader_is_prosts(
            v in any::<u64>(),
            shift in 0u32..64,
            pad in prop::collection::vec(any::<u8>(), 0..12),
            raw in prop::collection::vec(any::<u8>(), 0..14),
        ) {
            let mut encoded = Vec::new();
            prost::encoding::encode_varint(v >> shift, &mut encoded);
            encoded.extend_from_slice(&pad);
            for bytes in [&encoded[..], &raw[..]] {
                let (mut ours, mut theirs) = (bytes, bytes);
                let expected = prost::encoding::decode_varint(&mut theirs).ok();
                prop_assert_eq!(in_order_varint(&mut ours), expected, "{:02x?}", bytes);
                if expected.is_some() {
                    prop_assert_eq!(ours.len(), theirs.len());
                }
            }
        }
    }
}
