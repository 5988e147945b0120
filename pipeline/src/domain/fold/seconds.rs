//! The set of contributing seconds of an aggregated record.

use std::fmt;

use crate::domain::DomainError;
use crate::domain::keys::SECONDS_PER_HOUR;

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
