//! Generated event ids (docs/row-contract.md, "Event ids"): `p:{epoch}:{lane}:{seq}`.
//!
//! An event recorded without an id gets one of these, inside the v1 `eventId` string (the wire
//! format does not change). The *epoch* is 128 random bits drawn once per [`crate::Producer`]
//! instance; the *lane* is the top bits of the event's partition hash (so one lane's events map
//! to one shard, or a few when the stream has more shards than lanes); the *seq* counts the
//! lane's ids from 1. The consumer keeps, per (epoch, lane), the sequences it applied — one
//! small item per lane, written once per batch, not once per event — and drops any event whose
//! sequence is already applied, whatever record carries it. Any other id is caller-supplied
//! and gets a per-id claim.
//!
//! ```
//! use awsmp_producer::event_id::GeneratedId;
//! let id = GeneratedId { epoch: 0xabc, lane: 3, seq: 42 };
//! assert_eq!(id.to_string(), "p:00000000000000000000000000000abc:3:42");
//! assert_eq!(GeneratedId::parse(&id.to_string()), Some(id));
//! assert_eq!(GeneratedId::parse("order-17"), None);
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

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
    pub fn parse(id: &str) -> Option<Self> {
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
        let parsed = Self {
            epoch: u128::from_str_radix(epoch, 16).ok()?,
            lane: canonical_decimal(lane)?.try_into().ok()?,
            seq: canonical_decimal(seq)?,
        };
        (parsed.lane < ID_LANES && parsed.seq > 0).then_some(parsed)
    }

    /// The key of this id's lane: `{epoch}:{lane}`.
    pub fn lane_key(&self) -> String {
        format!("{:032x}:{}", self.epoch, self.lane)
    }
}

/// A decimal without sign or leading zeros (so an id has exactly one spelling).
fn canonical_decimal(s: &str) -> Option<u64> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
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
pub fn lane_of(hash: u128) -> u8 {
    // ID_LANES = 16: the top 4 bits.
    (hash >> 124) as u8
}

/// Hands out generated ids for one producer instance.
#[derive(Debug)]
pub(crate) struct IdGenerator {
    epoch: u128,
    /// `p:{epoch}:`, written once: every id of the instance starts with it.
    prefix: String,
    /// Each lane's last sequence, on cache lines of its own: callers of different lanes on
    /// two cores do not pass one line back and forth.
    last: [CachePadded<AtomicU64>; ID_LANES as usize],
}

impl IdGenerator {
    /// A new epoch from the thread-local CSPRNG.
    pub(crate) fn new() -> Self {
        Self::with_epoch(rand::random())
    }

    pub(crate) fn with_epoch(epoch: u128) -> Self {
        Self {
            epoch,
            prefix: format!("{GENERATED_ID_PREFIX}{epoch:032x}:"),
            last: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }
    }

    /// The next id of the lane of partition hash `hash`, as a string.
    #[cfg(test)]
    pub(crate) fn next(&self, hash: u128) -> String {
        self.render(self.next_id(hash))
    }

    /// The next id of the lane of partition hash `hash`.
    pub(crate) fn next_id(&self, hash: u128) -> GeneratedId {
        let lane = lane_of(hash);
        let seq = self.last[usize::from(lane)].fetch_add(1, Ordering::Relaxed) + 1;
        GeneratedId {
            epoch: self.epoch,
            lane,
            seq,
        }
    }

    /// The longest id this instance can hand out (the last lane, the largest sequence): what
    /// an event is charged for before its id is known.
    pub(crate) fn longest_id(&self) -> GeneratedId {
        GeneratedId {
            epoch: self.epoch,
            lane: ID_LANES - 1,
            seq: u64::MAX,
        }
    }

    /// `id`'s string (its `Display`), from the instance's prefix: one allocation.
    pub(crate) fn render(&self, id: GeneratedId) -> String {
        use std::fmt::Write as _;
        debug_assert_eq!(id.epoch, self.epoch);
        let mut s = String::with_capacity(self.prefix.len() + 24);
        s.push_str(&self.prefix);
        let _ = write!(s, "{}:{}", id.lane, id.seq);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_ids_are_their_display() {
        let g = IdGenerator::with_epoch(0xfeed_beef);
        for hash in [0u128, 1 << 124, u128::MAX] {
            let id = g.next_id(hash);
            assert_eq!(g.render(id), id.to_string());
        }
    }

    #[test]
    fn ids_count_per_lane_and_parse_back() {
        let g = IdGenerator::with_epoch(7);
        let (low, high) = (0u128, u128::MAX);
        let ids = [g.next(low), g.next(low), g.next(high)];
        let parsed: Vec<GeneratedId> = ids.iter().map(|i| GeneratedId::parse(i).unwrap()).collect();
        assert_eq!(
            parsed.iter().map(|p| (p.lane, p.seq)).collect::<Vec<_>>(),
            vec![(0, 1), (0, 2), (15, 1)]
        );
        assert!(parsed.iter().all(|p| p.epoch == 7));
    }

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
    }
}
