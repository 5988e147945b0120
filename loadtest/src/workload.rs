//! The load generator's workload: many groups with skewed (Zipf) popularity, seeded so a
//! failing run can be replayed exactly.

use awsmp_producer::{Event, Tag, UsageAllocation};
use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// One metered group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    /// License ARN.
    pub license_arn: String,
    /// Buyer account.
    pub account: String,
    /// Pricing dimension.
    pub dimension: String,
}

/// Shape of the generated traffic.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    /// Number of groups.
    pub groups: usize,
    /// Dimensions per license.
    pub dimensions: Vec<String>,
    /// Zipf exponent of group popularity (0 = uniform; ~1 = web-like skew).
    pub zipf_exponent: f64,
    /// Share of events (0–1) that carry usage allocations (VMT). Allocations are decided per
    /// group, not per event, because a group-hour must be all-or-nothing.
    pub allocation_share: f64,
    /// Largest quantity of one event.
    pub max_quantity: u64,
    /// Seed of the event stream.
    pub seed: u64,
    /// Seed of which groups carry allocations: shared by every producer of a run, because a
    /// group-hour's rows must be all tagged or all untagged.
    pub tagging_seed: u64,
}

/// A deterministic event stream.
#[derive(Debug)]
pub struct Workload {
    groups: Vec<Group>,
    tagged: Vec<bool>,
    zipf: Zipf<f64>,
    rng: StdRng,
    max_quantity: u64,
}

impl Workload {
    /// Groups over `licenses` (license ARN, account) × dimensions, `spec.groups` of them.
    pub fn new(spec: &WorkloadSpec, licenses: &[(String, String)]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            spec.groups > 0 && !spec.dimensions.is_empty(),
            "need at least one group and one dimension"
        );
        anyhow::ensure!(
            licenses.len() * spec.dimensions.len() >= spec.groups,
            "{} groups need {} licenses, the catalog has {}",
            spec.groups,
            spec.groups.div_ceil(spec.dimensions.len()),
            licenses.len()
        );
        let groups: Vec<Group> = (0..spec.groups)
            .map(|i| {
                let (l, a) = &licenses[i / spec.dimensions.len()];
                Group {
                    license_arn: l.clone(),
                    account: a.clone(),
                    dimension: spec.dimensions[i % spec.dimensions.len()].clone(),
                }
            })
            .collect();
        let mut tagging = StdRng::seed_from_u64(spec.tagging_seed);
        let tagged = (0..spec.groups)
            .map(|_| tagging.random_bool(spec.allocation_share.clamp(0.0, 1.0)))
            .collect();
        let rng = StdRng::seed_from_u64(spec.seed);
        Ok(Self {
            zipf: Zipf::new(spec.groups as f64, spec.zipf_exponent.max(0.0))?,
            groups,
            tagged,
            rng,
            max_quantity: spec.max_quantity.max(1),
        })
    }

    /// The groups.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The next event, stamped `at`.
    pub fn next_event(&mut self, at: DateTime<Utc>) -> (usize, Event) {
        // Zipf yields 1..=n; rank 1 is the most popular group.
        let idx = (self.zipf.sample(&mut self.rng) as usize).clamp(1, self.groups.len()) - 1;
        let g = &self.groups[idx];
        let quantity = self.rng.random_range(1..=self.max_quantity);
        let mut event = Event::new(&g.license_arn, &g.account, &g.dimension, quantity, at);
        if self.tagged[idx] {
            // Two cost centres; the split always sums to the quantity.
            let first = self.rng.random_range(0..=quantity);
            let mut allocs = vec![UsageAllocation::new(
                first,
                vec![Tag::new("costCentre", "alpha")],
            )];
            if quantity > first {
                allocs.push(UsageAllocation::new(
                    quantity - first,
                    vec![Tag::new("costCentre", "beta")],
                ));
            }
            event = event.with_allocations(allocs);
        }
        (idx, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64) -> WorkloadSpec {
        WorkloadSpec {
            groups: 50,
            dimensions: vec!["a".into(), "b".into()],
            zipf_exponent: 1.1,
            allocation_share: 0.3,
            max_quantity: 10,
            seed,
            tagging_seed: 7,
        }
    }

    fn licenses() -> Vec<(String, String)> {
        (0..25)
            .map(|i| {
                (
                    awsmp_local_stack::local::demo_license_arn(i),
                    awsmp_local_stack::local::demo_account(i),
                )
            })
            .collect()
    }

    #[test]
    fn same_seed_same_events_and_popularity_is_skewed() {
        let t = Utc::now();
        let mut a = Workload::new(&spec(3), &licenses()).unwrap();
        let mut b = Workload::new(&spec(3), &licenses()).unwrap();
        let mut counts = vec![0u32; 50];
        for _ in 0..5000 {
            let (i, e) = a.next_event(t);
            let (j, f) = b.next_event(t);
            assert_eq!(
                (i, e.quantity, e.usage_allocations.clone()),
                (j, f.quantity, f.usage_allocations.clone())
            );
            if let Some(allocs) = &e.usage_allocations {
                assert_eq!(
                    allocs
                        .iter()
                        .map(|a| a.allocated_usage_quantity)
                        .sum::<u64>(),
                    e.quantity
                );
            }
            counts[i] += 1;
        }
        assert!(
            counts[0] > 10 * counts[49].max(1),
            "rank 1 far more popular: {counts:?}"
        );
    }

    #[test]
    fn refuses_more_groups_than_the_catalog_holds() {
        let mut s = spec(1);
        s.groups = 51;
        assert!(Workload::new(&s, &licenses()).is_err());
    }
}

#[cfg(test)]
mod tagging_tests {
    use super::*;

    #[test]
    fn every_producer_agrees_on_which_groups_are_tagged() {
        let licenses: Vec<(String, String)> = (0..100)
            .map(|i| {
                (
                    awsmp_local_stack::local::demo_license_arn(i),
                    awsmp_local_stack::local::demo_account(i),
                )
            })
            .collect();
        let base = WorkloadSpec {
            groups: 300,
            dimensions: vec!["a".into(), "b".into(), "c".into()],
            zipf_exponent: 1.1,
            allocation_share: 0.2,
            max_quantity: 100,
            seed: 1,
            tagging_seed: 42,
        };
        let mut seen: std::collections::BTreeMap<usize, bool> = Default::default();
        for p in 0..4u64 {
            let mut w = Workload::new(
                &WorkloadSpec {
                    seed: 1000 + p,
                    ..base.clone()
                },
                &licenses,
            )
            .unwrap();
            for _ in 0..3000 {
                let (i, e) = w.next_event(Utc::now());
                let tagged = e.usage_allocations.is_some();
                assert_eq!(
                    *seen.entry(i).or_insert(tagged),
                    tagged,
                    "group {i} producer {p}"
                );
            }
        }
    }
}
