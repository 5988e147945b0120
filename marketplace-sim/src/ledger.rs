//! The ledger: what was billed (first write per dedup key wins) and every conflicting
//! resubmission. Pure: ids and times are passed in.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

use super::rules::{CustomerKey, DedupKey, ScopeKey, Tag, UsageAllocation};

fn hour_string<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.format("%Y-%m-%dT%H").to_string())
}

fn rfc3339<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// The key fields of a ledger line, flattened for JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyFields {
    /// Product billed.
    pub product_code: String,
    /// CA license (null for legacy).
    pub license_arn: Option<String>,
    /// CA buyer account (null for legacy).
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: Option<String>,
    /// Legacy customer (null for CA).
    pub customer_identifier: Option<String>,
    /// Dimension.
    pub dimension: String,
    /// UTC hour, `YYYY-MM-DDTHH`.
    #[serde(serialize_with = "hour_string")]
    pub hour: DateTime<Utc>,
}

impl KeyFields {
    fn new(key: &DedupKey, product_code: &str) -> Self {
        let (license_arn, product_code) = match &key.scope {
            ScopeKey::License(l) => (Some(l.clone()), product_code.to_owned()),
            ScopeKey::Product(p) => (None, p.clone()),
        };
        let (account, identifier) = match &key.customer {
            CustomerKey::Account(a) => (Some(a.clone()), None),
            CustomerKey::Identifier(c) => (None, Some(c.clone())),
        };
        Self {
            product_code,
            license_arn,
            customer_aws_account_id: account,
            customer_identifier: identifier,
            dimension: key.dimension.clone(),
            hour: key.hour,
        }
    }
}

/// A billed record: the first write of its dedup key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BilledRecord {
    /// Key fields.
    #[serde(flatten)]
    pub key: KeyFields,
    /// Billed units.
    pub quantity: u32,
    /// Allocations as submitted (BatchMeterUsage shape), or null.
    pub usage_allocations: Option<Vec<UsageAllocation>>,
    /// The id every identical retry gets back.
    pub metering_record_id: String,
    /// Simulator time of the first write.
    #[serde(serialize_with = "rfc3339")]
    pub first_seen: DateTime<Utc>,
}

/// A resubmission of a billed key with a different quantity or allocations (not billed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DuplicateAttempt {
    /// Key fields.
    #[serde(flatten)]
    pub key: KeyFields,
    /// The original record's id (returned with `DuplicateRecord`).
    pub metering_record_id: String,
    /// What stays billed.
    pub billed_quantity: u32,
    /// What the resubmission asked for.
    pub attempted_quantity: u32,
    /// The resubmission's allocations.
    pub attempted_usage_allocations: Option<Vec<UsageAllocation>>,
    /// Simulator time of the attempt.
    #[serde(serialize_with = "rfc3339")]
    pub at: DateTime<Utc>,
}

/// What writing one record to the ledger did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// First write: billed.
    Billed(String),
    /// Same quantity and allocations as the billed write: `Success`, same id, nothing added.
    IdenticalRetry(String),
    /// Different quantity or allocations: `DuplicateRecord`, original id, nothing added.
    Duplicate(String),
}

/// Allocations compared as a multiset of (quantity, tag set): order of allocations and of tags
/// inside one allocation is not meaningful to billing.
fn normalized(allocs: &Option<Vec<UsageAllocation>>) -> Option<Vec<(u32, Vec<Tag>)>> {
    allocs.as_ref().map(|list| {
        let mut v: Vec<(u32, Vec<Tag>)> = list
            .iter()
            .map(|a| {
                let mut tags = a.tags.clone();
                tags.sort();
                (a.allocated_usage_quantity, tags)
            })
            .collect();
        v.sort();
        v
    })
}

/// Billed records in first-write order, plus duplicates.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    records: Vec<BilledRecord>,
    index: HashMap<DedupKey, usize>,
    duplicates: Vec<DuplicateAttempt>,
}

impl Ledger {
    /// Write one billable record. `new_id` is called only when the key is new.
    pub fn write(
        &mut self,
        key: &DedupKey,
        product_code: &str,
        quantity: u32,
        allocations: &Option<Vec<UsageAllocation>>,
        now: DateTime<Utc>,
        new_id: impl FnOnce() -> String,
    ) -> WriteOutcome {
        if let Some(&i) = self.index.get(key) {
            let billed = &self.records[i];
            if billed.quantity == quantity
                && normalized(&billed.usage_allocations) == normalized(allocations)
            {
                return WriteOutcome::IdenticalRetry(billed.metering_record_id.clone());
            }
            let id = billed.metering_record_id.clone();
            self.duplicates.push(DuplicateAttempt {
                key: billed.key.clone(),
                metering_record_id: id.clone(),
                billed_quantity: billed.quantity,
                attempted_quantity: quantity,
                attempted_usage_allocations: allocations.clone(),
                at: now,
            });
            return WriteOutcome::Duplicate(id);
        }
        let id = new_id();
        self.index.insert(key.clone(), self.records.len());
        self.records.push(BilledRecord {
            key: KeyFields::new(key, product_code),
            quantity,
            usage_allocations: allocations.clone(),
            metering_record_id: id.clone(),
            first_seen: now,
        });
        WriteOutcome::Billed(id)
    }

