//! VMT allocations: a row's `usageAllocations` read under the guardrails, and the group's
//! allocations merged per distinct tag set.

use std::collections::BTreeMap;

use super::checks::{Finding, finding};
use awsmp_contract::attrs;
use awsmp_contract::limits::marketplace::{
    MAX_ALLOCATIONS_PER_RECORD, MAX_TAG_KEY_LENGTH, MAX_TAG_VALUE_LENGTH, MAX_TAGS_PER_ALLOCATION,
    MAX_USAGE_QUANTITY, matches_tag_pattern,
};
use awsmp_contract::row::{Allocation, AttrValue, NumberError, Tag, parse_non_negative_integer};
use awsmp_contract::status::RejectReason::{self, *};

/// A row's tags, borrowed from the row: `(key, value)` pairs.
pub(super) type BorrowedTags<'r> = Vec<(&'r str, &'r str)>;

/// The earliest-ranked finding over a row's allocations (the first one seen wins a tie).
#[derive(Default)]
struct Worst(Option<Finding>);

impl Worst {
    fn note(&mut self, f: Finding) {
        if self.0.as_ref().is_none_or(|w| f.reason < w.reason) {
            self.0 = Some(f);
        }
    }

    fn note_as(&mut self, reason: RejectReason, detail: String) {
        self.note(finding(reason, detail));
    }
}

/// Parse a row's `usageAllocations`, returning the earliest-ranked problem if any.
/// Each allocation becomes (tags sorted by key then value, quantity).
pub(super) fn parse_allocations(v: &AttrValue) -> Result<Vec<(BorrowedTags<'_>, u64)>, Finding> {
    let Some(list) = v.as_l() else {
        return Err(finding(
            MalformedAllocations,
            "usageAllocations is not a list",
        ));
    };
    if list.is_empty() {
        return Err(finding(
            MalformedAllocations,
            "usageAllocations is an empty list",
        ));
    }
    let mut worst = Worst::default();
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        if let Some(allocation) = parse_allocation(i, item, &mut worst) {
            out.push(allocation);
        }
    }
    match worst.0 {
        Some(f) => Err(f),
        None => Ok(out),
    }
}

/// One allocation; every problem in it is noted, and `None` when any was found.
fn parse_allocation<'r>(
    i: usize,
    item: &'r AttrValue,
    worst: &mut Worst,
) -> Option<(BorrowedTags<'r>, u64)> {
    let Some(m) = item.as_m() else {
        worst.note_as(MalformedAllocations, format!("allocation {i} is not a map"));
        return None;
    };
    if let Some(k) = m
        .keys()
        .find(|k| *k != attrs::ALLOCATED_USAGE_QUANTITY && *k != attrs::TAGS)
    {
        worst.note_as(
            MalformedAllocations,
            format!("allocation {i} has unknown field {k:?}"),
        );
    }
    let quantity = allocation_quantity(i, m.get(attrs::ALLOCATED_USAGE_QUANTITY), worst);
    let tags = match m.get(attrs::TAGS) {
        None | Some(AttrValue::Null) => Some(Vec::new()),
        Some(AttrValue::L(tags)) => parse_tags(i, tags, worst),
        Some(_) => {
            worst.note_as(
                MalformedAllocations,
                format!("allocation {i} Tags is not a list"),
            );
            None
        }
    };
    let (quantity, mut tags) = (quantity?, tags?);
    tags.sort_unstable();
    Some((tags, quantity))
}

fn allocation_quantity(i: usize, v: Option<&AttrValue>, worst: &mut Worst) -> Option<u64> {
    match v {
        None | Some(AttrValue::Null) => {
            worst.note_as(
                MalformedAllocations,
                format!("allocation {i} has no AllocatedUsageQuantity"),
            );
            None
        }
        Some(AttrValue::N(n)) => match parse_non_negative_integer(n) {
            Ok(q) if q <= MAX_USAGE_QUANTITY => Some(q),
            Ok(_) | Err(NumberError::Overflow) => {
                worst.note_as(
                    QuantityOverflow,
                    format!(
                        "allocation {i} quantity {n} exceeds the BatchMeterUsage maximum {MAX_USAGE_QUANTITY}"
                    ),
                );
                None
            }
            Err(_) => {
                worst.note_as(
                    NegativeOrNonIntegerAllocation,
                    format!("allocation {i} quantity {n:?} is not a non-negative integer"),
                );
                None
            }
        },
        Some(other) => {
            worst.note_as(
                MalformedAllocations,
                format!("allocation {i} quantity {other:?} is not a number"),
            );
            None
        }
    }
}

