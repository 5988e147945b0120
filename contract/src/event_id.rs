//! Generated event ids (docs/row-contract.md, "Event ids"): `p:{epoch}:{lane}:{seq}`.
//!
//! An event recorded without an id gets one of these, inside the v1 `eventId` string (the wire
//! format does not change). The *epoch* is 128 random bits drawn once per `awsmp_producer::Producer`
//! instance (the producer's `IdGenerator`); the *lane* is the top bits of the event's partition hash (so one lane's events map
//! to one shard, or a few when the stream has more shards than lanes); the *seq* counts the
//! lane's ids from 1. The consumer keeps, per (epoch, lane), the sequences it applied — one
//! small item per lane, written once per batch, not once per event — and drops any event whose
//! sequence is already applied, whatever record carries it. Any other id is caller-supplied
//! and gets a per-id claim.
//!
//! ```
//! use awsmp_contract::event_id::GeneratedId;
//! let id = GeneratedId { epoch: 0xabc, lane: 3, seq: 42 };
//! assert_eq!(id.to_string(), "p:00000000000000000000000000000abc:3:42");
//! assert_eq!(GeneratedId::parse(&id.to_string()), Some(id));
//! assert_eq!(GeneratedId::parse("order-17"), None);
//! ```

use std::fmt;

/// Prefix of generated ids; callers should not supply ids of this form (docs/row-contract.md).
pub const GENERATED_ID_PREFIX: &str = "p:";
/// Sequence lanes per producer instance: the top 4 bits of the partition hash.
pub const ID_LANES: u8 = 16;
/// Hex digits of the epoch (128 bits).
const EPOCH_HEX_DIGITS: usize = 32;

/// A parsed generated id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GeneratedId {
    /// The producer instance's epoch (random, drawn at start).
    pub epoch: u128,
    /// The lane (`0..ID_LANES`).
    pub lane: u8,
    /// The lane's sequence number (from 1).
    pub seq: u64,
}

impl GeneratedId {
    /// Parse the exact form [`GeneratedId`]'s `Display` writes; anything else is `None`
    /// (a caller-supplied id).
    ///
    /// One pass over the bytes at the form's fixed offsets: the 32 lowercase hex digits of
    /// the epoch, then the lane and the sequence in canonical decimal (no sign, no leading
    /// zero). The consumer reads every v1 event's id through it. The property test
    /// `tests::the_one_pass_reader_is_the_split_reader` compares it with the reading by
    /// `split` and `from_str_radix` it replaced.
    pub fn parse(id: &str) -> Option<Self> {
        let rest = id.as_bytes().strip_prefix(GENERATED_ID_PREFIX.as_bytes())?;
        let (hex, rest) = rest.split_first_chunk::<EPOCH_HEX_DIGITS>()?;
        let mut epoch = 0u128;
        for &b in hex {
            let digit = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                _ => return None,
            };
            epoch = epoch << 4 | u128::from(digit);
        }
        let rest = rest.strip_prefix(b":")?;
        let colon = rest.iter().position(|&b| b == b':')?;
        let parsed = Self {
            epoch,
            lane: u8::try_from(canonical_decimal(&rest[..colon])?).ok()?,
            seq: canonical_decimal(&rest[colon + 1..])?,
        };
        (parsed.lane < ID_LANES && parsed.seq > 0).then_some(parsed)
    }

    /// The key of this id's lane: `{epoch}:{lane}`.
    pub fn lane_key(&self) -> String {
        format!("{:032x}:{}", self.epoch, self.lane)
    }
}

/// A decimal without sign or leading zeros (so an id has exactly one spelling; JSON spells an
/// integer so too) that fits a `u64`.
pub fn canonical_decimal(s: &[u8]) -> Option<u64> {
    match s {
        [] | [b'0', _, ..] => None,
        _ => s.iter().try_fold(0u64, |n, &b| {
            let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
            n.checked_mul(10)?.checked_add(u64::from(digit))
        }),
    }
}

