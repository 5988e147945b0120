//! The per-event checks of meter-ingest, pure (docs/meter-ingest.md, "Checks"): attribution
//! from the mapping entry, timestamp authority, anomaly bounds and rate limits, the dedup key,
//! and the event as it goes onto the usage stream.

use awsmp_contract::Event;
use awsmp_contract::reasons;
use awsmp_contract::wire::encode_event;
use awsmp_producer::partition::partition_key;
use awsmp_producer::sink::PutEntry;
use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use md5::{Digest, Md5};

use super::mapping::{LicenseGrant, MappingEntry};
use super::payload::ModuleEvent;
use awsmp_consumer::domain::verify::Refusal;

/// Prefix of the stream event id of an event that came through meter-ingest.
pub const STREAM_EVENT_ID_PREFIX: &str = "mi:";
/// Prefix of an ingest dedup claim in the dedup table.
pub const DEDUP_KEY_PREFIX: &str = "ing:";
/// Prefix of an invocation's "first seen" record (its receive time) in the dedup table.
pub const REQUEST_KEY_PREFIX: &str = "ingreq:";
/// Prefix of a per-module, per-second rate counter in the dedup table.
pub const RATE_KEY_PREFIX: &str = "rate:";

/// MD5 of the module's ARN and its event id, hex: distinct modules' ids never meet.
fn module_event_digest(invoked_arn: &str, event_id: &str) -> String {
    let mut h = Md5::new();
    h.update(invoked_arn.as_bytes());
    // A separator no ARN contains: ("a:b", "c") and ("a", "b:c") differ.
    h.update([0u8]);
    h.update(event_id.as_bytes());
    hex::encode(h.finalize())
}

/// The event id the consumer sees (`mi:{md5(arn, eventId)}`): a caller-supplied id, claimed
/// once in the consumer's dedup table, so even a second copy on the stream is applied once.
pub fn stream_event_id(invoked_arn: &str, event_id: &str) -> String {
    format!(
        "{STREAM_EVENT_ID_PREFIX}{}",
        module_event_digest(invoked_arn, event_id)
    )
}

/// The ingest dedup claim's key of a module's event.
pub fn dedup_key(invoked_arn: &str, event_id: &str) -> String {
    format!(
        "{DEDUP_KEY_PREFIX}{}",
        module_event_digest(invoked_arn, event_id)
    )
}

/// The "first seen" key of an invocation: MD5 of the invoked ARN and the request id, which a
/// Lambda async retry keeps.
pub fn request_key(invoked_arn: &str, request_id: &str) -> String {
    format!(
        "{REQUEST_KEY_PREFIX}{}",
        module_event_digest(invoked_arn, request_id)
    )
}

/// The held-events key of a module's event: a replay of it overwrites the same item.
pub fn held_key(invoked_arn: &str, event_id: &str) -> String {
    module_event_digest(invoked_arn, event_id)
}

/// The rate counter's key of a module's second.
pub fn rate_key(invoked_arn: &str, second: i64) -> String {
    let mut h = Md5::new();
    h.update(invoked_arn.as_bytes());
    format!("{RATE_KEY_PREFIX}{}:{second}", hex::encode(h.finalize()))
}

fn refuse(reason: &'static str, detail: String) -> Refusal {
    Refusal { reason, detail }
}

/// The grant an event bills: the license it names (it must be granted, with the same buyer
/// account), or the entry's only license when it names none.
pub fn attribute<'m>(
    entry: &'m MappingEntry,
    ev: &ModuleEvent,
) -> Result<&'m LicenseGrant, Refusal> {
    let account_matches = |g: &LicenseGrant| {
        ev.customer_aws_account_id
            .as_ref()
            .is_none_or(|a| *a == g.customer_aws_account_id)
    };
    let grant = match &ev.license_arn {
        Some(l) => entry.licenses.iter().find(|g| g.license_arn == *l),
        None => {
            let candidates: Vec<_> = entry
                .licenses
                .iter()
                .filter(|g| account_matches(g))
                .collect();
            if candidates.len() > 1 {
                return Err(refuse(
                    reasons::UNAUTHORIZED_LICENSE,
                    format!(
                        "the module is granted {} licenses; the event must name one",
                        candidates.len()
                    ),
                ));
            }
            candidates.first().copied()
        }
    };
    match grant {
        Some(g) if account_matches(g) => Ok(g),
        _ => Err(refuse(
            reasons::UNAUTHORIZED_LICENSE,
            format!(
                "license {:?} / account {:?} is not granted to this module",
                ev.license_arn, ev.customer_aws_account_id
            ),
        )),
    }
}

