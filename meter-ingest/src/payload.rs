//! The invocation payload a module sends (docs/meter-ingest.md, "Payload"): one event, or
//! `{"events": [...]}`. Parsing is strict — an unknown field, a fractional or negative
//! quantity, a missing `recordedAtHint` make the whole invocation malformed, and nothing of
//! it is applied.

use awsmp_contract::UsageAllocation;
use awsmp_contract::event::validate_allocations;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use awsmp_contract::event::MAX_EVENT_ID_BYTES;

/// Events of one invocation at most. Our bound: all of them go to the usage stream in one
/// `PutRecords` call, which takes at most 500 records
/// (<https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecords.html>).
pub const MAX_EVENTS_PER_INVOCATION: usize = awsmp_contract::limits::kinesis::MAX_RECORDS_PER_PUT;

/// One usage event as a module sends it. The hints are kept only to be reported: attribution
/// comes from the mapping, billing time from the receive time.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModuleEvent {
    /// The module's idempotency key (1–256 bytes).
    pub event_id: String,
    /// Which of the module's granted licenses (optional when it is granted exactly one).
    #[serde(default)]
    pub license_arn: Option<String>,
    /// The buyer account (optional; must match the chosen license's).
    #[serde(default, rename = "customerAWSAccountId")]
    pub customer_aws_account_id: Option<String>,
    /// The dimension (must be one the mapping grants).
    pub dimension: String,
    /// Units used: a non-negative integer.
    pub quantity: u64,
    /// The module's clock (RFC 3339): checked against the receive time, never billed.
    pub recorded_at_hint: DateTime<Utc>,
    /// The module's idea of its app: never used.
    #[serde(default)]
    pub app_id_hint: Option<String>,
    /// The module's idea of itself: never used.
    #[serde(default)]
    pub module_id_hint: Option<String>,
    /// Optional vendor-metered-tagging breakdown (sums to `quantity`).
    #[serde(default)]
    pub usage_allocations: Option<Vec<UsageAllocation>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    events: Vec<serde_json::Value>,
}

/// Why a payload is malformed (the on-failure destination's `errorMessage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// The events of `payload`, with each event's raw JSON (kept with a held event), or why the
/// payload is malformed.
pub fn parse_payload(
    payload: &serde_json::Value,
) -> Result<Vec<(ModuleEvent, serde_json::Value)>, Malformed> {
    let raw: Vec<serde_json::Value> = match payload {
        serde_json::Value::Object(m) if m.contains_key("events") => {
            serde_json::from_value::<Batch>(payload.clone())
                .map_err(|e| Malformed(format!("batch: {e}")))?
                .events
        }
        serde_json::Value::Object(_) => vec![payload.clone()],
        other => {
            return Err(Malformed(format!(
                "expected an event object or {{\"events\": [...]}}, got {}",
                kind(other)
            )));
        }
    };
    if raw.len() > MAX_EVENTS_PER_INVOCATION {
        return Err(Malformed(format!(
            "{} events, more than {MAX_EVENTS_PER_INVOCATION}",
            raw.len()
        )));
    }
    raw.into_iter()
        .enumerate()
        .map(|(i, v)| {
            parse_event(&v)
                .map(|e| (e, v))
                .map_err(|m| Malformed(format!("event {i}: {}", m.0)))
        })
        .collect()
}

fn parse_event(v: &serde_json::Value) -> Result<ModuleEvent, Malformed> {
    let e: ModuleEvent = serde_json::from_value(v.clone()).map_err(|e| Malformed(e.to_string()))?;
    if e.event_id.is_empty() || e.event_id.len() > MAX_EVENT_ID_BYTES {
        return Err(Malformed(format!(
            "eventId must be 1-{MAX_EVENT_ID_BYTES} bytes"
        )));
    }
    if e.dimension.is_empty() {
        return Err(Malformed("empty dimension".into()));
    }
    if let Some(a) = &e.usage_allocations {
        validate_allocations(a, e.quantity).map_err(|err| Malformed(err.to_string()))?;
    }
    Ok(e)
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event() -> serde_json::Value {
        json!({"eventId":"e-1","dimension":"requests","quantity":3,
               "recordedAtHint":"2026-12-01T10:00:00Z","appIdHint":"app","moduleIdHint":"m"})
    }

    #[test]
    fn one_event_or_a_batch_parses() {
        assert_eq!(parse_payload(&event()).unwrap().len(), 1);
        let batch = json!({"events":[event(), event()]});
        let got = parse_payload(&batch).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0.quantity, 3);
        assert_eq!(got[0].0.app_id_hint.as_deref(), Some("app"));
    }

    #[test]
    fn every_malformed_shape_is_refused() {
        let mut cases = vec![
            json!("x"),
            json!([event()]),
            json!(null),
            json!({"events":"x"}),
        ];
        for (k, v) in [
            ("quantity", json!(-1)),
            ("quantity", json!(1.5)),
            ("quantity", json!("3")),
            ("recordedAtHint", json!("yesterday")),
            ("eventId", json!("")),
            ("eventId", json!("x".repeat(257))),
            ("dimension", json!("")),
            ("unexpected", json!(1)),
            (
                "usageAllocations",
                json!([{"AllocatedUsageQuantity":2,"Tags":[{"Key":"k","Value":"v"}]}]),
            ),
        ] {
            let mut e = event();
            e[k] = v;
            cases.push(e);
        }
        let mut missing = event();
        missing.as_object_mut().unwrap().remove("recordedAtHint");
        cases.push(missing);
        cases.push(json!({"events": vec![event(); MAX_EVENTS_PER_INVOCATION + 1]}));
        for c in cases {
            assert!(parse_payload(&c).is_err(), "{c}");
        }
    }
}
