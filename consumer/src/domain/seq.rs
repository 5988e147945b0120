//! Kinesis sequence numbers and lanes.
//!
//! Sequence numbers are decimal strings of varying length (Kinesis: `0|([1-9]\d{0,128})`), so
//! they cannot be compared as strings or stored as DynamoDB numbers (38 digits at most). A
//! [`SeqNum`] keeps a *sortable* form: three digits of length, then the digits. Two such strings
//! compare, as strings, exactly like the numbers they spell — which is what a DynamoDB condition
//! (`wm < :first`) needs.
//!
//! ```
//! use awsmp_consumer::domain::seq::SeqNum;
//! let a = SeqNum::parse("9").unwrap();
//! let b = SeqNum::parse("10").unwrap();
//! assert!(a < b);
//! assert!(a.sortable() < b.sortable());
//! assert_eq!(SeqNum::from_sortable(b.sortable()).unwrap(), b);
//! ```

use std::fmt;
use std::sync::Arc;

use awsmp_contract::attrs::WATERMARK_ATTR_PREFIX;
use md5::{Digest, Md5};

/// Longest sequence number Kinesis issues (API: `0|([1-9]\d{0,128})`, i.e. 129 digits).
pub const MAX_SEQUENCE_DIGITS: usize = 129;

/// A Kinesis sequence number (ordered numerically).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqNum(Arc<str>);

impl SeqNum {
    /// Parse a decimal sequence number; leading zeros, signs and non-digits are refused.
    pub fn parse(decimal: &str) -> Result<Self, String> {
        let ok = !decimal.is_empty()
            && decimal.len() <= MAX_SEQUENCE_DIGITS
            && decimal.bytes().all(|b| b.is_ascii_digit())
            && (decimal == "0" || !decimal.starts_with('0'));
        if !ok {
            return Err(format!("{decimal:?} is not a Kinesis sequence number"));
        }
        Ok(Self(format!("{:03}{decimal}", decimal.len()).into()))
    }

    /// Read the sortable form back.
    pub fn from_sortable(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a sortable sequence number");
        let (len, digits) = s.split_at_checked(3).ok_or_else(bad)?;
        if len.parse::<usize>().ok() != Some(digits.len()) {
            return Err(bad());
        }
        let parsed = Self::parse(digits).map_err(|_| bad())?;
        if &*parsed.0 != s {
            return Err(bad());
        }
        Ok(parsed)
    }

    /// The decimal form Kinesis uses.
    pub fn decimal(&self) -> &str {
        &self.0[3..]
    }

    /// The length-prefixed form, whose string order is numeric order.
    pub fn sortable(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeqNum({})", self.decimal())
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.decimal())
    }
}

/// The order Lambda keeps: records of one shard with one Kinesis partition key are delivered
/// in sequence order, whatever the parallelization factor. A row's watermark is kept per lane,
/// so concurrent batches of one shard (parallelization factor > 1, aggregates whose outer
/// partition key is another group's) never overtake each other on one watermark.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Lane(Arc<str>);

impl Lane {
    /// The lane of records on `shard_id` with Kinesis partition key `partition_key`.
    pub fn new(shard_id: &str, partition_key: &str) -> Self {
        let digest = Md5::digest(partition_key.as_bytes());
        // 64 bits of the key's MD5: lanes only need to differ among the few that touch one row.
        Self(format!("{shard_id}#{}", hex::encode(&digest[..8])).into())
    }

    /// A lane from its stored name (the part after [`WATERMARK_ATTR_PREFIX`]).
    pub fn from_name(name: &str) -> Self {
        Self(name.into())
    }

    /// `{shardId}#{16 hex digits}`.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// The usage-row attribute holding this lane's watermark.
    pub fn attribute(&self) -> String {
        format!("{WATERMARK_ATTR_PREFIX}{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sortable_form_orders_numerically() {
        let nums = [
            "0",
            "1",
            "9",
            "10",
            "49568167373333333333333333333333333333333333333333333333",
            "49568167373333333334444444444444444444444444444444444444",
            "100000000000000000000000000000000000000000000000000000000",
        ];
        for w in nums.windows(2) {
            let (a, b) = (SeqNum::parse(w[0]).unwrap(), SeqNum::parse(w[1]).unwrap());
            assert!(a < b, "{a} < {b}");
            assert!(a.sortable() < b.sortable());
            assert_eq!(SeqNum::from_sortable(a.sortable()).unwrap(), a);
        }
    }

    #[test]
    fn malformed_numbers_are_refused() {
        for bad in ["", "-1", "01", "1a", " 1", &"1".repeat(130)] {
            assert!(SeqNum::parse(bad).is_err(), "{bad}");
        }
        for bad in ["", "001", "0021", "00201", "abc5"] {
            assert!(SeqNum::from_sortable(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lanes_differ_by_shard_and_key() {
        let a = Lane::new("shardId-000000000000", "k1");
        assert_eq!(a, Lane::new("shardId-000000000000", "k1"));
        assert_ne!(a, Lane::new("shardId-000000000001", "k1"));
        assert_ne!(a, Lane::new("shardId-000000000000", "k2"));
        assert!(a.attribute().starts_with("seq#shardId-000000000000#"));
        assert_eq!(Lane::from_name(a.name()), a);
    }
}