fn parse_tags<'r>(i: usize, tags: &'r [AttrValue], worst: &mut Worst) -> Option<BorrowedTags<'r>> {
    if tags.is_empty() {
        worst.note_as(
            MalformedAllocations,
            format!("allocation {i} has an empty Tags list"),
        );
        return None;
    }
    if tags.len() > MAX_TAGS_PER_ALLOCATION {
        worst.note_as(
            TooManyTags,
            format!(
                "allocation {i} has {} tags, at most {MAX_TAGS_PER_ALLOCATION}",
                tags.len()
            ),
        );
    }
    let mut out = Vec::with_capacity(tags.len());
    let mut ok = true;
    for (j, tag) in tags.iter().enumerate() {
        match parse_tag(i, j, tag, worst) {
            Some(pair) => out.push(pair),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// One tag; every problem in it is noted, and `None` when any was found.
fn parse_tag<'r>(
    i: usize,
    j: usize,
    tag: &'r AttrValue,
    worst: &mut Worst,
) -> Option<(&'r str, &'r str)> {
    let Some(m) = tag.as_m() else {
        worst.note_as(
            MalformedAllocations,
            format!("allocation {i} tag {j} is not a map"),
        );
        return None;
    };
    let unknown = m
        .keys()
        .find(|k| *k != attrs::TAG_KEY && *k != attrs::TAG_VALUE);
    if let Some(k) = unknown {
        worst.note_as(
            MalformedAllocations,
            format!("allocation {i} tag {j} has unknown field {k:?}"),
        );
    }
    let key = tag_field(i, j, m.get(attrs::TAG_KEY), attrs::TAG_KEY, worst);
    let value = tag_field(i, j, m.get(attrs::TAG_VALUE), attrs::TAG_VALUE, worst);
    match (key, value) {
        (Some(key), Some(value)) if unknown.is_none() => Some((key, value)),
        _ => None,
    }
}

fn tag_field<'r>(
    i: usize,
    j: usize,
    v: Option<&'r AttrValue>,
    name: &str,
    worst: &mut Worst,
) -> Option<&'r str> {
    match v {
        None | Some(AttrValue::Null) => {
            worst.note_as(
                MissingTagKeyOrValue,
                format!("allocation {i} tag {j} has no {name}"),
            );
            None
        }
        Some(AttrValue::S(s)) if s.is_empty() => {
            worst.note_as(
                MissingTagKeyOrValue,
                format!("allocation {i} tag {j} has an empty {name}"),
            );
            None
        }
        Some(AttrValue::S(s)) => {
            let max = if name == attrs::TAG_KEY {
                MAX_TAG_KEY_LENGTH
            } else {
                MAX_TAG_VALUE_LENGTH
            };
            let length = s.chars().count();
            if length > max {
                worst.note_as(
                    TagKeyOrValueTooLong,
                    format!("allocation {i} tag {j} {name} has {length} characters, at most {max}"),
                );
                None
            } else if !tag_pattern_matches(s) {
                worst.note_as(
                    InvalidTagCharacters,
                    format!("allocation {i} tag {j} {name} {s:?} has a character outside the Tag pattern"),
                );
                None
            } else {
                Some(s.as_str())
            }
        }
        Some(other) => {
            worst.note_as(
                MalformedAllocations,
                format!("allocation {i} tag {j} {name} {other:?} is not a string"),
            );
            None
        }
    }
}

/// [`matches_tag_pattern`] without the regex on an ASCII string: the documented pattern is one
/// character class repeated (`^[…]+$`), so an ASCII string matches exactly when it is non-empty
/// and each of its bytes does on its own — which the table holds, read from the pattern itself
/// once. Anything else asks the pattern.
fn tag_pattern_matches(s: &str) -> bool {
    static ASCII_CLASS: std::sync::LazyLock<[bool; 128]> = std::sync::LazyLock::new(|| {
        let mut class = [false; 128];
        for (b, slot) in (0u8..).zip(class.iter_mut()) {
            *slot = matches_tag_pattern(char::from(b).encode_utf8(&mut [0; 4]));
        }
        class
    });
    if !s.is_ascii() {
        return matches_tag_pattern(s);
    }
    let class = &*ASCII_CLASS;
    !s.is_empty() && s.bytes().all(|b| class[usize::from(b)])
}