/// `UnauthorizedDimension` unless the entry grants the event's dimension.
pub fn check_dimension(entry: &MappingEntry, ev: &ModuleEvent) -> Result<(), Refusal> {
    if entry.dimensions.contains(&ev.dimension)
        || crate::mutants::active(crate::mutants::Mutant::IngestSkipsDimensionGrant)
    {
        return Ok(());
    }
    Err(refuse(
        reasons::UNAUTHORIZED_DIMENSION,
        format!("dimension {:?} is not granted to this module", ev.dimension),
    ))
}

/// Timestamp authority: the hint must lie within `max_skew` of the receive time
/// (`StaleTimestamp` before it, `FutureTimestamp` after it).
pub fn check_hint(
    hint: DateTime<Utc>,
    received_at: DateTime<Utc>,
    max_skew: Duration,
) -> Result<(), Refusal> {
    let off = hint - received_at;
    if off > max_skew {
        return Err(refuse(
            reasons::FUTURE_TIMESTAMP,
            format!(
                "recordedAtHint {hint} is {}s after the receive time",
                off.num_seconds()
            ),
        ));
    }
    if -off > max_skew {
        return Err(refuse(
            reasons::STALE_TIMESTAMP,
            format!(
                "recordedAtHint {hint} is {}s before the receive time",
                (-off).num_seconds()
            ),
        ));
    }
    Ok(())
}

/// The anomaly bound: `QuantityOutOfBounds` (held) above the entry's `maxQuantity`.
pub fn check_bounds(entry: &MappingEntry, ev: &ModuleEvent) -> Result<(), Refusal> {
    if ev.quantity <= entry.max_quantity {
        return Ok(());
    }
    Err(refuse(
        reasons::QUANTITY_OUT_OF_BOUNDS,
        format!(
            "quantity {} above the module's maxQuantity {}",
            ev.quantity, entry.max_quantity
        ),
    ))
}

/// How many of `n` new events fit the rate limit when the second's counter went from
/// `total - n` to `total`.
pub fn within_rate(max_per_second: u64, total: u64, n: u64) -> u64 {
    let before = total.saturating_sub(n);
    max_per_second.saturating_sub(before).min(n)
}

/// The event as the consumer will read it: the producer's v1 payload with the stream event id,
/// the granted license and account, the receive time as its timestamp and the module's ARN as
/// its producer id.
pub fn stream_event(
    invoked_arn: &str,
    grant: &LicenseGrant,
    ev: &ModuleEvent,
    received_at: DateTime<Utc>,
) -> Event {
    Event {
        event_id: stream_event_id(invoked_arn, &ev.event_id),
        license_arn: grant.license_arn.clone(),
        customer_aws_account_id: grant.customer_aws_account_id.clone(),
        dimension: ev.dimension.clone(),
        quantity: ev.quantity,
        timestamp: received_at,
        producer_id: Some(invoked_arn.to_owned()),
        usage_allocations: ev.usage_allocations.clone(),
    }
}

