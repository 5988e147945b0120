//! The v1 event payload: UTF-8 JSON with exactly the fields of docs/row-contract.md, "Event payload v1".
//!
//! Decoding is strict on purpose: an unknown version or field, a duplicate key, a fractional or
//! negative quantity and a non-UTC timestamp are all rejected with a specific reason, because
//! guessing on a money path turns into billing disputes.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{DecodeError, ValidationError};
use crate::event::{Event, Tag, UsageAllocation, truncate_to_millis};

/// The payload version this module writes.
pub const PAYLOAD_VERSION: u64 = 1;

const KNOWN_FIELDS: [&str; 9] = [
    "v",
    "eventId",
    "licenseArn",
    "customerAWSAccountId",
    "dimension",
    "quantity",
    "timestamp",
    "producerId",
    "usageAllocations",
];

#[derive(Serialize)]
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
    timestamp: String,
    #[serde(rename = "producerId", skip_serializing_if = "Option::is_none")]
    producer_id: Option<&'a str>,
    #[serde(rename = "usageAllocations", skip_serializing_if = "Option::is_none")]
    usage_allocations: Option<&'a [UsageAllocation]>,
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the timestamp form of the v1 payload.
#[inline]
pub fn format_timestamp(ts: &DateTime<Utc>) -> String {
    let (y, mo, d) = (ts.year(), ts.month(), ts.day());
    if !(0..=9999).contains(&y) {
        // Outside what validation admits; keep chrono's spelling rather than mangle it.
        return ts.to_rfc3339_opts(SecondsFormat::Millis, true);
    }
    // Hand-rolled: this runs once per event on the caller's thread, and chrono's formatter is
    // several times slower than writing the digits.
    let (h, mi, s) = (ts.hour(), ts.minute(), ts.second());
    let ms = ts.timestamp_subsec_millis().min(999);
    let mut b = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut v: u32| {
        for i in (0..width).rev() {
            b[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, y as u32);
    put(5, 2, mo);
    put(8, 2, d);
    put(11, 2, h);
    put(14, 2, mi);
    put(17, 2, s);
    put(20, 3, ms);
    String::from_utf8_lossy(&b).into_owned()
}

/// Encodes `event` as a v1 payload. The event should have passed [`Event::validate`]; the
/// producer guarantees that before it encodes.
#[inline]
pub fn encode_event(event: &Event) -> Vec<u8> {
    let v1 = V1 {
        v: PAYLOAD_VERSION,
        event_id: &event.event_id,
        license_arn: &event.license_arn,
        customer_aws_account_id: &event.customer_aws_account_id,
        dimension: &event.dimension,
        quantity: event.quantity,
        timestamp: format_timestamp(&event.timestamp),
        producer_id: event.producer_id.as_deref(),
        usage_allocations: event.usage_allocations.as_deref(),
    };
    let mut out = Vec::with_capacity(256);
    // Serializing plain strings and integers into a Vec cannot fail.
    serde_json::to_writer(&mut out, &v1).expect("v1 payload serializes");
    out
}

/// Decodes and validates one v1 payload (the data of a user record or of a plain record).
pub fn decode_event(bytes: &[u8]) -> Result<Event, DecodeError> {
    let root: J =
        serde_json::from_slice(bytes).map_err(|e| DecodeError::InvalidJson(e.to_string()))?;
    let J::Obj(fields) = root else {
        return Err(DecodeError::InvalidJson("expected a JSON object".into()));
    };
    check_duplicates(&fields).map_err(DecodeError::DuplicateField)?;

    match get(&fields, "v") {
        None => return Err(DecodeError::MissingField("v")),
        Some(J::U64(PAYLOAD_VERSION)) => {}
        Some(other) => return Err(DecodeError::UnknownVersion(other.describe())),
    }
    if let Some((k, _)) = fields
        .iter()
        .find(|(k, _)| !KNOWN_FIELDS.contains(&k.as_str()))
    {
        return Err(DecodeError::UnknownField(k.clone()));
    }

    let event_id = required_str(&fields, "eventId")?;
    let license_arn = required_str(&fields, "licenseArn")?;
    let customer_aws_account_id = required_str(&fields, "customerAWSAccountId")?;
    let dimension = required_str(&fields, "dimension")?;
    let quantity = match get(&fields, "quantity") {
        None => return Err(DecodeError::MissingField("quantity")),
        Some(J::U64(q)) => *q,
        Some(J::I64(q)) if *q >= 0 => *q as u64,
        Some(J::I64(q)) => return Err(DecodeError::NegativeQuantity(q.to_string())),
        Some(other) => return Err(DecodeError::NonIntegerQuantity(other.describe())),
    };
    let timestamp = match get(&fields, "timestamp") {
        None => return Err(DecodeError::MissingField("timestamp")),
        Some(J::Str(s)) => parse_timestamp(s)?,
        Some(other) => {
            return Err(DecodeError::MalformedTimestamp(format!(
                "expected an RFC 3339 string, got {}",
                other.describe()
            )));
        }
    };
    let producer_id = match get(&fields, "producerId") {
        None | Some(J::Null) => None,
        Some(J::Str(s)) => Some(s.clone()),
        Some(_) => {
            return Err(DecodeError::WrongFieldType {
                field: "producerId",
                expected: "a string",
            });
        }
    };
    let usage_allocations = match get(&fields, "usageAllocations") {
        None | Some(J::Null) => None,
        Some(v) => Some(parse_allocations(v)?),
    };

    let event = Event {
        event_id,
        license_arn,
        customer_aws_account_id,
        dimension,
        quantity,
        timestamp,
        producer_id,
        usage_allocations,
    };
    event.validate(false)?;
    Ok(event)
}

/// RFC 3339 with a zero UTC offset. Digits below the millisecond are dropped (they cannot move
/// the event to another second).
fn parse_timestamp(s: &str) -> Result<DateTime<Utc>, DecodeError> {
    let parsed = DateTime::parse_from_rfc3339(s)
        .map_err(|e| DecodeError::MalformedTimestamp(format!("{s:?}: {e}")))?;
    if parsed.offset().local_minus_utc() != 0 {
        return Err(DecodeError::MalformedTimestamp(format!("{s:?} is not UTC")));
    }
    Ok(truncate_to_millis(parsed.with_timezone(&Utc)))
}

fn parse_allocations(v: &J) -> Result<Vec<UsageAllocation>, DecodeError> {
    let malformed = |m: String| DecodeError::Invalid(ValidationError::MalformedAllocations(m));
    let J::Arr(items) = v else {
        return Err(malformed(format!(
            "expected an array, got {}",
            v.describe()
        )));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let J::Obj(f) = item else {
            return Err(malformed(format!("allocation {i} is not an object")));
        };
        check_duplicates(f).map_err(|k| malformed(format!("allocation {i}: duplicate {k:?}")))?;
        if let Some((k, _)) = f
            .iter()
            .find(|(k, _)| k != "AllocatedUsageQuantity" && k != "Tags")
        {
            return Err(malformed(format!("allocation {i}: unknown field {k:?}")));
        }
        let qty = match get(f, "AllocatedUsageQuantity") {
            Some(J::U64(q)) => *q,
            Some(J::I64(0)) => 0,
            Some(other) => {
                return Err(DecodeError::NegativeOrNonIntegerAllocation(
                    other.describe(),
                ));
            }
            None => {
                return Err(malformed(format!(
                    "allocation {i}: missing AllocatedUsageQuantity"
                )));
            }
        };
        let Some(J::Arr(tags_j)) = get(f, "Tags") else {
            return Err(malformed(format!("allocation {i}: Tags must be an array")));
        };
        let mut tags = Vec::with_capacity(tags_j.len());
        for t in tags_j {
            let J::Obj(tf) = t else {
                return Err(malformed(format!("allocation {i}: a tag is not an object")));
            };
            check_duplicates(tf)
                .map_err(|k| malformed(format!("allocation {i}: tag has duplicate {k:?}")))?;
            if tf.len() != 2 {
                return Err(malformed(format!(
                    "allocation {i}: a tag must have exactly Key and Value"
                )));
            }
            match (get(tf, "Key"), get(tf, "Value")) {
                (Some(J::Str(k)), Some(J::Str(v))) => tags.push(Tag::new(k.clone(), v.clone())),
                _ => {
                    return Err(malformed(format!(
                        "allocation {i}: a tag must have string Key and Value"
                    )));
                }
            }
        }
        out.push(UsageAllocation::new(qty, tags));
    }
    Ok(out)
}

fn required_str(fields: &[(String, J)], name: &'static str) -> Result<String, DecodeError> {
    match get(fields, name) {
        None => Err(DecodeError::MissingField(name)),
        Some(J::Str(s)) => Ok(s.clone()),
        Some(_) => Err(DecodeError::WrongFieldType {
            field: name,
            expected: "a string",
        }),
    }
}

fn get<'a>(fields: &'a [(String, J)], name: &str) -> Option<&'a J> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn check_duplicates(fields: &[(String, J)]) -> Result<(), String> {
    // Objects here have a handful of keys: a quadratic scan beats hashing.
    for (i, (k, _)) in fields.iter().enumerate() {
        if fields[..i].iter().any(|(p, _)| p == k) {
            return Err(k.clone());
        }
    }
    Ok(())
}

