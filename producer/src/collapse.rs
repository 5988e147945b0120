//! Optional per-second collapse (docs/row-contract.md, "Collapse"): inside one linger window, events of the same group
//! and UTC second are summed into one event. Pure; conserves quantity per group-second and per
//! allocation tag set.

use std::collections::HashMap;

use uuid::Uuid;

use crate::event::{Event, MAX_ALLOCATIONS_PER_RECORD, UsageAllocation};

/// Namespace of collapsed event ids (UUID v5 over the sorted constituent ids).
pub const COLLAPSE_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6d1f_4a8e_2c57_4b0b_9a7e_52c4_1f3e_8d90);

/// A collapsed event stops growing past this estimated payload size (new events of its
/// group-second start another one), keeping every record far below the 1 MiB Kinesis limit.
pub const MAX_COLLAPSED_PAYLOAD_BYTES: usize = 256 * 1024;

/// Bookkeeping carried along with each event and merged when events collapse.
pub trait CollapseMeta {
    /// Folds `other` (an event that collapsed into this one) into `self`.
    fn absorb(&mut self, other: Self);
}

impl CollapseMeta for () {
    fn absorb(&mut self, _other: Self) {}
}

#[derive(Hash, PartialEq, Eq)]
struct Key {
    partition_key: String,
    second: i64,
    producer_id: Option<String>,
    allocated: bool,
}

struct Bucket<M> {
    template: Event,
    quantity: u64,
    ids: Vec<String>,
    allocations: Vec<UsageAllocation>,
    by_tag_set: Option<HashMap<Vec<(String, String)>, usize>>,
    approx_bytes: usize,
    meta: M,
}

/// One output of [`Collapser::drain`].
#[derive(Debug)]
pub struct Collapsed<M> {
    /// The (possibly summed) event.
    pub event: Event,
    /// How many recorded events it stands for.
    pub constituents: usize,
    /// The merged bookkeeping.
    pub meta: M,
}

/// Collects the events of one linger window.
pub struct Collapser<M> {
    index: HashMap<Key, usize>,
    buckets: Vec<Bucket<M>>,
}

impl<M> Default for Collapser<M> {
    fn default() -> Self {
        Collapser {
            index: HashMap::new(),
            buckets: Vec::new(),
        }
    }
}

fn tag_set(a: &UsageAllocation) -> Vec<(String, String)> {
    let mut t: Vec<(String, String)> = a
        .tags
        .iter()
        .map(|t| (t.key.clone(), t.value.clone()))
        .collect();
    t.sort();
    t
}

fn allocation_bytes(a: &UsageAllocation) -> usize {
    // {"AllocatedUsageQuantity":N,"Tags":[{"Key":"k","Value":"v"}]} — generous estimate.
    48 + a
        .tags
        .iter()
        .map(|t| 24 + 2 * (t.key.len() + t.value.len()))
        .sum::<usize>()
}

impl<M: CollapseMeta> Collapser<M> {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of events the window will emit.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Adds a validated event. `partition_key` must be the event's group key and
    /// `payload_bytes` its encoded size.
    pub fn add(&mut self, event: Event, partition_key: String, payload_bytes: usize, meta: M) {
        let key = Key {
            partition_key,
            second: event.timestamp.timestamp(),
            producer_id: event.producer_id.clone(),
            allocated: event.usage_allocations.is_some(),
        };
        if let Some(&i) = self.index.get(&key) {
            let b = &mut self.buckets[i];
            // The key holds the group's partition key, which is a digest for very long groups:
            // compare the group itself so a digest collision can never merge two groups.
            if b.template.group() == event.group() && b.try_absorb(&event) {
                b.ids.push(event.event_id);
                b.meta.absorb(meta);
                return;
            }
            if b.template.group() != event.group() {
                self.push_bucket(event, payload_bytes, meta);
                return;
            }
        }
        let i = self.push_bucket(event, payload_bytes, meta);
        self.index.insert(key, i);
    }

    fn push_bucket(&mut self, event: Event, payload_bytes: usize, meta: M) -> usize {
        self.buckets.push(Bucket {
            quantity: event.quantity,
            ids: vec![event.event_id.clone()],
            allocations: Vec::new(),
            by_tag_set: None,
            approx_bytes: payload_bytes,
            template: event,
            meta,
        });
        self.buckets.len() - 1
    }

    /// Emits the window's events (collapsed ones with a deterministic id) and empties it.
    pub fn drain(&mut self) -> Vec<Collapsed<M>> {
        self.index.clear();
        self.buckets
            .drain(..)
            .map(|b| {
                let constituents = b.ids.len();
                let mut event = b.template;
                if constituents > 1 {
                    event.event_id = collapsed_id(b.ids).to_string();
                    event.quantity = b.quantity;
                    if event.usage_allocations.is_some() {
                        event.usage_allocations = Some(b.allocations);
                    }
                }
                Collapsed {
                    event,
                    constituents,
                    meta: b.meta,
                }
            })
            .collect()
    }
}

impl<M> Bucket<M> {
    /// Merges `e`'s quantity, allocations and timestamp if the result stays within limits;
    /// leaves the bucket untouched and returns false otherwise.
    fn try_absorb(&mut self, e: &Event) -> bool {
        let Some(quantity) = self.quantity.checked_add(e.quantity) else {
            return false;
        };
        if let Some(new_allocs) = &e.usage_allocations {
            if self.by_tag_set.is_none() {
                // Second event of the bucket: index the first one's allocations.
                let mut index = HashMap::new();
                let mut merged: Vec<UsageAllocation> = Vec::new();
                for a in self.template.usage_allocations.iter().flatten() {
                    merge_into(&mut merged, &mut index, a);
                }
                self.allocations = merged;
                self.by_tag_set = Some(index);
            }
            let index = self.by_tag_set.as_ref().expect("indexed above");
            let added: Vec<&UsageAllocation> = new_allocs
                .iter()
                .filter(|a| !index.contains_key(&tag_set(a)))
                .collect();
            let added_bytes: usize = added.iter().map(|a| allocation_bytes(a)).sum();
            if self.allocations.len() + added.len() > MAX_ALLOCATIONS_PER_RECORD
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
        if e.timestamp < self.template.timestamp {
            self.template.timestamp = e.timestamp;
        }
        true
    }
}

fn merge_into(
    merged: &mut Vec<UsageAllocation>,
    index: &mut HashMap<Vec<(String, String)>, usize>,
    a: &UsageAllocation,
) {
    match index.get(&tag_set(a)) {
        // Allocations sum to their event's quantity, and the bucket quantity did not
        // overflow, so neither can any one tag set's sum.
        Some(&i) => merged[i].allocated_usage_quantity += a.allocated_usage_quantity,
        None => {
            index.insert(tag_set(a), merged.len());
            merged.push(a.clone());
        }
    }
}

/// UUID v5 over the sorted constituent ids, each length-prefixed so no two id lists encode alike.
pub fn collapsed_id(mut ids: Vec<String>) -> Uuid {
    ids.sort_unstable();
    let mut buf = Vec::with_capacity(ids.iter().map(|i| i.len() + 4).sum());
    for id in &ids {
        buf.extend_from_slice(&(id.len() as u32).to_be_bytes());
        buf.extend_from_slice(id.as_bytes());
    }
    Uuid::new_v5(&COLLAPSE_ID_NAMESPACE, &buf)
}
