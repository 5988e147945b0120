//! Verification of a decoded event: timestamp authority (docs/guarantees.md, "Billing time"),
//! producer allowlist and quantity
//! bounds. The result, a [`VerifiedEvent`], carries the *billing* second.

use std::collections::{BTreeMap, HashSet};

use awsmp_contract::Event;
use awsmp_contract::keys::HourBucket;
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::reasons;
use awsmp_contract::row::Tag;
use awsmp_contract::time::{TimeConfig, is_billable};
use chrono::{DateTime, Duration, Utc};

/// Default `AWSMP_MAX_CLOCK_SKEW_SECONDS`: under [`TimestampPolicy::Server`] and
/// [`TimestampPolicy::TrustedClient`], events more than 60 seconds off the receive time are
/// refused (docs/guarantees.md, "Billing time").
pub const DEFAULT_MAX_CLOCK_SKEW_SECONDS: i64 = 60;

/// Whose clock decides the billing second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampPolicy {
    /// The trusted producer → Kinesis path (the default): the stream's arrival time
    /// (`approximateArrivalTimestamp`) is the billing time, whatever the client clock says. An
    /// event the producer's buffers, retries or the stream delayed is billed at the second it
    /// arrived, never refused as stale; the client's skew is reported as
    /// [`awsmp_contract::metrics::CLIENT_CLOCK_SKEW`].
    Arrival,
    /// An untrusted ingest path: the arrival time is the billing time and the client time must
    /// lie within the allowed skew of it (`StaleTimestamp`, `FutureTimestamp` otherwise).
    Server,
    /// Trusted producers: the client time is the billing time, but never more than the skew in
    /// the future and never outside the billable window at arrival.
    TrustedClient,
}

impl std::str::FromStr for TimestampPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "arrival" => Ok(Self::Arrival),
            "server" => Ok(Self::Server),
            "trusted-client" => Ok(Self::TrustedClient),
            other => Err(format!(
                "timestamp policy {other:?} is none of arrival, server, trusted-client"
            )),
        }
    }
}

/// How events are verified.
#[derive(Debug, Clone)]
pub struct VerifyPolicy {
    /// Timestamp authority.
    pub timestamp: TimestampPolicy,
    /// Largest accepted distance between client and arrival time.
    pub max_clock_skew: Duration,
    /// When set, only these producer ids are accepted.
    pub allowed_producers: Option<HashSet<String>>,
    /// Billable window (trusted-client policy bound).
    pub time: TimeConfig,
}

impl Default for VerifyPolicy {
    fn default() -> Self {
        Self {
            timestamp: TimestampPolicy::Arrival,
            max_clock_skew: Duration::seconds(DEFAULT_MAX_CLOCK_SKEW_SECONDS),
            allowed_producers: None,
            time: TimeConfig::default(),
        }
    }
}

/// Whether an event carries VMT allocations that count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Non-zero quantity with allocations.
    Allocated,
    /// Non-zero quantity without allocations.
    Unallocated,
}

impl Kind {
    /// The kind of an event of `quantity`, with or without allocations; `None` for zero.
    pub fn of(quantity: u64, allocated: bool) -> Option<Self> {
        match (quantity, allocated) {
            (0, _) => None,
            (_, true) => Some(Self::Allocated),
            (_, false) => Some(Self::Unallocated),
        }
    }
}

/// An event that passed every check, reduced to what its row needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedEvent {
    /// License ARN (the row's partition key).
    pub license_arn: String,
    /// Buyer account id.
    pub customer_aws_account_id: String,
    /// Dimension.
    pub dimension: String,
    /// The billing second, as epoch seconds.
    pub second: i64,
    /// Quantity (≤ the BatchMeterUsage maximum).
    pub quantity: u64,
    /// Allocations merged by tag set (tags sorted), zero entries dropped; `None` when the event
    /// has none or its quantity is 0 (zero usage carries no allocation that could bill).
    pub allocations: Option<BTreeMap<Vec<Tag>, u64>>,
    /// The event id.
    pub event_id: String,
    /// The producer id, if any.
    pub producer_id: Option<String>,
}

impl VerifiedEvent {
    /// Allocated, unallocated, or `None` for zero quantity.
    pub fn kind(&self) -> Option<Kind> {
        Kind::of(self.quantity, self.allocations.is_some())
    }
}

/// A verification failure: reason code and detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable reason code (see [`awsmp_contract::reasons`]).
    pub reason: &'static str,
    /// Human-readable detail.
    pub detail: String,
}

fn refuse(reason: &'static str, detail: String) -> Refusal {
    Refusal { reason, detail }
}

