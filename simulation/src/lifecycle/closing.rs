//! What a deprovisioned license's flush window must achieve, checked from two snapshots the
//! schedule takes as its clock passes them (docs/simulation.md, invariant 5):
//!
//! - at the flush's instant (`expiry − FLUSH_CURRENT_HOUR_LEAD_MINUTES`,
//!   `contract/src/time.rs`), the quantity produced so far for the license: from then
//!   on the flush commits the license's still open hour, and AWS keeps one record per hour
//!   (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_BatchMeterUsage.html>),
//!   so usage arriving later may end `LateUsage` — only up to what was produced after it;
//! - at the window's close (`expiry`), the license's group-hours in the Marketplace ledger:
//!   AWS takes no usage of the license after it
//!   (<https://docs.aws.amazon.com/marketplace/latest/userguide/saas-eventbridge-integration.html>,
//!   "a 1-hour final reporting window"), so the usage from before the deprovisioning must be
//!   billed by then, whenever the pipeline later bills it in the simulated ledger.

use crate::world::{World, lock};
use awsmp_contract::attrs as a;
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::{GroupKey, HourBucket, parse_usage_timestamp};
use awsmp_contract::status::AggregatedStatus;
use awsmp_contract::time::FLUSH_CURRENT_HOUR_LEAD_MINUTES;
use awsmp_lifecycle::domain::event::LicenseKey;
use awsmp_lifecycle::domain::state::DEPROVISIONING_WINDOW;
use awsmp_loadtest::conservation::{self, Inputs};
use chrono::{DateTime, Duration, Utc};
use std::collections::{BTreeMap, BTreeSet};

/// A group (license, account, dimension) as the ground truth counts it.
type Group = (String, String, String);

/// The fault-free drain must have begun this long before the window closes for the usage
/// from before the deprovisioning to be held billed: two of its 10-minute rounds, one of them
/// after the flush's instant plus the settle margin (`simulation/src/schedule.rs`, `drain`).
/// Before that, an injected fault fails a whole run, so a fault-heavy window is an outage of
/// the flush, not a race: counted, not a violation.
pub const DRAIN_LEAD: Duration = Duration::minutes(21);

/// The snapshots of one schedule's deprovisioned licenses.
#[derive(Debug, Default)]
pub struct Closing {
    /// Per license: what was produced of each of its groups at the flush's instant.
    produced_at_flush: BTreeMap<LicenseKey, BTreeMap<Group, u64>>,
    /// Per license: its group-hours in the ledger when the window closed.
    billed_at_close: BTreeMap<LicenseKey, BTreeSet<GroupKey>>,
}

/// The flush's instant for a license deprovisioned at `t`.
fn flush_instant(t: DateTime<Utc>) -> DateTime<Utc> {
    t + DEPROVISIONING_WINDOW - Duration::minutes(FLUSH_CURRENT_HOUR_LEAD_MINUTES)
}

impl World {
    /// Take each snapshot once the clock has reached its instant (run before any stage at
    /// every active step and drain round, so nothing ran between the instant and it).
    pub(super) fn observe_windows(&self) {
        let now = self.clock.now();
        let lc = &self.lifecycle;
        let deprovisioned = lock(&lc.deprovisioned).clone();
        let mut closing = lock(&lc.closing);
        for (key, t) in deprovisioned {
            if now >= flush_instant(t) && !closing.produced_at_flush.contains_key(&key) {
                let produced = lock(&self.truth)
                    .produced
                    .iter()
                    .filter(|(g, _)| g.0 == key.license_arn)
                    .map(|(g, q)| (g.clone(), *q))
                    .collect();
                closing.produced_at_flush.insert(key.clone(), produced);
            }
            if now >= t + DEPROVISIONING_WINDOW && !closing.billed_at_close.contains_key(&key) {
                let billed = self
                    .ledger
                    .ledger()
                    .into_iter()
                    .map(|b| b.group)
                    .filter(|g| g.license_arn == key.license_arn)
                    .collect();
                closing.billed_at_close.insert(key, billed);
            }
        }
    }

