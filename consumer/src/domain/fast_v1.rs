//! The hot path's reader of a v1 JSON payload: a typed `serde_json` struct of `&str` fields
//! (no `serde_json::Value`, no owned string per field) and the producer's timestamp spelling
//! read without chrono's general parser.

use chrono::{DateTime, NaiveDate, Timelike, Utc};
use serde::Deserialize;

use awsmp_producer::wire::PAYLOAD_VERSION;

use super::super::accepted::EventId;
use super::super::intern::Interner;
use super::{ClientTime, Fields};

/// A v1 payload's fields, borrowed (a string with an escape does not borrow: the general path).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V1<'a> {
    v: u64,
    #[serde(rename = "eventId")]
    event_id: &'a str,
    #[serde(rename = "licenseArn")]
    license_arn: &'a str,
    #[serde(rename = "customerAWSAccountId")]
    customer_aws_account_id: &'a str,
    dimension: &'a str,
    quantity: u64,
    timestamp: &'a str,
    #[serde(rename = "producerId", default)]
    producer_id: Option<&'a str>,
    #[serde(rename = "usageAllocations", default)]
    usage_allocations: Option<serde::de::IgnoredAny>,
}

/// The spelling the producer writes (`format_timestamp`: `YYYY-MM-DDTHH:MM:SS.mmmZ`) read
/// without chrono's general RFC 3339 parser; `None` for any other spelling (and for a leap
/// second), which [`v1_timestamp`] leaves to chrono.
fn canonical_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let b: &[u8; 24] = s.as_bytes().try_into().ok()?;
    let punctuation = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
    ];
    if b[23] != b'Z' || punctuation.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    let number = |from: usize, to: usize| {
        b[from..to].iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    if second > 59 {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(number(0, 4)?).ok()?,
        number(5, 7)?,
        number(8, 10)?,
    )?;
    Some(
        date.and_hms_milli_opt(hour, minute, second, number(20, 23)?)?
            .and_utc(),
    )
}

/// RFC 3339 with a zero offset, sub-millisecond digits dropped (as the v1 decoder reads it).
fn v1_timestamp(s: &str) -> Option<DateTime<Utc>> {
    canonical_timestamp(s).or_else(|| by_chrono(s))
}

/// What chrono's RFC 3339 parser makes of `s`: a zero offset only, sub-milliseconds dropped.
fn by_chrono(s: &str) -> Option<DateTime<Utc>> {
    let parsed = DateTime::parse_from_rfc3339(s).ok()?;
    if parsed.offset().local_minus_utc() != 0 {
        return None;
    }
    let ts = parsed.with_timezone(&Utc);
    let nanos = ts.nanosecond();
    Some(ts.with_nanosecond(nanos - nanos % 1_000_000).unwrap_or(ts))
}

pub(super) fn v1_fields<'a>(data: &'a [u8], interner: &mut Interner) -> Option<Fields<'a>> {
    let p: V1<'a> = serde_json::from_slice(data).ok()?;
    if p.v != PAYLOAD_VERSION || p.usage_allocations.is_some() {
        return None;
    }
    Some(Fields {
        group: interner.group(p.license_arn, p.customer_aws_account_id, p.dimension),
        event_id: EventId::parse(p.event_id),
        quantity: p.quantity,
        time: ClientTime::Parsed(v1_timestamp(p.timestamp)?),
        producer_id: p.producer_id,
        producer: p.producer_id.map(|id| interner.producer(id)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The canonical reader agrees with chrono wherever it answers, and `v1_timestamp`
        /// everywhere: on the producer's spelling of any instant, and on near misses of it
        /// (each field's digits anything, one byte anything).
        #[test]
        fn the_canonical_reader_agrees_with_chrono(
            ms in -1_000_000_000_000i64..260_000_000_000_000,
            fields in prop::collection::vec(0u32..100, 6),
            poke in prop::option::of((0usize..24, any::<u8>())),
        ) {
            let t = DateTime::from_timestamp_millis(ms).unwrap();
            let mut spelled = awsmp_producer::wire::format_timestamp(&t);
            prop_assert_eq!(v1_timestamp(&spelled), by_chrono(&spelled));
            if spelled.len() == 24 {
                prop_assert_eq!(canonical_timestamp(&spelled), Some(t));
                let [mo, d, h, mi, s, y] = fields[..] else { unreachable!() };
                spelled = format!(
                    "{:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z",
                    1900 + y * 2, y * 7
                );
            }
            let mut bytes = spelled.into_bytes();
            if let Some((at, b)) = poke && at < bytes.len() {
                bytes[at] = b;
            }
            if let Ok(s) = String::from_utf8(bytes) {
                if let Some(fast) = canonical_timestamp(&s) {
                    prop_assert_eq!(Some(fast), by_chrono(&s), "{}", s);
                }
                prop_assert_eq!(v1_timestamp(&s), by_chrono(&s), "{}", s);
            }
        }
    }

    #[test]
    fn leap_seconds_and_other_spellings_are_chronos() {
        for s in [
            "2016-12-31T23:59:60.500Z",
            "2026-11-30T12:00:00Z",
            "2026-11-30T12:00:00.1234Z",
            "2026-11-30T12:00:00.123+00:00",
            "2026-02-29T12:00:00.123Z",
            "2024-02-29T12:00:00.123Z",
            "2026-11-30t12:00:00.123z",
        ] {
            assert_eq!(v1_timestamp(s), by_chrono(s), "{s}");
        }
        assert!(canonical_timestamp("2016-12-31T23:59:60.500Z").is_none());
        assert!(v1_timestamp("2016-12-31T23:59:60.500Z").is_some());
    }
}