impl fmt::Display for GeneratedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{GENERATED_ID_PREFIX}{:032x}:{}:{}",
            self.epoch, self.lane, self.seq
        )
    }
}

/// The lane of an event with partition hash `hash`.
#[inline]
pub fn lane_of(hash: u128) -> u8 {
    // ID_LANES = 16: the top 4 bits.
    (hash >> 124) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_form_is_generated() {
        let e = "0".repeat(32);
        for bad in [
            "order-17".to_owned(),
            format!("p:{e}:1"),
            format!("p:{e}:16:1"),
            format!("p:{e}:01:1"),
            format!("p:{e}:1:0"),
            format!("p:{e}:1:01"),
            format!("p:{e}:1:1:1"),
            format!("p:{}:1:1", "A".repeat(32)),
            format!("p:{}:1:1", "0".repeat(31)),
        ] {
            assert_eq!(GeneratedId::parse(&bad), None, "{bad}");
        }
        assert!(GeneratedId::parse(&format!("p:{e}:15:18446744073709551615")).is_some());
        assert_eq!(
            GeneratedId::parse(&format!("p:{e}:15:18446744073709551616")),
            None
        );
    }

    /// The reading [`GeneratedId::parse`] had before its one-pass reader: split at `:`,
    /// the epoch by `from_str_radix`, the numbers by `str::parse`.
    fn split_reader(id: &str) -> Option<GeneratedId> {
        let decimal = |s: &str| {
            let ok = !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && (s == "0" || !s.starts_with('0'));
            ok.then(|| s.parse::<u64>().ok()).flatten()
        };
        let rest = id.strip_prefix(GENERATED_ID_PREFIX)?;
        let mut parts = rest.split(':');
        let (epoch, lane, seq) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some()
            || epoch.len() != EPOCH_HEX_DIGITS
            || !epoch
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return None;
        }
        let parsed = GeneratedId {
            epoch: u128::from_str_radix(epoch, 16).ok()?,
            lane: decimal(lane)?.try_into().ok()?,
            seq: decimal(seq)?,
        };
        (parsed.lane < ID_LANES && parsed.seq > 0).then_some(parsed)
    }

    proptest::proptest! {
        /// The one-pass reader reads what the split reader reads: on every generated id,
        /// on ids with one byte changed, cut or added anywhere, with an epoch of any
        /// spelling, numbers of any size and spelling, and on any string.
        #[test]
        fn the_one_pass_reader_is_the_split_reader(
            epoch in proptest::prelude::any::<u128>(),
            lane in "0|[1-9][0-9]{0,3}|0[0-9]{1,2}|\\+1",
            seq in "0|[1-9][0-9]{0,21}|0[0-9]{1,3}|-1",
            poke in proptest::option::of((0usize..80, 0u8..128)),
            cut in proptest::option::of(0usize..80),
            extra in proptest::option::of((0usize..80, "[:0-9a-fA-F]")),
            spelled in "[0-9a-fA-F]{32}|[0-9a-fg:]{30,34}",
            any in ".{0,70}",
        ) {
            let id = format!("p:{epoch:032x}:{lane}:{seq}");
            let other_epoch = format!("p:{spelled}:{lane}:{seq}");
            let mut bytes = id.clone().into_bytes();
            if let Some((at, b)) = poke && at < bytes.len() {
                bytes[at] = b;
            }
            if let Some(at) = cut && at < bytes.len() {
                bytes.remove(at);
            }
            if let Some((at, s)) = &extra && *at <= bytes.len() {
                bytes.splice(*at..*at, s.bytes());
            }
            let changed = String::from_utf8(bytes).unwrap();
            for s in [&id, &changed, &other_epoch, &any, &format!("p:{any}")] {
                proptest::prop_assert_eq!(GeneratedId::parse(s), split_reader(s), "{}", s);
            }
        }
    }
}