/// Verify `event`, which arrived on the stream at `arrival`.
pub fn verify(
    event: Event,
    arrival: DateTime<Utc>,
    policy: &VerifyPolicy,
) -> Result<VerifiedEvent, Refusal> {
    let billing = billing_time(&event, arrival, policy)?;
    Ok(verified(event, billing))
}

/// Every check of [`verify`] on a borrowed event; the billing instant when it passes.
pub fn billing_time(
    event: &Event,
    arrival: DateTime<Utc>,
    policy: &VerifyPolicy,
) -> Result<DateTime<Utc>, Refusal> {
    billing_time_of(
        event.producer_id.as_deref(),
        event.quantity,
        event.timestamp,
        arrival,
        policy,
    )
}

/// [`billing_time`] of an event given by the fields it checks: producer id, quantity, client
/// time.
pub fn billing_time_of(
    producer_id: Option<&str>,
    quantity: u64,
    timestamp: DateTime<Utc>,
    arrival: DateTime<Utc>,
    policy: &VerifyPolicy,
) -> Result<DateTime<Utc>, Refusal> {
    if let Some(allowed) = &policy.allowed_producers
        && !producer_id.is_some_and(|p| allowed.contains(p))
    {
        return Err(refuse(
            reasons::UNKNOWN_PRODUCER,
            format!("producer {producer_id:?} is not on the allowlist"),
        ));
    }
    if quantity > MAX_USAGE_QUANTITY {
        return Err(refuse(
            reasons::QUANTITY_OVERFLOW,
            format!("quantity {quantity} exceeds the BatchMeterUsage maximum {MAX_USAGE_QUANTITY}"),
        ));
    }
    let offset = timestamp - arrival;
    if policy.timestamp == TimestampPolicy::Arrival {
        return Ok(arrival);
    }
    if offset > policy.max_clock_skew {
        return Err(refuse(
            reasons::FUTURE_TIMESTAMP,
            format!(
                "client time {} is {} ms after arrival {}",
                timestamp,
                offset.num_milliseconds(),
                arrival
            ),
        ));
    }
    match policy.timestamp {
        TimestampPolicy::Arrival => Ok(arrival),
        TimestampPolicy::Server => {
            if -offset > policy.max_clock_skew {
                return Err(refuse(
                    reasons::STALE_TIMESTAMP,
                    format!(
                        "client time {} is {} ms before arrival {}",
                        timestamp,
                        (-offset).num_milliseconds(),
                        arrival
                    ),
                ));
            }
            Ok(arrival)
        }
        TimestampPolicy::TrustedClient => {
            let hour = HourBucket::containing(timestamp);
            if !is_billable(hour, arrival, &policy.time) {
                return Err(refuse(
                    reasons::TIMESTAMP_OUT_OF_WINDOW,
                    format!("client hour {hour} is outside the billable window at {arrival}"),
                ));
            }
            Ok(timestamp)
        }
    }
}

/// How far the client's clock is ahead of the arrival time (negative: behind).
pub fn client_skew(event: &Event, arrival: DateTime<Utc>) -> Duration {
    event.timestamp - arrival
}

