//! Which records of a lane a row holds: the proof that decides, part by part, whether a
//! delivered record was already applied (docs/guarantees.md, "Consumer: per-row, per-lane
//! coverage").
//!
//! A watermark alone says "the row holds every record of the lane up to here", which is true
//! only while the mapping never skips a record. A batch the mapping discards to its on-failure
//! destination is skipped: a later record of the lane can then write the row, and the
//! watermark passes records the row never held. So each write also records the *span* it
//! covered: the lowest and highest sequence number of its parts in that lane. The batch is a
//! contiguous range of the shard, so every record of the lane between the two that contributes
//! to the row is in it, before its cut, and is in the write (or was recorded as rejected before
//! it). A record inside a span was applied; one outside every span was not — whatever the
//! watermark says. A re-driven record, a replay and a first delivery are decided by the same
//! rule, and a repeated re-drive finds its own span.
//!
//! Spans are merged when they overlap (a replay overlaps the write it repeats); consecutive
//! batches leave a gap between their spans, since the row cannot know whether a skipped record
//! lies there. Past [`MAX_LANE_SPANS`] the lowest span is dropped into the *unknown* prefix: a
//! record there can be neither proved applied nor proved new, and is recorded as rejected
//! (`RedriveUnproven`), never guessed.
//!
//! ```
//! use awsmp_consumer::domain::row::{Coverage, Proof};
//! use awsmp_consumer::domain::seq::SeqNum;
//! let s = |n: u64| SeqNum::parse(&n.to_string()).unwrap();
//! let mut c = Coverage::default();
//! c.add(&s(10), &s(20)); // a batch whose parts in the lane were records 10..=20
//! c.add(&s(40), &s(50)); // a later batch; records 21..=39 were never delivered for this row
//! assert_eq!(c.proof(&s(15), Some(&s(50))), Proof::Applied);
//! assert_eq!(c.proof(&s(30), Some(&s(50))), Proof::NotApplied); // below the watermark, yet new
//! ```

use awsmp_contract::row::AttrValue;

use crate::domain::seq::{Lane, SeqNum};

/// The usage-row attribute prefix of a lane's spans (`cov#<lane>`, beside `seq#<lane>`).
pub const COVERAGE_ATTR_PREFIX: &str = "cov#";

/// The usage-row attribute holding `lane`'s spans.
pub fn attribute(lane: &Lane) -> String {
    format!("{COVERAGE_ATTR_PREFIX}{}", lane.name())
}

/// Spans a lane keeps on one row. Our bound: a span is two sequence numbers (about 120 bytes
/// for Kinesis's 56-digit numbers, 265 at the API's longest), so a lane's spans stay near 1 KB
/// (2 KB at worst) of the row's 400 KB item limit
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html>);
/// a per-second row is written by more than eight batches of one lane only under a backlog of
/// small batches.
pub const MAX_LANE_SPANS: usize = 8;

/// The stored element of the unknown prefix: `?` and the sortable sequence number.
const UNKNOWN_MARK: char = '?';

/// What a row proves about one record of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// The row holds the record's contribution (or it was recorded as rejected before the
    /// write that covered it).
    Applied,
    /// The row does not hold it.
    NotApplied,
    /// The record lies in spans dropped past [`MAX_LANE_SPANS`]: not provable either way.
    Unknown,
}

/// The spans of one lane on one row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Records at or below this are in spans no longer kept.
    unknown_through: Option<SeqNum>,
    /// Disjoint, ascending `(lo, hi)`.
    spans: Vec<(SeqNum, SeqNum)>,
}

impl Coverage {
    /// The coverage of a row written before spans existed: its watermark was a prefix, `[0, wm]`.
    pub fn prefix(watermark: &SeqNum) -> Self {
        let zero = SeqNum::parse("0").expect("0 is a sequence number");
        Self {
            unknown_through: None,
            spans: vec![(zero, watermark.clone())],
        }
    }

    /// The stored element of span `lo..=hi`.
    pub fn span_item(lo: &SeqNum, hi: &SeqNum) -> String {
        format!("{}:{}", lo.sortable(), hi.sortable())
    }

    /// Read the stored list back.
    pub fn decode(v: &AttrValue) -> Result<Self, String> {
        let bad = || format!("{v:?} is not a coverage list");
        let items = v.as_l().ok_or_else(bad)?;
        let mut out = Self::default();
        for (i, item) in items.iter().enumerate() {
            let s = item.as_s().ok_or_else(bad)?;
            if let Some(u) = s.strip_prefix(UNKNOWN_MARK) {
                if i != 0 {
                    return Err(bad());
                }
                out.unknown_through = Some(SeqNum::from_sortable(u)?);
                continue;
            }
            let (lo, hi) = s.split_once(':').ok_or_else(bad)?;
            let (lo, hi) = (SeqNum::from_sortable(lo)?, SeqNum::from_sortable(hi)?);
            if lo > hi {
                return Err(bad());
            }
            out.spans.push((lo, hi));
        }
        // Appended writes keep the list ascending (each starts above the watermark); a list
        // out of order was not written by the consumer, but it is still a set of spans.
        out.spans.sort();
        Ok(out)
    }

    /// The stored list.
    pub fn encode(&self) -> Vec<String> {
        let unknown = self
            .unknown_through
            .iter()
            .map(|u| format!("{UNKNOWN_MARK}{}", u.sortable()));
        let spans = self.spans.iter().map(|(lo, hi)| Self::span_item(lo, hi));
        unknown.chain(spans).collect()
    }