/// The group's allocations merged per distinct tag set; memory stays O(distinct tag sets),
/// bounded by [`MAX_ALLOCATIONS_PER_RECORD`].
#[derive(Debug, Default)]
pub(super) struct TagSetMerge {
    /// Merged quantity per tag set, keyed by [`encode_tag_set`] so lookups need no
    /// per-tag allocation.
    merged: BTreeMap<Vec<u8>, u64>,
    /// Reused buffer for encoding tag-set keys.
    scratch: Vec<u8>,
    /// More distinct tag sets than the API allows were seen; new ones are no longer stored.
    overflowed_limit: bool,
}

impl TagSetMerge {
    /// Add `quantity` to the tag set `sorted_tags`.
    pub(super) fn add(&mut self, sorted_tags: &[(&str, &str)], quantity: u64) {
        encode_tag_set(sorted_tags, &mut self.scratch);
        let len = self.merged.len();
        match self.merged.get_mut(self.scratch.as_slice()) {
            Some(sum) => *sum = sum.saturating_add(quantity),
            None if len < MAX_ALLOCATIONS_PER_RECORD => {
                self.merged.insert(self.scratch.clone(), quantity);
            }
            // Memory stays bounded: one set past the limit already decides TooManyAllocations.
            None => self.overflowed_limit = true,
        }
    }

    /// True when more than [`MAX_ALLOCATIONS_PER_RECORD`] distinct tag sets were added.
    pub(super) fn overflowed_limit(&self) -> bool {
        self.overflowed_limit
    }

    /// Exact sum of the merged quantities; `None` on overflow.
    pub(super) fn sum(&self) -> Option<u64> {
        self.merged
            .values()
            .try_fold(0u64, |acc, q| acc.checked_add(*q))
    }

    /// One allocation per tag set, ordered by tag set.
    pub(super) fn into_allocations(self) -> Vec<Allocation> {
        let mut out: Vec<Allocation> = self
            .merged
            .into_iter()
            .map(|(key, quantity)| Allocation {
                quantity,
                tags: decode_tag_set(&key),
            })
            .collect();
        out.sort_unstable_by(|a, b| a.tags.cmp(&b.tags));
        out
    }
}

/// Encode a tag set, whose pairs are already sorted (so the key is order-insensitive), into
/// `out` (cleared first): each string length-prefixed, so distinct tag sets never share an
/// encoding.
pub(super) fn encode_tag_set(sorted_tags: &[(&str, &str)], out: &mut Vec<u8>) {
    out.clear();
    for &(k, v) in sorted_tags {
        for part in [k, v] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part.as_bytes());
        }
    }
}

/// Inverse of [`encode_tag_set`]: the tags sorted by key then value.
pub(super) fn decode_tag_set(mut bytes: &[u8]) -> Vec<Tag> {
    fn next(bytes: &mut &[u8]) -> String {
        let (len, rest) = bytes.split_at(8);
        let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8])) as usize;
        let (s, rest) = rest.split_at(len);
        *bytes = rest;
        // The bytes were copied from `&str`s, so they are valid UTF-8.
        String::from_utf8_lossy(s).into_owned()
    }
    let mut tags = Vec::new();
    while !bytes.is_empty() {
        let key = next(&mut bytes);
        let value = next(&mut bytes);
        tags.push(Tag { key, value });
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The byte table answers as the documented pattern does, on any string.
        #[test]
        fn the_tag_pattern_table_is_the_pattern(s in prop_oneof![
            "[ -~]{0,12}",
            "[ -~\\n\\t\\u{80}-\\u{10ffff}]{0,6}",
            any::<String>(),
        ]) {
            prop_assert_eq!(tag_pattern_matches(&s), matches_tag_pattern(&s));
        }
    }

    #[test]
    fn the_tag_pattern_table_agrees_on_every_ascii_character() {
        for b in 0u8..128 {
            let one = char::from(b).to_string();
            assert_eq!(tag_pattern_matches(&one), matches_tag_pattern(&one), "{b}");
            let two = format!("a{one}");
            assert_eq!(tag_pattern_matches(&two), matches_tag_pattern(&two), "{b}");
        }
        assert!(!tag_pattern_matches(""));
    }
}
