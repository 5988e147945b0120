//! The test oracle of collapse: the plainest way to sum one window's events — a map from
//! (partition key, second, producer id, kind) to a [`Sum`] — against which the window table
//! ([`super::FoldTable`], the one implementation the producer runs) is compared event for
//! event (`fold::tests::the_table_sums_as_the_collapser`). Test-only.

use std::collections::HashMap;

use super::sum::Sum;
use awsmp_contract::event::Event;

#[derive(Hash, PartialEq, Eq)]
struct Key {
    partition_key: String,
    second: i64,
    producer_id: Option<String>,
    allocated: bool,
}

struct Bucket {
    sum: Sum,
    constituents: usize,
}

/// One output of [`Collapser::drain`].
#[derive(Debug)]
pub(crate) struct Collapsed {
    /// The (possibly summed) event: an event added with an id of its own, as it was added;
    /// else the sum of one or more events added without one, itself without an id (the
    /// producer names it with a generated id when it encodes it).
    pub event: Event,
    /// How many recorded events it stands for.
    pub constituents: usize,
}

/// Collects the events of one linger window.
#[derive(Default)]
pub(crate) struct Collapser {
    index: HashMap<Key, usize>,
    buckets: Vec<Bucket>,
}

impl Collapser {
    /// An empty window.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// True when nothing was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Adds a validated event. `partition_key` must be the event's group key and
    /// `payload_bytes` its encoded size. An event with an id of its own stays apart.
    pub(crate) fn add(&mut self, event: Event, partition_key: String, payload_bytes: usize) {
        if !event.event_id.is_empty() {
            self.push_bucket(event, payload_bytes);
            return;
        }
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
            if b.sum.template().group() == event.group() && b.sum.try_absorb(&event) {
                b.constituents += 1;
                return;
            }
            if b.sum.template().group() != event.group() {
                self.push_bucket(event, payload_bytes);
                return;
            }
        }
        let i = self.push_bucket(event, payload_bytes);
        self.index.insert(key, i);
    }

    fn push_bucket(&mut self, event: Event, payload_bytes: usize) -> usize {
        self.buckets.push(Bucket {
            constituents: 1,
            sum: Sum::new(event, payload_bytes),
        });
        self.buckets.len() - 1
    }

    /// Emits the window's events (sums without an id) and empties it.
    pub(crate) fn drain(&mut self) -> Vec<Collapsed> {
        self.index.clear();
        self.buckets
            .drain(..)
            .map(|b| Collapsed {
                event: b.sum.finish(b.constituents > 1),
                constituents: b.constituents,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use chrono::{Duration as ChronoDuration, TimeZone, Utc};
    use proptest::prelude::*;

    use super::Collapser;
    use crate::partition::partition_key;
    use awsmp_contract::event::{Event, Tag, UsageAllocation};
    use awsmp_contract::wire::{decode_event, encode_event};

    fn event(group: usize, ms: i64, quantity: u64, id: String) -> Event {
        Event::new(
            format!("arn:aws:license-manager::123456789012:license:l-{group:032x}"),
            "123456789012",
            format!("d{group}-"),
            quantity,
            Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
                + ChronoDuration::milliseconds(ms),
        )
        .with_event_id(id)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// Collapse conserves quantity per (group, UTC second) and per allocation tag set, keeps
    /// lone events untouched, and never merges an event that has an id of its own: it comes
    /// out as it went in, and sums carry no id (the producer names them).
    #[test]
    fn collapse_conserves_quantities_per_group_second(
        raw in prop::collection::vec((0usize..4, 0i64..3_000, 0u64..1_000_000, any::<bool>(), 0usize..3, any::<bool>()), 1..200),
    ) {
        let mut c: Collapser = Collapser::new();
        let mut inputs = Vec::new();
        for (i, (g, ms, q, tagged, tagset, own_id)) in raw.into_iter().enumerate() {
            let id = if own_id { format!("id-{i}") } else { String::new() };
            let mut e = event(g, ms, q, id);
            // Tagging is per group, as the pipeline requires.
            if g % 2 == 0 || tagged && g == 3 {
                let a = q / 3;
                let tags = vec![Tag::new("team", format!("t{tagset}")), Tag::new("env", "prod")];
                let mut rev = tags.clone();
                rev.reverse(); // same tag set, other order: must merge with `tags`
                e = e.with_allocations(vec![
                    UsageAllocation::new(a, if i % 2 == 0 { tags } else { rev }),
                    UsageAllocation::new(q - a, vec![Tag::new("team", "other")]),
                ]);
            }
            let payload = encode_event(&e);
            let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
            c.add(e.clone(), pk, payload.len());
            inputs.push(e);
        }
        let out = c.drain();
        prop_assert!(c.is_empty());
        type K = (String, i64, bool);
        let key = |e: &Event| (e.dimension.clone() + &e.license_arn, e.timestamp.timestamp(), e.usage_allocations.is_some());
        let mut want: HashMap<K, (u128, usize)> = HashMap::new();
        let mut want_tags: HashMap<(K, Vec<(String, String)>), u128> = HashMap::new();
        let tagset = |a: &UsageAllocation| { let mut t: Vec<_> = a.tags.iter().map(|t| (t.key.clone(), t.value.clone())).collect(); t.sort(); t };
        for e in &inputs {
            let w = want.entry(key(e)).or_default();
            w.0 += e.quantity as u128;
            w.1 += 1;
            for a in e.usage_allocations.iter().flatten() {
                *want_tags.entry((key(e), tagset(a))).or_default() += a.allocated_usage_quantity as u128;
            }
        }
        let mut got: HashMap<K, (u128, usize)> = HashMap::new();
        let mut got_tags: HashMap<(K, Vec<(String, String)>), u128> = HashMap::new();
        for o in &out {
            // Named as the producer names a sum when it encodes it.
            let mut named = o.event.clone();
            if named.event_id.is_empty() {
                named.event_id = format!("p:{:032x}:3:17", 7);
            }
            prop_assert_eq!(named.validate(false), Ok(()), "collapsed events stay valid");
            let g = got.entry(key(&o.event)).or_default();
            g.0 += o.event.quantity as u128;
            g.1 += o.constituents;
            for a in o.event.usage_allocations.iter().flatten() {
                *got_tags.entry((key(&o.event), tagset(a))).or_default() += a.allocated_usage_quantity as u128;
            }
            if o.constituents == 1 {
                prop_assert!(inputs.contains(&o.event), "a lone event is untouched");
            } else {
                prop_assert_eq!(&o.event.event_id, "", "a sum has no id until it is encoded");
            }
            // Round trip through the wire as the producer would send it.
            prop_assert_eq!(&decode_event(&encode_event(&named)).unwrap(), &named);
        }
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(&got_tags, &want_tags);
        // Each event with an id by itself, and one sum per group-second of the others
        // (limits not reached here).
        let own: Vec<&Event> = inputs.iter().filter(|e| !e.event_id.is_empty()).collect();
        for e in &own {
            prop_assert_eq!(out.iter().filter(|o| &o.event == *e && o.constituents == 1).count(), 1);
        }
        let sums: std::collections::HashSet<K> = inputs.iter().filter(|e| e.event_id.is_empty()).map(key).collect();
        prop_assert_eq!(out.len(), own.len() + sums.len());
    }

    }
}
