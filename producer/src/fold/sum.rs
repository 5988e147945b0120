//! The running sum of one (group, second, producer, kind) in the window table
//! ([`super::FoldTable`]): its first event as a template, the summed quantity, the earliest
//! timestamp and the allocations merged by tag set. Pure; conserves quantity per
//! group-second and per allocation tag set.

use std::hash::{BuildHasher, Hasher};

use chrono::{DateTime, Utc};

use foldhash::fast::FixedState;
use hashbrown::HashTable;

use awsmp_contract::event::{Event, Tag, UsageAllocation};
use awsmp_contract::limits::marketplace::{MAX_ALLOCATIONS_PER_RECORD, MAX_TAGS_PER_ALLOCATION};

/// A sum stops growing past this estimated payload size (new events of its group-second
/// start another one), keeping every record far below the 1 MiB Kinesis limit.
pub(crate) const MAX_COLLAPSED_PAYLOAD_BYTES: usize = 256 * 1024;

/// The running sum of one (group, second, producer, kind): the first event as a template,
/// the summed quantity and the allocations merged by tag set. The window table's sums, and the test
/// oracle's (`fold::oracle::Collapser`), so both sum alike.
pub(crate) struct Sum {
    template: Event,
    quantity: u64,
    allocations: Vec<UsageAllocation>,
    by_tag_set: Option<TagIndex>,
    approx_bytes: usize,
}

/// Tag sets hashed once per set; the sets themselves are compared sorted, without copies.
const TAG_HASHER: FixedState = FixedState::with_seed(0x7a67_5f73_6574_5f31);

/// `tags` sorted, on the stack for the at most 5 tags of a validated allocation.
fn with_sorted<R>(tags: &[Tag], f: impl FnOnce(&[&Tag]) -> R) -> R {
    if tags.len() <= MAX_TAGS_PER_ALLOCATION && !tags.is_empty() {
        let mut buf = [&tags[0]; MAX_TAGS_PER_ALLOCATION];
        for (slot, t) in buf.iter_mut().zip(tags) {
            *slot = t;
        }
        let sorted = &mut buf[..tags.len()];
        sorted.sort_unstable();
        f(sorted)
    } else {
        let mut v: Vec<&Tag> = tags.iter().collect();
        v.sort_unstable();
        f(&v)
    }
}

fn tag_set_hash(tags: &[Tag]) -> u64 {
    with_sorted(tags, |sorted| {
        let mut h = TAG_HASHER.build_hasher();
        for t in sorted {
            h.write(t.key.as_bytes());
            h.write_u8(0xff);
            h.write(t.value.as_bytes());
            h.write_u8(0xff);
        }
        h.write_usize(sorted.len());
        h.finish()
    })
}

fn same_tag_set(a: &[Tag], b: &[Tag]) -> bool {
    a.len() == b.len() && with_sorted(a, |sa| with_sorted(b, |sb| sa == sb))
}

/// The merged allocations' positions by tag set (the sorted (key, value) pairs).
#[derive(Default)]
struct TagIndex {
    table: HashTable<usize>,
}

impl TagIndex {
    fn find(&self, merged: &[UsageAllocation], a: &UsageAllocation) -> Option<usize> {
        self.table
            .find(tag_set_hash(&a.tags), |&i| {
                same_tag_set(&merged[i].tags, &a.tags)
            })
            .copied()
    }
}

fn allocation_bytes(a: &UsageAllocation) -> usize {
    // {"AllocatedUsageQuantity":N,"Tags":[{"Key":"k","Value":"v"}]} — generous estimate.
    48 + a
        .tags
        .iter()
        .map(|t| 24 + 2 * (t.key.len() + t.value.len()))
        .sum::<usize>()
}

impl Sum {
    /// A sum holding `event` alone, whose payload is `payload_bytes` long.
    pub(crate) fn new(event: Event, payload_bytes: usize) -> Self {
        Sum {
            quantity: event.quantity,
            allocations: Vec::new(),
            by_tag_set: None,
            approx_bytes: payload_bytes,
            template: event,
        }
    }

    /// The first event (its group, second, producer id and kind are the sum's).
    pub(crate) fn template(&self) -> &Event {
        &self.template
    }