/// A JSON value that keeps object keys in order and duplicates visible (serde_json's `Value`
/// silently keeps the last duplicate) and integers apart from floats.
enum J {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn describe(&self) -> String {
        match self {
            J::Null => "null".into(),
            J::Bool(b) => b.to_string(),
            J::U64(n) => n.to_string(),
            J::I64(n) => n.to_string(),
            J::F64(n) => format!("{n:?}"),
            J::Str(s) => format!("{s:?}"),
            J::Arr(_) => "an array".into(),
            J::Obj(_) => "an object".into(),
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        d.deserialize_any(JVisitor)
    }
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<J, E> {
        Ok(J::U64(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<J, E> {
        Ok(if v >= 0 { J::U64(v as u64) } else { J::I64(v) })
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<J, E> {
        Ok(J::F64(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<J, E> {
        Ok(J::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<J, E> {
        Ok(J::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(J::Arr(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut out = Vec::with_capacity(10);
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value()?;
            out.push((k, v));
        }
        Ok(J::Obj(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn timestamps_format_like_rfc3339_millis() {
        for (secs, nanos) in [
            (0i64, 0u32),
            (1_764_505_496, 789_000_000),
            (253_402_300_799, 999_999_999),
            (951_782_400, 5_000_000),
            // A leap second as chrono represents it (nanos ≥ 1e9).
            (1_483_228_799, 1_500_000_000),
        ] {
            let ts = Utc.timestamp_opt(secs, nanos).unwrap();
            let ours = format_timestamp(&ts);
            assert_eq!(ours.len(), 24, "{ours}");
            if nanos < 1_000_000_000 {
                assert_eq!(ours, ts.to_rfc3339_opts(SecondsFormat::Millis, true));
            }
            assert_eq!(parse_timestamp(&ours).unwrap().timestamp(), ts.timestamp());
        }
    }
}