    /// Rows of `key`'s usage stamped before `t` that were not billed when its window closed:
    /// not `Aggregated`, or their group-hour not in the ledger by then.
    fn unbilled_at_close(&self, key: &LicenseKey, t: DateTime<Utc>) -> usize {
        let closing = lock(&self.lifecycle.closing);
        let empty = BTreeSet::new();
        let billed = closing.billed_at_close.get(key).unwrap_or(&empty);
        let text = |r: &awsmp_contract::row::RawUsageRow, k: &str| {
            r.get(k).and_then(|v| v.as_s()).map(str::to_owned)
        };
        let faulted = self.faults.attempt_faults();
        let edge = lock(&self.truth).edge_hours.clone();
        let expired: BTreeSet<GroupKey> = self
            .aggregated
            .items()
            .into_iter()
            .filter(|i| match i.status {
                Some(AggregatedStatus::SubmissionExpired) => {
                    crate::causes::expiry_cause(self, &i.group).is_some()
                }
                // Unresolved at the window's close because a fault hit its attempt.
                Some(AggregatedStatus::NeedsReconciliation) => {
                    crate::causes::attempt_cause(&faulted, &i.group).is_some()
                }
                _ => false,
            })
            .map(|i| i.group)
            .collect();
        let window_exit = |r: &awsmp_contract::row::RawUsageRow, group: &GroupKey| {
            let status = text(r, a::METERING_STATUS);
            let reason = text(r, a::METERING_STATUS_REASON).unwrap_or_default();
            status.as_deref() == Some("AggregationExpired")
                || (status.as_deref() == Some("RejectedClientSide")
                    && reason.contains("TimestampOutOfWindow"))
                || (status.as_deref() == Some("Aggregated") && expired.contains(group))
        };
        self.usage
            .rows()
            .iter()
            .filter(|r| text(r, a::LICENSE_ARN).as_deref() == Some(&key.license_arn))
            .filter_map(|r| {
                let at = parse_usage_timestamp(&text(r, a::TIMESTAMP)?).ok()?;
                (at < t).then_some((r, at))
            })
            .filter(|(r, at)| {
                let group = GroupKey::new(
                    &key.license_arn,
                    &key.customer_aws_account_id,
                    text(r, a::DIMENSION).unwrap_or_default(),
                    HourBucket::containing(*at),
                );
                let unbilled = text(r, a::METERING_STATUS).as_deref() != Some("Aggregated")
                    || !billed.contains(&group);
                // A caused window exit (`simulation/src/causes.rs`): an hour whose window
                // closed under faults with a failure on the group's path, or an edge input,
                // ends expired with its reason, for a deprovisioned license as for any other.
                // An edge hour holds only the race backlog, injected late arrivals whose
                // `LateUsage` conservation allows up to their quantity.
                let caused = (window_exit(r, &group)
                    && crate::causes::window_cause(self, &group).is_some())
                    || edge.contains(&group.hour);
                if unbilled && !caused {
                    self.log(format!(
                        "lifecycle: row {} ({:?} {:?}) unbilled at its license's close",
                        text(r, a::USAGE_SORT_KEY).unwrap_or_default(),
                        text(r, a::METERING_STATUS),
                        text(r, a::METERING_STATUS_REASON)
                    ));
                }
                unbilled && !caused
            })
            .count()
    }

    /// The end-state check of every deprovisioned license: its usage from before the
    /// deprovisioning was billed by the window's close ([`DRAIN_LEAD`]).
    pub(super) fn billed_by_close(&self, out: &mut Vec<String>) {
        let drained_from = *lock(&self.lifecycle.drain_started);
        for (key, t) in lock(&self.lifecycle.deprovisioned).clone() {
            let unbilled = self.unbilled_at_close(&key, t);
            if unbilled == 0 {
                continue;
            }
            let closes = t + DEPROVISIONING_WINDOW;
            match drained_from {
                Some(d) if d + DRAIN_LEAD <= closes => out.push(format!(
                    "{} deprovisioned at {t}: {unbilled} rows of its usage before then unbilled when its window closed at {closes}, though the fault-free drain ran from {d}",
                    key.license_arn
                )),
                _ => {
                    self.faults.count("unbilled-at-close-under-faults");
                    self.log(format!(
                        "lifecycle: {} closed with {unbilled} rows from before {t} unbilled (faults throughout its window)",
                        key.license_arn
                    ));
                }
            }
        }
    }
}

/// A deprovisioned license's usage may end `LateUsage` (consumer or pipeline) up to what was
/// produced of each of its groups after the flush's instant: the flush has committed the
/// hour, and AWS keeps one record per hour. Run after the injected late arrivals' allowance.
pub fn allow_late_after_flush(w: &World, inp: &mut Inputs) {
    let closing = lock(&w.lifecycle.closing);
    let truth = lock(&w.truth);
    let mut budget: BTreeMap<Group, u64> = BTreeMap::new();
    for key in lock(&w.lifecycle.deprovisioned).keys() {
        let before = closing.produced_at_flush.get(key);
        for (g, q) in truth
            .produced
            .iter()
            .filter(|(g, _)| g.0 == key.license_arn)
        {
            let earlier = before.and_then(|b| b.get(g)).copied().unwrap_or(0);
            budget.insert(g.clone(), q.saturating_sub(earlier));
        }
    }
    for ((group, reason), q) in conservation::unbilled(inp) {
        if !reason.ends_with("LateUsage") {
            continue;
        }
        let Some(left) = budget.get_mut(&group) else {
            continue;
        };
        let key = (group, reason);
        let already = inp.injected.get(&key).copied().unwrap_or(0);
        let allowed = q.saturating_sub(already).min(*left);
        *left -= allowed;
        if allowed > 0 {
            *inp.injected.entry(key).or_default() += allowed;
        }
    }
}
