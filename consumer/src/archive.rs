//! The seven-year billing archive (docs/meter-ingest.md, "Billing archive"): every event the
//! consumer applied — from the trusted producers and from meter-ingest alike — as JSON Lines in
//! S3, partitioned by the billing day (`dt=YYYY-MM-DD/`), separate from the dedup store.
//!
//! Objects are keyed by the stream position of the records they hold
//! (`dt={day}/{stream}/{shard}/{first sequence}-{last sequence}.jsonl`), so replaying the same
//! batch rewrites the same object with the same lines; a retried *part* of a batch (bisection,
//! a partial failure) may write an event in a second object, and readers take each `eventId`
//! once ([`dedup_by_event_id`]).

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use awsmp_contract::attrs::audit_timestamp;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::verify::VerifiedEvent;
use crate::error::Result;

/// One tag of an archived allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedTag {
    /// Tag key.
    pub key: String,
    /// Tag value.
    pub value: String,
}

/// One archived allocation: units of the event attributed to a tag set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedAllocation {
    /// Units.
    pub allocated_usage_quantity: u64,
    /// Tags.
    pub tags: Vec<ArchivedTag>,
}

/// One billed event, as archived: attribution, quantity, ids, billing time, stream position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedEvent {
    /// The event id (meter-ingest's are `mi:…`).
    pub event_id: String,
    /// License ARN.
    pub license_arn: String,
    /// Buyer account.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// Dimension.
    pub dimension: String,
    /// Quantity.
    pub quantity: u64,
    /// The billing second, `YYYY-MM-DDTHH:MM:SS` (UTC): the usage row's second.
    pub billing_time: String,
    /// The producer id (meter-ingest: the module's invoked ARN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer_id: Option<String>,
    /// The allocations, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_allocations: Option<Vec<ArchivedAllocation>>,
    /// Stream name.
    pub stream: String,
    /// Shard id.
    pub shard_id: String,
    /// Sequence number of the stream record.
    pub sequence_number: String,
    /// Position inside an aggregated record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_sequence_number: Option<u32>,
    /// When archived (ISO-8601).
    pub archived_at: String,
}

impl ArchivedEvent {
    /// The archive line of `ev`, applied from record (`stream`, `shard_id`, `sequence_number`)
    /// at `now`.
    pub fn new(
        ev: &VerifiedEvent,
        position: (&str, &str, &str, Option<u32>),
        now: DateTime<Utc>,
    ) -> Self {
        let (stream, shard_id, sequence_number, sub) = position;
        let billing = DateTime::from_timestamp(ev.second, 0).unwrap_or(now);
        Self {
            event_id: ev.event_id.clone(),
            license_arn: ev.license_arn.clone(),
            customer_aws_account_id: ev.customer_aws_account_id.clone(),
            dimension: ev.dimension.clone(),
            quantity: ev.quantity,
            billing_time: billing.format("%Y-%m-%dT%H:%M:%S").to_string(),
            producer_id: ev.producer_id.clone(),
            usage_allocations: ev.allocations.as_ref().map(|a| {
                a.iter()
                    .map(|(tags, q)| ArchivedAllocation {
                        allocated_usage_quantity: *q,
                        tags: tags
                            .iter()
                            .map(|t| ArchivedTag {
                                key: t.key.clone(),
                                value: t.value.clone(),
                            })
                            .collect(),
                    })
                    .collect()
            }),
            stream: stream.to_owned(),
            shard_id: shard_id.to_owned(),
            sequence_number: sequence_number.to_owned(),
            sub_sequence_number: sub,
            archived_at: audit_timestamp(now),
        }
    }

    /// The billing day, `YYYY-MM-DD`: the object's `dt` partition.
    pub fn day(&self) -> &str {
        self.billing_time.get(..10).unwrap_or(&self.billing_time)
    }

    /// The billing hour, `YYYY-MM-DDTHH`.
    pub fn hour(&self) -> &str {
        self.billing_time.get(..13).unwrap_or(&self.billing_time)
    }
}

/// One archive object: its key and its JSON Lines body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveObject {
    /// `dt={day}/{stream}/{shard}/{first}-{last}.jsonl`.
    pub key: String,
    /// One JSON object per line.
    pub body: Vec<u8>,
}

/// The objects of one batch's applied events (in record order), one per billing day.
pub fn archive_objects(events: &[ArchivedEvent]) -> Vec<ArchiveObject> {
    let mut days: BTreeMap<&str, Vec<&ArchivedEvent>> = BTreeMap::new();
    for e in events {
        days.entry(e.day()).or_default().push(e);
    }
    days.into_iter()
        .filter_map(|(day, evs)| {
            let (first, last) = (evs.first()?, evs.last()?);
            let mut body = Vec::new();
            for e in &evs {
                // Strings and integers only: serializing into a Vec cannot fail.
                serde_json::to_writer(&mut body, e).expect("archive line serializes");
                body.push(b'\n');
            }
            Some(ArchiveObject {
                key: format!(
                    "dt={day}/{}/{}/{}-{}.jsonl",
                    first.stream, first.shard_id, first.sequence_number, last.sequence_number
                ),
                body,
            })
        })
        .collect()
}

/// The events of an object's body.
pub fn parse_object(body: &[u8]) -> std::result::Result<Vec<ArchivedEvent>, serde_json::Error> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(serde_json::from_slice)
        .collect()
}

/// Each `eventId` once (the first seen): what a reader of the archive counts.
pub fn dedup_by_event_id(events: Vec<ArchivedEvent>) -> Vec<ArchivedEvent> {
    let mut seen = HashSet::new();
    events
        .into_iter()
        .filter(|e| seen.insert(e.event_id.clone()))
        .collect()
}

/// The billing archive (S3; in memory for tests).
#[async_trait]
pub trait BillingArchive: Send + Sync {
    /// Write one object (the same key again: the same content, a replay).
    async fn put(&self, object: &ArchiveObject) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: &str, second: i64, seq: &str) -> ArchivedEvent {
        let v = VerifiedEvent {
            license_arn: "l".into(),
            customer_aws_account_id: "a".into(),
            dimension: "d".into(),
            second,
            quantity: 3,
            allocations: None,
            event_id: id.into(),
            producer_id: None,
        };
        ArchivedEvent::new(&v, ("s", "shardId-0", seq, None), Utc::now())
    }

    #[test]
    fn one_object_per_day_keyed_by_position_and_lines_round_trip() {
        // 2026-12-01T23:59:59 and 2026-12-02T00:00:00
        let (a, b) = (1_796_169_599, 1_796_169_600);
        let events = [ev("e1", a, "10"), ev("e2", a, "11"), ev("e3", b, "12")];
        let objs = archive_objects(&events);
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].key, "dt=2026-12-01/s/shardId-0/10-11.jsonl");
        assert_eq!(objs[1].key, "dt=2026-12-02/s/shardId-0/12-12.jsonl");
        assert_eq!(parse_object(&objs[0].body).unwrap(), events[..2].to_vec());
        assert_eq!(events[2].hour(), "2026-12-02T00");
        // The same batch again: the same objects.
        assert_eq!(archive_objects(&events), objs);
    }

    #[test]
    fn readers_take_each_event_id_once() {
        let events = vec![ev("e1", 0, "1"), ev("e2", 0, "2"), ev("e1", 0, "1")];
        let ids: Vec<_> = dedup_by_event_id(events)
            .into_iter()
            .map(|e| e.event_id)
            .collect();
        assert_eq!(ids, ["e1", "e2"]);
    }
}
