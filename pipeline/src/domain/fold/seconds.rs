//! The set of contributing seconds of an aggregated record.

use std::fmt;

use awsmp_contract::DomainError;
use awsmp_contract::keys::SECONDS_PER_HOUR;

/// Size of a stored [`SecondSet`]: one bit per second of the hour.
pub const SECOND_SET_BYTES: usize = (SECONDS_PER_HOUR / 8) as usize;

const SECOND_WORDS: usize = (SECONDS_PER_HOUR as usize).div_ceil(64);

/// The set of seconds of an hour (0–3599), as a fixed 3,600-bit bitmap.
///
/// An aggregated record stores the seconds that contributed to it, so a later re-visit can
/// tell a row whose cleanup was lost (its second is in the set) from a late row written after
/// aggregation (it is not). Since a well-formed raw row's sort key is determined by its group
/// and second, the set is also the exact list of raw keys to clean up.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecondSet {
    words: [u64; SECOND_WORDS],
}

impl Default for SecondSet {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SecondSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecondSet")
            .field("len", &self.len())
            .finish()
    }
}

impl SecondSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self {
            words: [0; SECOND_WORDS],
        }
    }

    /// Add `second`; true when it was not there yet.
    ///
    /// # Panics
    /// When `second` is 3600 or more (a caller bug, never data).
    pub fn insert(&mut self, second: u32) -> bool {
        assert!(
            second < SECONDS_PER_HOUR,
            "second {second} outside the hour"
        );
        let (w, bit) = ((second / 64) as usize, 1u64 << (second % 64));
        let fresh = self.words[w] & bit == 0;
        self.words[w] |= bit;
        fresh
    }

    /// True when `second` is in the set.
    pub fn contains(&self, second: u32) -> bool {
        second < SECONDS_PER_HOUR
            && self.words[(second / 64) as usize] & (1u64 << (second % 64)) != 0
    }

    /// Number of seconds in the set.
    pub fn len(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// True when no second is in the set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The seconds, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..SECONDS_PER_HOUR).filter(|&s| self.contains(s))
    }

    /// The stored form: 450 bytes, bit `s % 8` of byte `s / 8` set for second `s`.
    pub fn to_bytes(&self) -> Vec<u8> {
        (0..SECOND_SET_BYTES)
            .map(|i| (self.words[i / 8] >> ((i % 8) * 8)) as u8)
            .collect()
    }

    /// Read the stored form back; exactly [`SECOND_SET_BYTES`] bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DomainError> {
        if bytes.len() != SECOND_SET_BYTES {
            return Err(DomainError::InvalidSecondSet(bytes.len()));
        }
        let mut set = Self::new();
        for (i, &b) in bytes.iter().enumerate() {
            set.words[i / 8] |= u64::from(b) << ((i % 8) * 8);
        }
        Ok(set)
    }
}

/// Bytes per second in the stored form of [`SecondQuantities`]: a raw row's quantity is at most
/// [`MAX_USAGE_QUANTITY`](awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY) (2³¹ − 1), so four bytes.
pub const SECOND_QUANTITY_BYTES: usize = 4;

/// The folded quantity of every contributing second of an aggregated record, so a cleanup or a
/// re-visit can tell whether a raw row still holds what was billed.
///
/// Fixed-size in memory (one `u32` per second of the hour, 14.4 KB); stored as
/// [`SECOND_QUANTITY_BYTES`] big-endian bytes per second *in the record's [`SecondSet`]*,
/// ascending — at most 14,400 bytes, far below DynamoDB's 400 KB item limit
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html>).
#[derive(Clone, PartialEq, Eq)]
pub struct SecondQuantities {
    by_second: Box<[u32]>,
}

impl Default for SecondQuantities {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SecondQuantities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total: u64 = self.by_second.iter().map(|&q| u64::from(q)).sum();
        f.debug_struct("SecondQuantities")
            .field("total", &total)
            .finish()
    }
}

impl SecondQuantities {
    /// Zero for every second.
    pub fn new() -> Self {
        Self {
            by_second: vec![0; SECONDS_PER_HOUR as usize].into_boxed_slice(),
        }
    }

    /// Record `quantity` for `second`. Quantities above `u32::MAX` cannot come from a valid row
    /// (the fold rejects them first) and are clamped.
    ///
    /// # Panics
    /// When `second` is 3600 or more (a caller bug, never data).
    pub fn set(&mut self, second: u32, quantity: u64) {
        self.by_second[second as usize] = u32::try_from(quantity).unwrap_or(u32::MAX);
    }

    /// The quantity folded for `second` (0 when it did not contribute).
    pub fn get(&self, second: u32) -> u64 {
        self.by_second
            .get(second as usize)
            .map_or(0, |&q| u64::from(q))
    }

    /// The stored form for the seconds of `seconds`.
    pub fn to_bytes(&self, seconds: &SecondSet) -> Vec<u8> {
        seconds
            .iter()
            .flat_map(|s| self.by_second[s as usize].to_be_bytes())
            .collect()
    }

    /// Read the stored form back against the record's `seconds`.
    pub fn from_bytes(bytes: &[u8], seconds: &SecondSet) -> Result<Self, DomainError> {
        let invalid = || DomainError::InvalidSecondQuantities {
            bytes: bytes.len(),
            seconds: seconds.len(),
        };
        if bytes.len() != seconds.len() as usize * SECOND_QUANTITY_BYTES {
            return Err(invalid());
        }
        let mut q = Self::new();
        for (s, chunk) in seconds
            .iter()
            .zip(bytes.chunks_exact(SECOND_QUANTITY_BYTES))
        {
            let word: [u8; SECOND_QUANTITY_BYTES] = chunk.try_into().map_err(|_| invalid())?;
            q.by_second[s as usize] = u32::from_be_bytes(word);
        }
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_trip_through_their_stored_form() {
        let mut seconds = SecondSet::new();
        let mut q = SecondQuantities::new();
        for (s, v) in [(0, 7), (59, 0), (3599, u64::from(u32::MAX >> 1))] {
            seconds.insert(s);
            q.set(s, v);
        }
        let bytes = q.to_bytes(&seconds);
        assert_eq!(bytes.len(), 3 * SECOND_QUANTITY_BYTES);
        assert_eq!(&bytes[..4], &[0, 0, 0, 7]);
        let back = SecondQuantities::from_bytes(&bytes, &seconds).unwrap();
        assert_eq!(back, q);
        assert_eq!(back.get(3599), 2_147_483_647);
        assert!(matches!(
            SecondQuantities::from_bytes(&bytes[..8], &seconds),
            Err(DomainError::InvalidSecondQuantities {
                bytes: 8,
                seconds: 3
            })
        ));
    }
}
