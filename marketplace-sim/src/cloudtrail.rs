//! The simulator's CloudTrail: every `BatchMeterUsage` call it serves becomes the event AWS
//! would log (the shape of <https://docs.aws.amazon.com/marketplace/latest/userguide/cloudtrail-logging.html>:
//! camelCase `requestParameters` and `responseElements`, record timestamps as
//! `Apr 19, 2018 4:32:50 PM`, `errorCode`/`errorMessage` and no response for a failed call),
//! served by `LookupEvents` in CloudTrail's JSON 1.1 protocol
//! (<https://docs.aws.amazon.com/awscloudtrail/latest/APIReference/API_LookupEvents.html>) once
//! a configurable delivery lag has passed. Pure: times and ids are passed in.

use std::time::Instant;

use chrono::{DateTime, Duration, SecondsFormat, SubsecRound, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::engine::Reply;
use super::faults::TokenBucket;

/// `X-Amz-Target` prefix of CloudTrail's API, as the AWS SDKs send it.
pub const TARGET_PREFIX: &str = "CloudTrail_20131101.";
/// The fully qualified form of the same prefix, as the API reference spells it.
pub const QUALIFIED_TARGET_PREFIX: &str = "com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101.";

/// The CloudTrail operation an `X-Amz-Target` names, if it names one.
pub fn operation(target: &str) -> Option<&str> {
    target
        .strip_prefix(QUALIFIED_TARGET_PREFIX)
        .or_else(|| target.strip_prefix(TARGET_PREFIX))
}
/// The Marketplace Metering event source.
pub const EVENT_SOURCE: &str = "metering-marketplace.amazonaws.com";
/// Most events `LookupEvents` returns in one page (the API reference's `MaxResults` range).
pub const MAX_RESULTS: usize = 50;
/// `LookupEvents` requests per second per account and region
/// (<https://docs.aws.amazon.com/awscloudtrail/latest/userguide/WhatIsCloudTrail-Limits.html>).
pub const LOOKUP_EVENTS_PER_SECOND: u32 = 2;
/// The account the simulated seller calls from.
const SELLER_ACCOUNT: &str = "123456789012";

/// One logged event.
#[derive(Debug, Clone, PartialEq)]
struct LoggedEvent {
    id: String,
    time: DateTime<Utc>,
    name: String,
    read_only: bool,
    json: String,
}

/// Delivery settings (`GET`/`POST /_sim/cloudtrail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrailSettings {
    /// Seconds between a call and its event becoming visible to `LookupEvents`.
    pub lag_seconds: u32,
}

/// The event log and its `LookupEvents` endpoint.
#[derive(Debug)]
pub struct CloudTrailLog {
    events: Vec<LoggedEvent>,
    settings: TrailSettings,
    bucket: TokenBucket,
}

/// The camelCase CloudTrail spelling of a `UsageRecord` key (CloudTrail writes
/// `customerAWSAccountID`).
fn camel(key: &str) -> String {
    match key {
        "CustomerAWSAccountId" => "customerAWSAccountID".into(),
        k => {
            let mut chars = k.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_ascii_lowercase().to_string() + chars.as_str()
            })
        }
    }
}

/// A request or response value rewritten as CloudTrail logs it: camelCase keys, epoch-second
/// `Timestamp`s as `Apr 19, 2018 4:32:50 PM`.
fn logged(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let v = match (k.as_str(), v) {
                    ("Timestamp", Value::Number(n)) => n
                        .as_f64()
                        .and_then(|s| Utc.timestamp_opt(s as i64, 0).single())
                        .map_or(v.clone(), |t| {
                            Value::String(t.format("%b %-d, %Y %-I:%M:%S %p").to_string())
                        }),
                    _ => logged(v),
                };
                out.insert(camel(k), v);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(logged).collect()),
        other => other.clone(),
    }
}

fn epoch_seconds(v: Option<&Value>) -> Option<DateTime<Utc>> {
    let s = v?.as_f64()?;
    Utc.timestamp_millis_opt((s * 1000.0) as i64).single()
}