    /// Billed records, in first-write order.
    pub fn records(&self) -> &[BilledRecord] {
        &self.records
    }

    /// Conflicting resubmissions, in arrival order.
    pub fn duplicates(&self) -> &[DuplicateAttempt] {
        &self.duplicates
    }

    /// Total billed units.
    pub fn billed_units(&self) -> u64 {
        self.records.iter().map(|r| u64::from(r.quantity)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn key(dim: &str, h: u32) -> DedupKey {
        DedupKey {
            customer: CustomerKey::Account("111122223333".into()),
            scope: ScopeKey::License("arn:l".into()),
            dimension: dim.into(),
            hour: Utc.with_ymd_and_hms(2026, 11, 30, h, 0, 0).unwrap(),
        }
    }

    fn alloc(q: u32, tags: &[(&str, &str)]) -> UsageAllocation {
        UsageAllocation {
            allocated_usage_quantity: q,
            tags: tags
                .iter()
                .map(|(k, v)| Tag {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn first_write_wins_and_identical_retry_returns_same_id() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let mut l = Ledger::default();
        assert_eq!(
            l.write(&key("d", 10), "p", 5, &None, now, || "id-1".into()),
            WriteOutcome::Billed("id-1".into())
        );
        assert_eq!(
            l.write(&key("d", 10), "p", 5, &None, now, || unreachable!(
                "no new id for a retry"
            )),
            WriteOutcome::IdenticalRetry("id-1".into())
        );
        assert_eq!(
            l.write(&key("d", 10), "p", 7, &None, now, || unreachable!()),
            WriteOutcome::Duplicate("id-1".into())
        );
        assert_eq!(l.billed_units(), 5);
        assert_eq!(l.records().len(), 1);
        let d = &l.duplicates()[0];
        assert_eq!((d.billed_quantity, d.attempted_quantity), (5, 7));
        // Another hour or dimension is a new key.
        assert_eq!(
            l.write(&key("d", 11), "p", 7, &None, now, || "id-2".into()),
            WriteOutcome::Billed("id-2".into())
        );
        assert_eq!(
            l.write(&key("e", 10), "p", 7, &None, now, || "id-3".into()),
            WriteOutcome::Billed("id-3".into())
        );
        assert_eq!(l.billed_units(), 19);
    }

    #[test]
    fn allocation_order_is_irrelevant_but_content_is_not() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let mut l = Ledger::default();
        let a = Some(vec![
            alloc(2, &[("a", "1"), ("b", "2")]),
            alloc(3, &[("a", "2")]),
        ]);
        let reordered = Some(vec![
            alloc(3, &[("a", "2")]),
            alloc(2, &[("b", "2"), ("a", "1")]),
        ]);
        let moved = Some(vec![
            alloc(3, &[("a", "1"), ("b", "2")]),
            alloc(2, &[("a", "2")]),
        ]);
        l.write(&key("d", 1), "p", 5, &a, now, || "x".into());
        assert_eq!(
            l.write(&key("d", 1), "p", 5, &reordered, now, || unreachable!()),
            WriteOutcome::IdenticalRetry("x".into())
        );
        assert_eq!(
            l.write(&key("d", 1), "p", 5, &moved, now, || unreachable!()),
            WriteOutcome::Duplicate("x".into())
        );
        assert_eq!(
            l.write(&key("d", 1), "p", 5, &None, now, || unreachable!()),
            WriteOutcome::Duplicate("x".into())
        );
        assert_eq!(l.duplicates().len(), 2);
        assert_eq!(
            l.duplicates()[0].billed_quantity,
            l.duplicates()[0].attempted_quantity
        );
    }

    #[test]
    fn serializes_the_spec_shape() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let mut l = Ledger::default();
        l.write(
            &key("d", 9),
            "prod",
            5,
            &Some(vec![alloc(5, &[("k", "v")])]),
            now,
            || "id".into(),
        );
        l.write(&key("d", 9), "prod", 6, &None, now, || unreachable!());
        let rec = serde_json::to_value(&l.records()[0]).unwrap();
        assert_eq!(
            rec,
            serde_json::json!({"productCode":"prod","licenseArn":"arn:l","customerAWSAccountId":"111122223333",
                "customerIdentifier":null,"dimension":"d","hour":"2026-11-30T09","quantity":5,
                "usageAllocations":[{"AllocatedUsageQuantity":5,"Tags":[{"Key":"k","Value":"v"}]}],
                "meteringRecordId":"id","firstSeen":"2026-11-30T12:00:00.000Z"})
        );
        let dup = serde_json::to_value(&l.duplicates()[0]).unwrap();
        assert_eq!(dup["billedQuantity"], 5);
        assert_eq!(dup["attemptedQuantity"], 6);
        assert_eq!(dup["hour"], "2026-11-30T09");
        assert_eq!(dup["at"], "2026-11-30T12:00:00.000Z");
    }
}