    /// Whether the row holds record `seq`. `watermark` is the lane's `seq#` attribute: a
    /// record above every span but at or below it was written by a consumer that kept only
    /// the watermark (a prefix), and is applied.
    pub fn proof(&self, seq: &SeqNum, watermark: Option<&SeqNum>) -> Proof {
        if self.spans.iter().any(|(lo, hi)| lo <= seq && seq <= hi) {
            return Proof::Applied;
        }
        let top = self
            .spans
            .last()
            .map(|s| &s.1)
            .into_iter()
            .chain(&self.unknown_through)
            .max();
        if top.is_none_or(|t| seq > t) && watermark.is_some_and(|w| seq <= w) {
            return Proof::Applied;
        }
        if self.unknown_through.as_ref().is_some_and(|u| seq <= u) {
            return Proof::Unknown;
        }
        Proof::NotApplied
    }

    /// Add span `lo..=hi`, merging the spans it overlaps; past [`MAX_LANE_SPANS`] the lowest
    /// spans move into the unknown prefix.
    pub fn add(&mut self, lo: &SeqNum, hi: &SeqNum) {
        let (mut lo, mut hi) = (lo.clone(), hi.clone());
        let mut kept = Vec::with_capacity(self.spans.len() + 1);
        for (a, b) in self.spans.drain(..) {
            if b < lo || hi < a {
                kept.push((a, b));
            } else {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        let at = kept.partition_point(|s| s.0 < lo);
        kept.insert(at, (lo, hi));
        while kept.len() > MAX_LANE_SPANS {
            let (_, dropped) = kept.remove(0);
            if self.unknown_through.as_ref().is_none_or(|u| *u < dropped) {
                self.unknown_through = Some(dropped);
            }
        }
        self.spans = kept;
    }

    /// Spans kept.
    pub fn spans(&self) -> usize {
        self.spans.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> SeqNum {
        SeqNum::parse(&n.to_string()).unwrap()
    }

    #[test]
    fn spans_merge_when_they_overlap_and_keep_gaps_otherwise() {
        let mut c = Coverage::default();
        c.add(&s(10), &s(20));
        c.add(&s(15), &s(25)); // a replay overlapping the first write
        c.add(&s(40), &s(50));
        assert_eq!(c.spans(), 2);
        for (n, p) in [
            (10, Proof::Applied),
            (25, Proof::Applied),
            (26, Proof::NotApplied),
            (39, Proof::NotApplied),
            (45, Proof::Applied),
            (51, Proof::NotApplied),
            (9, Proof::NotApplied),
        ] {
            assert_eq!(c.proof(&s(n), Some(&s(50))), p, "record {n}");
        }
        let back = Coverage::decode(&AttrValue::L(
            c.encode().into_iter().map(AttrValue::S).collect(),
        ))
        .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn a_watermark_above_every_span_is_a_prefix_written_without_spans() {
        // A row a consumer before spans wrote: watermark 30, no spans.
        let legacy = Coverage::default();
        assert_eq!(legacy.proof(&s(30), Some(&s(30))), Proof::Applied);
        assert_eq!(legacy.proof(&s(31), Some(&s(30))), Proof::NotApplied);
        // Spans up to 20, then a write that kept only the watermark (to 30).
        let mut c = Coverage::default();
        c.add(&s(10), &s(20));
        assert_eq!(c.proof(&s(25), Some(&s(30))), Proof::Applied);
        assert_eq!(c.proof(&s(5), Some(&s(30))), Proof::NotApplied);
        // A migrated row keeps its prefix as a span.
        let mut m = Coverage::prefix(&s(30));
        m.add(&s(40), &s(41));
        assert_eq!(m.proof(&s(0), Some(&s(41))), Proof::Applied);
        assert_eq!(m.proof(&s(35), Some(&s(41))), Proof::NotApplied);
    }

    #[test]
    fn spans_past_the_cap_become_unknown_never_applied() {
        let mut c = Coverage::default();
        for i in 0..(MAX_LANE_SPANS as u64 + 2) {
            c.add(&s(100 * i + 10), &s(100 * i + 20));
        }
        assert_eq!(c.spans(), MAX_LANE_SPANS);
        let top = s(100 * (MAX_LANE_SPANS as u64 + 1) + 20);
        // The two lowest spans, and the gaps below them, are unknown now.
        for n in [15, 50, 115, 120] {
            assert_eq!(c.proof(&s(n), Some(&top)), Proof::Unknown, "record {n}");
        }
        assert_eq!(c.proof(&s(150), Some(&top)), Proof::NotApplied);
        assert_eq!(c.proof(&s(215), Some(&top)), Proof::Applied);
        let encoded = c.encode();
        assert!(encoded[0].starts_with('?'), "{encoded:?}");
        let back = Coverage::decode(&AttrValue::L(
            encoded.into_iter().map(AttrValue::S).collect(),
        ))
        .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn malformed_lists_are_refused() {
        for bad in [
            AttrValue::S("001:002".into()),
            AttrValue::L(vec![AttrValue::N("1".into())]),
            AttrValue::L(vec![AttrValue::S("0012".into())]),
            AttrValue::L(vec![AttrValue::S("0015:0013".into())]),
            AttrValue::L(vec![
                AttrValue::S("0011:0012".into()),
                AttrValue::S("?0013".into()),
            ]),
        ] {
            assert!(Coverage::decode(&bad).is_err(), "{bad:?}");
        }
    }
}
