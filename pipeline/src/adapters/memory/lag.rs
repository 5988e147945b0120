//! Eventually consistent global secondary indexes in memory. DynamoDB propagates a base-table
//! write to a GSI asynchronously, and a GSI query cannot ask for a consistent read
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.Reads>,
//! "Reading data from a global secondary index"), so an index read may still see an item's
//! previous version: an item already finalized still listed as pending, a new pending item
//! not yet listed, or older attribute values.
//!
//! [`IndexLag`] records, per key, the version the index still shows; a read shows it or the
//! current one as the [`ReadConsistency`] knob decides. Base-table reads (`GetItem`, `Query`
//! with `ConsistentRead`) always see the current version, as the DynamoDB adapters ask for.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// How a memory table's index reads see recent writes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ReadConsistency {
    /// Every index read sees every write (the default; a table at rest).
    #[default]
    Consistent,
    /// Each index read of an item written since its last propagation sees the previous
    /// version with probability `stale`, else the write propagates (and stays propagated),
    /// from a generator seeded with `seed`.
    Seeded {
        /// Seed of the generator.
        seed: u64,
        /// Probability (0.0–1.0) that a read still sees the previous version.
        stale: f64,
    },
    /// Index reads see the previous version of every item written since the last
    /// `propagate_index()` call (a test's explicit control).
    Manual,
}

/// Per key, the version an index still shows (`None`: the key was not in the table).
#[derive(Debug)]
pub(super) struct IndexLag<K, V> {
    mode: ReadConsistency,
    rng: StdRng,
    behind: BTreeMap<K, Option<V>>,
}

impl<K: Ord + Clone, V: Clone> IndexLag<K, V> {
    pub(super) fn new(mode: ReadConsistency) -> Self {
        let seed = match mode {
            ReadConsistency::Seeded { seed, .. } => seed,
            _ => 0,
        };
        Self {
            mode,
            rng: StdRng::seed_from_u64(seed),
            behind: BTreeMap::new(),
        }
    }

    /// Before `key` is written: remember what the index showed, unless it is already behind
    /// (it then still shows the older version; a GSI applies writes in order).
    pub(super) fn before_write(&mut self, key: &K, prior: Option<&V>) {
        if self.mode != ReadConsistency::Consistent && !self.behind.contains_key(key) {
            self.behind.insert(key.clone(), prior.cloned());
        }
    }

    /// Every pending write propagates.
    pub(super) fn propagate(&mut self) {
        self.behind.clear();
    }

    /// Decide, for one index read, which lagging keys it still sees at their previous
    /// version: those keys with that version (`None`: absent). Every other lagging key
    /// propagates (and stays propagated).
    fn stale_versions(&mut self) -> BTreeMap<K, Option<V>> {
        let mut out = BTreeMap::new();
        if self.behind.is_empty() {
            return out;
        }
        let keys: Vec<K> = self.behind.keys().cloned().collect();
        for key in keys {
            let stale = match self.mode {
                ReadConsistency::Consistent => false,
                ReadConsistency::Manual => true,
                ReadConsistency::Seeded { stale, .. } => {
                    stale > 0.0 && self.rng.random_bool(stale.min(1.0))
                }
            };
            if stale {
                let previous = self.behind.get(&key).cloned().flatten();
                out.insert(key, previous);
            } else {
                self.behind.remove(&key);
            }
        }
        out
    }

    /// The items one index read of a query sees, by key: each item `matches` keeps, with
    /// each lagging key shown at its previous version (or absent) when the knob says so.
    /// `indexed` must name every current key whose item `matches` keeps (the table's own
    /// index of the query), so that a read costs what the query returns, not the table.
    pub(super) fn view<'a>(
        &mut self,
        current: &BTreeMap<K, V>,
        indexed: impl IntoIterator<Item = &'a K>,
        matches: impl Fn(&V) -> bool,
    ) -> BTreeMap<K, V>
    where
        K: 'a,
    {
        let stale = self.stale_versions();
        let mut view: BTreeMap<K, V> = indexed
            .into_iter()
            .filter(|k| !stale.contains_key(*k))
            .filter_map(|k| {
                let item = current.get(k).filter(|v| matches(v))?;
                Some((k.clone(), item.clone()))
            })
            .collect();
        for (key, previous) in stale {
            if let Some(item) = previous.filter(|v| matches(v)) {
                view.insert(key, item);
            }
        }
        view
    }
}