    /// The summed event: the template itself when nothing was `merged` into it, else with
    /// the summed quantity and allocations and the earliest timestamp.
    pub(crate) fn finish(self, merged: bool) -> Event {
        let mut event = self.template;
        if merged {
            event.quantity = self.quantity;
            if event.usage_allocations.is_some() {
                event.usage_allocations = Some(self.allocations);
            }
        }
        event
    }

    /// Merges `e`'s quantity, allocations and timestamp if the result stays within limits;
    /// leaves the sum untouched and returns false otherwise.
    pub(crate) fn try_absorb(&mut self, e: &Event) -> bool {
        self.try_absorb_parts(e.quantity, e.usage_allocations.as_deref(), e.timestamp)
    }

    /// [`Sum::try_absorb`] of an event given by its parts: `quantity` at `timestamp` (whole
    /// milliseconds), with `allocations` if it has some.
    pub(crate) fn try_absorb_parts(
        &mut self,
        quantity: u64,
        allocations: Option<&[UsageAllocation]>,
        timestamp: DateTime<Utc>,
    ) -> bool {
        let Some(quantity) = self.quantity.checked_add(quantity) else {
            return false;
        };
        if let Some(new_allocs) = allocations {
            if self.by_tag_set.is_none() {
                // Second event of the sum: index the first one's allocations.
                let mut index = TagIndex::default();
                let mut merged: Vec<UsageAllocation> = Vec::new();
                for a in self.template.usage_allocations.iter().flatten() {
                    merge_into(&mut merged, &mut index, a);
                }
                self.allocations = merged;
                self.by_tag_set = Some(index);
            }
            let index = self.by_tag_set.as_ref().expect("indexed above");
            let (mut added, mut added_bytes) = (0, 0);
            for a in new_allocs {
                if index.find(&self.allocations, a).is_none() {
                    added += 1;
                    added_bytes += allocation_bytes(a);
                }
            }
            if self.allocations.len() + added > MAX_ALLOCATIONS_PER_RECORD
                || self.approx_bytes + added_bytes > MAX_COLLAPSED_PAYLOAD_BYTES
            {
                return false;
            }
            let index = self.by_tag_set.as_mut().expect("indexed above");
            for a in new_allocs {
                merge_into(&mut self.allocations, index, a);
            }
            self.approx_bytes += added_bytes;
        }
        self.quantity = quantity;
        if timestamp < self.template.timestamp {
            self.template.timestamp = timestamp;
        }
        true
    }

    /// The summed quantity.
    pub(crate) fn quantity(&self) -> u64 {
        self.quantity
    }

    /// Takes what events without allocations made of the sum elsewhere (a bound group
    /// handle's slot, `crate::fold`): its whole `quantity`, and `earliest` if it is earlier.
    pub(crate) fn set_plain(&mut self, quantity: u64, earliest: DateTime<Utc>) {
        debug_assert!(self.template.usage_allocations.is_none());
        self.quantity = quantity;
        if earliest < self.template.timestamp {
            self.template.timestamp = earliest;
        }
    }

    /// [`Sum::try_absorb`] of an event without allocations: `quantity` at `timestamp`.
    pub(crate) fn try_absorb_plain(&mut self, quantity: u64, timestamp: DateTime<Utc>) -> bool {
        debug_assert!(self.template.usage_allocations.is_none());
        let Some(sum) = self.quantity.checked_add(quantity) else {
            return false;
        };
        self.quantity = sum;
        if timestamp < self.template.timestamp {
            self.template.timestamp = timestamp;
        }
        true
    }
}

fn merge_into(merged: &mut Vec<UsageAllocation>, index: &mut TagIndex, a: &UsageAllocation) {
    match index.find(merged, a) {
        // Allocations sum to their event's quantity, and the sum's quantity did not
        // overflow, so neither can any one tag set's sum.
        Some(i) => merged[i].allocated_usage_quantity += a.allocated_usage_quantity,
        None => {
            let hash = tag_set_hash(&a.tags);
            let i = merged.len();
            merged.push(a.clone());
            index
                .table
                .insert_unique(hash, i, |&j| tag_set_hash(&merged[j].tags));
        }
    }
}
