//! The generator of event ids (`p:{epoch}:{lane}:{seq}`) of one producer instance; the id's
//! form, parser and lanes are the contract's (`awsmp_contract::event_id`, docs/row-contract.md,
//! "Event ids").

use std::sync::atomic::{AtomicU64, Ordering};

use awsmp_contract::event_id::{GENERATED_ID_PREFIX, GeneratedId, ID_LANES, lane_of};
use crossbeam_utils::CachePadded;

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
}