/// The verified form of an event that passed [`billing_time`] with `billing`.
pub fn verified(event: Event, billing: DateTime<Utc>) -> VerifiedEvent {
    let allocations = match event.usage_allocations {
        Some(allocs) if event.quantity > 0 => {
            let mut merged: BTreeMap<Vec<Tag>, u64> = BTreeMap::new();
            for a in allocs {
                if a.allocated_usage_quantity == 0 {
                    continue;
                }
                let mut tags: Vec<Tag> = a.tags;
                tags.sort_unstable();
                // The producer checked the allocations sum to the quantity (≤ 2^31), so no overflow.
                *merged.entry(tags).or_default() += a.allocated_usage_quantity;
            }
            Some(merged)
        }
        _ => None,
    };
    VerifiedEvent {
        license_arn: event.license_arn,
        customer_aws_account_id: event.customer_aws_account_id,
        dimension: event.dimension,
        second: billing.timestamp(),
        quantity: event.quantity,
        allocations,
        event_id: event.event_id,
        producer_id: event.producer_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_producer::{Tag as PTag, UsageAllocation};
    use chrono::TimeZone;

    const ARN: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    fn at(s: u32, ms: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, s).unwrap() + Duration::milliseconds(ms)
    }

    fn ev(ts: DateTime<Utc>) -> Event {
        Event::new(ARN, "210987654321", "api", 5, ts)
            .with_event_id("e1")
            .with_producer_id("p1")
    }

    #[test]
    fn server_time_is_the_billing_second() {
        let arrival = at(10, 999);
        let v = verify(ev(at(0, 0)), arrival, &VerifyPolicy::default()).unwrap();
        assert_eq!(v.second, at(10, 0).timestamp());
    }

    #[test]
    fn server_policy_rejects_skew_beyond_the_bound_both_ways() {
        let arrival = at(30, 0);
        let p = VerifyPolicy {
            timestamp: TimestampPolicy::Server,
            ..VerifyPolicy::default()
        };
        let stale = ev(arrival - Duration::milliseconds(60_001));
        assert_eq!(
            verify(stale, arrival, &p).unwrap_err().reason,
            reasons::STALE_TIMESTAMP
        );
        let future = ev(arrival + Duration::milliseconds(60_001));
        assert_eq!(
            verify(future, arrival, &p).unwrap_err().reason,
            reasons::FUTURE_TIMESTAMP
        );
        assert!(verify(ev(arrival - Duration::seconds(60)), arrival, &p).is_ok());
        assert!(verify(ev(arrival + Duration::seconds(60)), arrival, &p).is_ok());
    }

    #[test]
    fn a_delayed_event_is_billed_at_its_arrival_second() {
        // GIVEN an event the producer's buffers and the stream held for ten minutes
        let arrival = at(30, 250);
        let delayed = ev(arrival - Duration::minutes(10));
        // WHEN the Kinesis consumer verifies it under its default policy
        let v = verify(delayed, arrival, &VerifyPolicy::default()).unwrap();
        // THEN it is billed at the second it reached the stream, not rejected as stale
        assert_eq!(v.second, at(30, 0).timestamp());
        // AND a client clock running ahead is billed at arrival too (skew is a metric)
        let ahead = verify(
            ev(arrival + Duration::minutes(10)),
            arrival,
            &VerifyPolicy::default(),
        );
        assert_eq!(ahead.unwrap().second, at(30, 0).timestamp());
    }

    #[test]
    fn trusted_client_keeps_client_time_inside_the_window() {
        let p = VerifyPolicy {
            timestamp: TimestampPolicy::TrustedClient,
            ..VerifyPolicy::default()
        };
        let arrival = at(0, 0);
        let two_hours_ago = arrival - Duration::hours(2);
        let v = verify(ev(two_hours_ago), arrival, &p).unwrap();
        assert_eq!(v.second, two_hours_ago.timestamp());
        let two_days_ago = arrival - Duration::days(2);
        assert_eq!(
            verify(ev(two_days_ago), arrival, &p).unwrap_err().reason,
            reasons::TIMESTAMP_OUT_OF_WINDOW
        );
        assert_eq!(
            verify(ev(arrival + Duration::minutes(5)), arrival, &p)
                .unwrap_err()
                .reason,
            reasons::FUTURE_TIMESTAMP
        );
    }

    #[test]
    fn allowlist_and_quantity_bound() {
        let arrival = at(0, 0);
        let p = VerifyPolicy {
            allowed_producers: Some(HashSet::from(["p2".to_owned()])),
            ..VerifyPolicy::default()
        };
        assert_eq!(
            verify(ev(arrival), arrival, &p).unwrap_err().reason,
            reasons::UNKNOWN_PRODUCER
        );
        let mut anonymous = ev(arrival);
        anonymous.producer_id = None;
        assert_eq!(
            verify(anonymous, arrival, &p).unwrap_err().reason,
            reasons::UNKNOWN_PRODUCER
        );
        let mut big = ev(arrival);
        big.quantity = MAX_USAGE_QUANTITY + 1;
        assert_eq!(
            verify(big, arrival, &VerifyPolicy::default())
                .unwrap_err()
                .reason,
            reasons::QUANTITY_OVERFLOW
        );
    }

    #[test]
    fn allocations_are_merged_sorted_and_zero_dropped() {
        let arrival = at(0, 0);
        let e = ev(arrival).with_allocations(vec![
            UsageAllocation::new(2, vec![PTag::new("b", "1"), PTag::new("a", "1")]),
            UsageAllocation::new(3, vec![PTag::new("a", "1"), PTag::new("b", "1")]),
            UsageAllocation::new(0, vec![PTag::new("z", "z")]),
        ]);
        let v = verify(e, arrival, &VerifyPolicy::default()).unwrap();
        let allocs = v.allocations.clone().unwrap();
        assert_eq!(allocs.len(), 1);
        assert_eq!(
            allocs[&vec![Tag::new("a", "1"), Tag::new("b", "1")]],
            5,
            "same tag set in two orders is one allocation"
        );
        assert_eq!(v.kind(), Some(Kind::Allocated));
        let mut zero =
            ev(arrival).with_allocations(vec![UsageAllocation::new(0, vec![PTag::new("a", "1")])]);
        zero.quantity = 0;
        let v = verify(zero, arrival, &VerifyPolicy::default()).unwrap();
        assert_eq!((v.kind(), v.allocations), (None, None));
    }
}