/// The Kinesis record of `event`: one plain v1 payload, partitioned by its group as the
/// producer partitions it.
pub fn put_entry(event: &Event) -> PutEntry {
    PutEntry {
        data: Bytes::from(encode_event(event)),
        partition_key: partition_key(
            &event.license_arn,
            &event.customer_aws_account_id,
            &event.dimension,
        ),
        explicit_hash_key: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    const ARN: &str = "arn:aws:lambda:us-east-1:111111111111:function:f:module-a";
    const L1: &str =
        "arn:aws:license-manager::111111111111:license:l-0123456789abcdef0123456789abcdef";
    const L2: &str =
        "arn:aws:license-manager::111111111111:license:l-fedcba9876543210fedcba9876543210";

    fn grant(l: &str, a: &str) -> LicenseGrant {
        LicenseGrant {
            license_arn: l.into(),
            customer_aws_account_id: a.into(),
        }
    }

    fn entry(licenses: Vec<LicenseGrant>) -> MappingEntry {
        MappingEntry {
            invoked_arn: ARN.into(),
            environment: "prod".into(),
            app_id: None,
            licenses,
            dimensions: vec!["requests".into()],
            max_events_per_second: 10,
            max_quantity: 100,
        }
    }

    fn event(license: Option<&str>, account: Option<&str>) -> ModuleEvent {
        ModuleEvent {
            event_id: "e".into(),
            license_arn: license.map(Into::into),
            customer_aws_account_id: account.map(Into::into),
            dimension: "requests".into(),
            quantity: 5,
            recorded_at_hint: Utc::now(),
            app_id_hint: Some("someone-else".into()),
            module_id_hint: Some("module-b".into()),
            usage_allocations: None,
        }
    }

    #[test]
    fn attribution_comes_from_the_grant_never_the_hints() {
        let one = entry(vec![grant(L1, "222222222222")]);
        assert_eq!(attribute(&one, &event(None, None)).unwrap().license_arn, L1);
        assert!(attribute(&one, &event(Some(L1), Some("222222222222"))).is_ok());
        for (l, a) in [
            (Some(L2), None),
            (Some(L1), Some("333333333333")),
            (None, Some("333333333333")),
        ] {
            let r = attribute(&one, &event(l, a)).unwrap_err();
            assert_eq!(r.reason, reasons::UNAUTHORIZED_LICENSE);
        }
        let two = entry(vec![grant(L1, "222222222222"), grant(L2, "333333333333")]);
        assert_eq!(
            attribute(&two, &event(None, None)).unwrap_err().reason,
            reasons::UNAUTHORIZED_LICENSE
        );
        assert_eq!(
            attribute(&two, &event(None, Some("333333333333")))
                .unwrap()
                .license_arn,
            L2
        );
        let mut other = event(None, None);
        other.dimension = "storage".into();
        assert_eq!(
            check_dimension(&one, &other).unwrap_err().reason,
            reasons::UNAUTHORIZED_DIMENSION
        );
    }

    #[test]
    fn hints_more_than_the_skew_off_are_refused_either_way() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
        let skew = Duration::seconds(60);
        assert!(check_hint(now - Duration::seconds(60), now, skew).is_ok());
        assert!(check_hint(now + Duration::seconds(60), now, skew).is_ok());
        assert_eq!(
            check_hint(now - Duration::seconds(61), now, skew)
                .unwrap_err()
                .reason,
            reasons::STALE_TIMESTAMP
        );
        assert_eq!(
            check_hint(now + Duration::seconds(61), now, skew)
                .unwrap_err()
                .reason,
            reasons::FUTURE_TIMESTAMP
        );
    }

    #[test]
    fn bounds_and_rates() {
        let e = entry(vec![grant(L1, "222222222222")]);
        let mut big = event(None, None);
        big.quantity = 101;
        assert_eq!(
            check_bounds(&e, &big).unwrap_err().reason,
            reasons::QUANTITY_OUT_OF_BOUNDS
        );
        assert_eq!(within_rate(10, 4, 4), 4);
        assert_eq!(within_rate(10, 12, 4), 2);
        assert_eq!(within_rate(10, 20, 4), 0);
    }

    #[test]
    fn modules_ids_never_meet_and_the_stream_payload_is_the_producers() {
        let b = ARN.replace("module-a", "module-b");
        assert_ne!(stream_event_id(ARN, "e"), stream_event_id(&b, "e"));
        assert_ne!(dedup_key(ARN, "e"), dedup_key(&b, "e"));
        assert_ne!(request_key(ARN, "r"), request_key(&b, "r"));
        assert!(request_key(ARN, "r").starts_with(REQUEST_KEY_PREFIX));
        assert_ne!(request_key(ARN, "e"), dedup_key(ARN, "e"));
        assert_eq!(stream_event_id(ARN, "e"), stream_event_id(ARN, "e"));
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
        let ev = stream_event(ARN, &grant(L1, "222222222222"), &event(None, None), now);
        ev.validate(false).unwrap();
        let decoded = awsmp_contract::wire::decode_event(&put_entry(&ev).data).unwrap();
        assert_eq!(decoded, ev);
        assert_eq!(decoded.timestamp, now);
        assert_eq!(decoded.producer_id.as_deref(), Some(ARN));
    }
}
