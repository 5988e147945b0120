//! The hot path's reader of a v1 JSON payload: the producer's own spelling of it read as
//! straight-line code ([`in_order`]), any other spelling through a typed `serde_json` struct
//! of `&str` fields (no `serde_json::Value`, no owned string per field), and the producer's
//! timestamp spelling read without chrono's general parser.

use chrono::{DateTime, NaiveDate, Timelike, Utc};
use serde::Deserialize;

use awsmp_contract::event_id::canonical_decimal;
use awsmp_contract::wire::PAYLOAD_VERSION;

use super::super::accepted::EventId;
use super::super::intern::Interner;
use super::{ClientTime, Fields};

/// A v1 payload's fields, borrowed (a string with an escape does not borrow: the general path).
#[derive(Deserialize, Debug, PartialEq)]
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

/// The payload as the producer spells it (`serde_json` writing `wire::json::V1`): its fields
/// in their order, no whitespace, each string without an escape or a control character, the
/// quantity in canonical decimal, the producer id present or not, no allocations. Read as
/// straight-line code — one comparison of each key with the text expected next, one scan of
/// each string for its closing quote — where `serde_json` matches every key against every
/// field and validates each string's UTF-8 on its own. `None` for any other spelling, which
/// `serde_json` reads; where it answers, it answers what `serde_json` does
/// (`tests::the_in_order_reader_answers_as_serde_json`).
fn in_order(data: &[u8]) -> Option<V1<'_>> {
    // Valid UTF-8 as a whole: then so is every string between two quotes (ASCII).
    let text = std::str::from_utf8(data).ok()?;
    let rest = text.strip_prefix(r#"{"v":1,"eventId":""#)?;
    let (event_id, rest) = string_then(rest, r#","licenseArn":""#)?;
    let (license_arn, rest) = string_then(rest, r#","customerAWSAccountId":""#)?;
    let (customer_aws_account_id, rest) = string_then(rest, r#","dimension":""#)?;
    let (dimension, rest) = string_then(rest, r#","quantity":"#)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let quantity = canonical_decimal(&rest.as_bytes()[..digits])?;
    let rest = rest[digits..].strip_prefix(r#","timestamp":""#)?;
    let (timestamp, rest) = plain_string(rest)?;
    let producer_id = match rest {
        "}" => None,
        _ => {
            let (id, rest) = plain_string(rest.strip_prefix(r#","producerId":""#)?)?;
            if rest != "}" {
                return None;
            }
            Some(id)
        }
    };
    Some(V1 {
        v: PAYLOAD_VERSION,
        event_id,
        license_arn,
        customer_aws_account_id,
        dimension,
        quantity,
        timestamp,
        producer_id,
        usage_allocations: None,
    })
}

/// The contents of a JSON string that `text` starts inside of, up to its closing quote, and
/// the text after that quote; `None` when an escape or a control character (which JSON
/// refuses unescaped) comes first.
fn plain_string(text: &str) -> Option<(&str, &str)> {
    let end = string_end(text.as_bytes())?;
    (text.as_bytes()[end] == b'"').then(|| (&text[..end], &text[end + 1..]))
}

/// Whether `b` ends a JSON string's plain run: a quote, a backslash or a control character.
fn ends_run(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The position of the first byte of `bytes` that [`ends_run`], eight bytes at a time: in
/// each 64-bit word, a lane's high bit marks a byte below 0x20 or equal to a quote or a
/// backslash. A borrow can mark a lane wrongly only above a lane marked rightly, so the
/// lowest mark is exact (`tests::the_word_scan_finds_the_first_end`).
fn string_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_lanes = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let below = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        let marks = below
            | zero_lanes(w ^ (ONES * u64::from(b'"')))
            | zero_lanes(w ^ (ONES * u64::from(b'\\')));
        if marks != 0 {
            return Some(at + marks.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let tail = chunks.remainder();
    tail.iter().position(|&b| ends_run(b)).map(|i| at + i)
}

/// [`plain_string`], then `next` after the closing quote.
fn string_then<'t>(text: &'t str, next: &str) -> Option<(&'t str, &'t str)> {
    let (value, rest) = plain_string(text)?;
    Some((value, rest.strip_prefix(next)?))
}

pub(super) fn v1_fields<'a>(data: &'a [u8], interner: &mut Interner) -> Option<Fields<'a>> {
    let p: V1<'a> = match in_order(data) {
        Some(p) => p,
        None => serde_json::from_slice(data).ok()?,
    };
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
            let mut spelled = awsmp_contract::wire::format_timestamp(&t);
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

    /// The payload the producer writes of an event of these strings (id, license ARN,
    /// account, dimension, producer id), with or without its producer id.
    fn payload(strings: &[String; 5], quantity: u64, producer: bool) -> Vec<u8> {
        let [id, arn, account, dimension, producer_id] = strings;
        let t = DateTime::from_timestamp_millis(1_796_040_000_123).unwrap();
        let mut e = awsmp_contract::Event::new(arn, account, dimension, quantity, t)
            .with_event_id(id.as_str());
        e.producer_id = producer.then(|| producer_id.clone());
        awsmp_contract::wire::encode_event(&e)
    }

    /// A change to a payload's bytes, at a position taken modulo its length.
    #[derive(Debug, Clone)]
    enum Change {
        Poke(usize, u8),
        Cut(usize),
        Insert(usize, String),
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Change::Poke(at, b)),
            any::<usize>().prop_map(Change::Cut),
            (any::<usize>(), "[ 0-9\",:{}\\\\a-z.+-]{1,2}|[\\x00-\\x1f]")
                .prop_map(|(at, s)| Change::Insert(at, s)),
        ]
    }

    impl Change {
        fn apply(&self, data: &[u8]) -> Vec<u8> {
            let mut out = data.to_vec();
            match self {
                Change::Poke(at, b) if !out.is_empty() => {
                    let at = at % out.len();
                    out[at] = *b;
                }
                Change::Cut(at) if !out.is_empty() => {
                    out.remove(at % out.len());
                }
                Change::Insert(at, s) => {
                    let at = at % (out.len() + 1);
                    out.splice(at..at, s.bytes());
                }
                _ => {}
            }
            out
        }
    }

    proptest! {
        /// Where the in-order reader answers, it answers what `serde_json` does: on the
        /// producer's payloads of arbitrary strings (quotes, backslashes, control characters,
        /// non-ASCII) and quantities, with and without a producer id; on those payloads with
        /// one byte changed, cut or added anywhere, with a raw (unescaped) event id of any
        /// bytes, and with the quantity spelled any way; and on arbitrary bytes. It answers
        /// for every payload the producer writes of strings without an escape.
        #[test]
        fn the_in_order_reader_answers_as_serde_json(
            strings in prop::array::uniform5("[a-z0-9:|]{0,12}|.{0,12}|[\"\\\\\\x00-\\x1f]{1,3}"),
            quantity in prop_oneof![0u64..1000, Just(u64::MAX), any::<u64>()],
            producer in any::<bool>(),
            change in change(),
            raw_id in "[a-z\"\\\\\\x00-\\x1f\\x7f-\\u{10ffff}]{0,4}",
            spelled_quantity in "[0-9]{1,21}|[0-9.eE+-]{1,4}",
            any_bytes in prop::collection::vec(any::<u8>(), 0..60),
        ) {
            let data = payload(&strings, quantity, producer);
            let plain = strings
                .iter()
                .all(|s| !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20));
            if plain {
                prop_assert!(in_order(&data).is_some(), "{}", String::from_utf8_lossy(&data));
            }
            let plain_strings = ["e1", "arn", "210987654321", "api", "svc"].map(String::from);
            let text = String::from_utf8(payload(&plain_strings, quantity, producer)).unwrap();
            let raw = text.replacen("\"e1\"", &format!("\"{raw_id}\""), 1);
            let respelled = text.replacen(
                &format!("\"quantity\":{quantity}"),
                &format!("\"quantity\":{spelled_quantity}"),
                1,
            );
            for bytes in [
                data.clone(),
                change.apply(&data),
                raw.into_bytes(),
                respelled.into_bytes(),
                any_bytes,
            ] {
                if let Some(read) = in_order(&bytes) {
                    let by_serde: Option<V1<'_>> = serde_json::from_slice(&bytes).ok();
                    prop_assert_eq!(Some(read), by_serde, "{:?}", String::from_utf8_lossy(&bytes));
                }
            }
        }
    }

    proptest! {
        /// The word scan finds the byte the byte-by-byte scan finds, on any bytes and on
        /// bytes where the ends are rare (every alignment, every lane, high bytes beside them).
        #[test]
        fn the_word_scan_finds_the_first_end(
            any_bytes in prop::collection::vec(any::<u8>(), 0..40),
            sparse in prop::collection::vec(
                prop_oneof![8 => 0x20u8..0xff, 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20],
                0..40,
            ),
        ) {
            for bytes in [&any_bytes, &sparse] {
                let by_byte = bytes.iter().position(|&b| ends_run(b));
                prop_assert_eq!(string_end(bytes), by_byte, "{:02x?}", bytes);
            }
        }
    }

    #[test]
    fn the_in_order_reader_leaves_other_spellings_to_serde_json() {
        let strings = ["e1", "arn", "210987654321", "api", "svc"].map(String::from);
        let data = String::from_utf8(payload(&strings, 7, true)).unwrap();
        assert!(in_order(data.as_bytes()).is_some());
        let without = String::from_utf8(payload(&strings, 7, false)).unwrap();
        assert!(in_order(without.as_bytes()).is_some());
        for other in [
            data.replace(r#""quantity":7"#, r#""quantity":07"#),
            data.replace(r#""quantity":7"#, r#""quantity":7.0"#),
            data.replace(r#""quantity":7"#, r#""quantity":-7"#),
            data.replace(r#""quantity":7"#, r#""quantity":18446744073709551616"#),
            data.replace(r#""e1""#, r#""e\u0031""#),
            data.replace(r#"{"v":1,"#, r#"{ "v":1,"#),
            data.replace('}', "} "),
            data.replace(r#","producerId":"svc""#, r#","producerId":null"#),
            format!("{data}}}"),
        ] {
            assert_eq!(in_order(other.as_bytes()), None, "{other}");
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