fn client_error(name: &str, message: &str) -> Reply {
    Reply {
        status: 400,
        error: None,
        body: json!({"__type": name, "message": message}),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LookupRequest {
    #[serde(default)]
    lookup_attributes: Vec<Attribute>,
    #[serde(default)]
    start_time: Option<Value>,
    #[serde(default)]
    end_time: Option<Value>,
    #[serde(default)]
    max_results: Option<i64>,
    #[serde(default)]
    next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Attribute {
    attribute_key: String,
    attribute_value: String,
}

impl CloudTrailLog {
    /// An empty log delivering at once, paced like AWS from `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            events: Vec::new(),
            settings: TrailSettings { lag_seconds: 0 },
            bucket: TokenBucket::new(LOOKUP_EVENTS_PER_SECOND, now),
        }
    }

    /// Delivery settings.
    pub fn settings(&self) -> TrailSettings {
        self.settings
    }

    /// Change the delivery lag.
    pub fn set_settings(&mut self, settings: TrailSettings) {
        self.settings = settings;
    }

    /// Events logged.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when nothing was logged.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Log one `BatchMeterUsage` call: its request body and the reply it got, at `now`.
    pub fn record_batch_meter_usage(
        &mut self,
        region: &str,
        request: &[u8],
        reply: &Reply,
        now: DateTime<Utc>,
        ids: (String, String),
    ) {
        let params = serde_json::from_slice::<Value>(request)
            .map(|v| logged(&v))
            .unwrap_or(Value::Null);
        let (event_id, request_id) = ids;
        let mut event = json!({
            "eventVersion": "1.08",
            "userIdentity": {"type": "IAMUser", "accountId": SELLER_ACCOUNT, "userName": "awsmp"},
            "eventTime": now.to_rfc3339_opts(SecondsFormat::Secs, true),
            "eventSource": EVENT_SOURCE,
            "eventName": "BatchMeterUsage",
            "awsRegion": region,
            "sourceIPAddress": "127.0.0.1",
            "userAgent": "marketplace-sim",
            "requestParameters": params,
            "requestID": request_id,
            "eventID": event_id,
            "readOnly": false,
            "eventType": "AwsApiCall",
            "managementEvent": true,
            "recipientAccountId": SELLER_ACCOUNT,
            "eventCategory": "Management",
        });
        if reply.status == 200 {
            event["responseElements"] = logged(&reply.body);
        } else {
            event["responseElements"] = Value::Null;
            event["errorCode"] = reply.body["__type"].clone();
            event["errorMessage"] = reply.body["message"].clone();
        }
        self.events.push(LoggedEvent {
            id: event_id,
            // CloudTrail's event times are whole seconds (the `eventTime` above): a lookup
            // whose EndTime is this very instant, in milliseconds, must still find the call.
            time: now.trunc_subsecs(0),
            name: "BatchMeterUsage".into(),
            read_only: false,
            json: event.to_string(),
        });
    }

    /// Handle one CloudTrail operation (`LookupEvents` only).
    pub fn api(&mut self, operation: &str, body: &[u8], at: Instant, now: DateTime<Utc>) -> Reply {
        if operation != "LookupEvents" {
            return client_error(
                "UnsupportedOperationException",
                &format!("{operation} is not simulated"),
            );
        }
        if !self.bucket.try_take(at) {
            return client_error("ThrottlingException", "Rate exceeded");
        }
        match serde_json::from_slice::<LookupRequest>(body) {
            Ok(req) => self.lookup(&req, now),
            Err(e) => client_error("SerializationException", &e.to_string()),
        }
    }

    fn lookup(&self, req: &LookupRequest, now: DateTime<Utc>) -> Reply {
        if req.lookup_attributes.len() > 1 {
            return client_error(
                "InvalidLookupAttributesException",
                "only one lookup attribute is allowed",
            );
        }
        let max = req.max_results.unwrap_or(MAX_RESULTS as i64);
        if !(1..=MAX_RESULTS as i64).contains(&max) {
            return client_error("InvalidMaxResultsException", "MaxResults must be 1 to 50");
        }
        let start = epoch_seconds(req.start_time.as_ref());
        let end = epoch_seconds(req.end_time.as_ref());
        if let (Some(s), Some(e)) = (start, end)
            && s > e
        {
            return client_error("InvalidTimeRangeException", "StartTime is after EndTime");
        }
        // The token is the log position of the next event to return: stable while new
        // events arrive.
        let cursor = match req.next_token.as_deref().map(str::parse::<usize>) {
            None => usize::MAX,
            Some(Ok(n)) => n,
            Some(Err(_)) => return client_error("InvalidNextTokenException", "bad NextToken"),
        };
        let delivered = now - Duration::seconds(i64::from(self.settings.lag_seconds));
        let attr = req.lookup_attributes.first();
        // Newest first, as CloudTrail answers.
        let mut matching = self
            .events
            .iter()
            .enumerate()
            .rev()
            .filter(|(i, e)| *i <= cursor && e.time <= delivered)
            .filter(|(_, e)| start.is_none_or(|s| e.time >= s) && end.is_none_or(|t| e.time <= t))
            .filter(|(_, e)| {
                attr.is_none_or(|a| match a.attribute_key.as_str() {
                    "EventSource" => a.attribute_value == EVENT_SOURCE,
                    "EventName" => a.attribute_value == e.name,
                    "EventId" => a.attribute_value == e.id,
                    "ReadOnly" => a.attribute_value == e.read_only.to_string(),
                    _ => false,
                })
            });
        let page: Vec<Value> = matching
            .by_ref()
            .take(max as usize)
            .map(|(_, e)| {
                json!({
                    "EventId": e.id,
                    "EventName": e.name,
                    "ReadOnly": e.read_only.to_string(),
                    "EventTime": e.time.timestamp(),
                    "EventSource": EVENT_SOURCE,
                    "Username": "awsmp",
                    "Resources": [],
                    "CloudTrailEvent": e.json,
                })
            })
            .collect();
        let mut body = json!({"Events": page});
        if let Some((next, _)) = matching.next() {
            body["NextToken"] = Value::String(next.to_string());
        }
        Reply {
            status: 200,
            error: None,
            body,
        }
    }
}

#[cfg(test)]
mod tests;
