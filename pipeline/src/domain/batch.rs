//! Planning `BatchMeterUsage` calls from pending aggregated records (docs/metering-api.md,
//! "Batch limits", "One product per call").
//!
//! Every call holds ≤25 records and ≤1 MB of serialized request; Concurrent-Agreements
//! records (`LicenseArn` + `CustomerAWSAccountId`, no `ProductCode`) and legacy records
//! (`ProductCode` + `CustomerIdentifier`) are never mixed; one product per call. Records are
//! taken deprovisioning licenses first, then oldest hour first; calls come out in the order
//! of their first record.
//!
//! ```
//! use awsmp_contract::limits::marketplace::MAX_USAGE_RECORDS_PER_CALL;
//! use awsmp_pipeline::domain::batch::{plan_calls, SubmitRecord};
//! use awsmp_contract::keys::{GroupKey, HourBucket};
//! let hour: HourBucket = "2026-11-30T11".parse().unwrap();
//! let records: Vec<SubmitRecord> = (0..30)
//!     .map(|i| SubmitRecord::new(GroupKey::new(
//!         "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
//!         format!("{:012}", i), "api", hour), 1, None))
//!     .collect();
//! let plan = plan_calls(records, |_| Some("prod1".to_owned()));
//! assert_eq!(plan.calls.len(), 2);
//! assert_eq!(plan.calls[0].records.len(), MAX_USAGE_RECORDS_PER_CALL);
//! ```

use std::cmp::Ordering;
use std::collections::BTreeMap;

use awsmp_contract::keys::{GroupKey, Identity};
use awsmp_contract::limits::marketplace::{MAX_REQUEST_BYTES, MAX_USAGE_RECORDS_PER_CALL};
use awsmp_contract::row::Allocation;

/// Conservative per-request JSON overhead: braces, `"UsageRecords":[]`, `"ProductCode":""`.
const REQUEST_OVERHEAD_BYTES: usize = 64;
/// Conservative per-record JSON overhead: every member name, quotes, braces and separators
/// (the exact figure is ~130 bytes), plus the empty `CustomerIdentifier` the SDK always writes.
const RECORD_OVERHEAD_BYTES: usize = 192;
/// Upper bound on a serialized `Timestamp` (epoch seconds, possibly fractional/exponent form).
const TIMESTAMP_BYTES: usize = 32;
/// Upper bound on a serialized integer.
const INTEGER_BYTES: usize = 20;
/// Per-allocation overhead: `{"AllocatedUsageQuantity":,"Tags":[]}` and a separator.
const ALLOCATION_OVERHEAD_BYTES: usize = 48;
/// Per-tag overhead: `{"Key":"","Value":""}` and a separator.
const TAG_OVERHEAD_BYTES: usize = 28;

/// A pending aggregated record to submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitRecord {
    /// Its group; [`GroupKey::identity`] says whether it is a CA or a legacy record.
    pub group: GroupKey,
    /// Quantity to bill.
    pub quantity: u64,
    /// Merged VMT allocations.
    pub allocations: Option<Vec<Allocation>>,
    /// Its license is in a deprovisioning flush window: submit ahead of everything else.
    pub deprovisioning: bool,
    /// Quantity of an earlier send of this record that AWS may have applied without our
    /// seeing the outcome: read from `attemptedQuantity` (persisted before every call, taken
    /// back when the call provably applied nothing), and set in memory by
    /// [`SubmitRecord::mark_sent`] after a send in this run that may have been applied. A
    /// `DuplicateRecord` for the same quantity is then recognised as our own replay.
    pub previous_attempt: Option<u64>,
}

impl SubmitRecord {
    /// A record that was never sent before, not deprovisioning.
    pub fn new(group: GroupKey, quantity: u64, allocations: Option<Vec<Allocation>>) -> Self {
        Self {
            group,
            quantity,
            allocations,
            deprovisioning: false,
            previous_attempt: None,
        }
    }

    /// Note that this record has been sent with its current quantity and AWS may have applied
    /// it (no answer, a 5xx): call it after such a send, before retrying within the run.
    pub fn mark_sent(&mut self) {
        self.previous_attempt = Some(self.quantity);
    }

    /// Conservative upper bound of this record's bytes in the awsJson1.1 request body.
    pub fn estimated_bytes(&self) -> usize {
        let g = &self.group;
        let mut n = RECORD_OVERHEAD_BYTES + TIMESTAMP_BYTES + INTEGER_BYTES;
        n += json_string_bytes(&g.license_arn) + json_string_bytes(&g.customer_aws_account_id);
        n += json_string_bytes(&g.dimension);
        for a in self.allocations.iter().flatten() {
            n += ALLOCATION_OVERHEAD_BYTES + INTEGER_BYTES;
            for t in &a.tags {
                n += TAG_OVERHEAD_BYTES + json_string_bytes(&t.key) + json_string_bytes(&t.value);
            }
        }
        n
    }
}

/// Upper bound of `s` as a JSON string including its quotes: `"` and `\` take 2 bytes, control
/// characters 6 (`\u00XX`), and non-ASCII bytes 3 each (covers `\uXXXX` escaping of any
/// UTF-8 sequence).
pub fn json_string_bytes(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' => 2,
            0..=0x1f | 0x7f => 6,
            0x80.. => 3,
            _ => 1,
        })
        .sum::<usize>()
}

/// Submission order: deprovisioning licenses first, then oldest hour first, then by key (so
/// the order is total and deterministic).
pub fn submission_order(a: &SubmitRecord, b: &SubmitRecord) -> Ordering {
    b.deprovisioning
        .cmp(&a.deprovisioning)
        .then(a.group.hour.cmp(&b.group.hour))
        .then_with(|| a.group.cmp(&b.group))
}

/// What one call carries at request level.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallKind {
    /// Concurrent-Agreements records. No `ProductCode` is sent (never with `LicenseArn`).
    ConcurrentAgreements {
        /// The product the lookup named (logs and metrics only, never sent); `None` when
        /// unknown, in which case the call holds records of a single license only.
        product_hint: Option<String>,
    },
    /// Legacy records: send this `ProductCode` and each record's `CustomerIdentifier`.
    Legacy {
        /// Request-level `ProductCode`.
        product_code: String,
    },
}

/// One planned `BatchMeterUsage` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCall {
    /// Request-level shape.
    pub kind: CallKind,
    /// Its records, in submission order.
    pub records: Vec<SubmitRecord>,
    /// Conservative request size.
    pub estimated_bytes: usize,
}

/// The plan for one submitter pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Calls, in order.
    pub calls: Vec<PlannedCall>,
    /// Records that alone exceed [`MAX_REQUEST_BYTES`]: they can never be sent (the submitter
    /// should mark them `Error` with reason
    /// [`RECORD_EXCEEDS_REQUEST_SIZE_LIMIT`](awsmp_contract::reasons::RECORD_EXCEEDS_REQUEST_SIZE_LIMIT)
    /// and alarm).
    pub oversized: Vec<SubmitRecord>,
}

/// Which records may share a call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Partition {
    /// CA records of a known product.
    Product(String),
    /// CA records whose product the lookup did not know: only the same license is safe.
    UnknownProductLicense(String),
    /// Legacy records of one product code.
    Legacy(String),
}

/// Plan the calls for `records`. `product_of(license_arn)` names a CA license's product (the
/// caller's lookup, e.g. the subscribers table); legacy records carry their product code.
pub fn plan_calls(
    mut records: Vec<SubmitRecord>,
    product_of: impl Fn(&str) -> Option<String>,
) -> Plan {
    records.sort_by(submission_order);
    let mut plan = Plan::default();
    // Partition → index of its open (not yet full) call in `plan.calls`.
    let mut open: BTreeMap<Partition, usize> = BTreeMap::new();
    for record in records {
        let (partition, kind) = match record.group.identity() {
            Identity::ConcurrentAgreements { license_arn, .. } => match product_of(license_arn) {
                Some(p) => (
                    Partition::Product(p.clone()),
                    CallKind::ConcurrentAgreements {
                        product_hint: Some(p),
                    },
                ),
                None => (
                    Partition::UnknownProductLicense(license_arn.to_owned()),
                    CallKind::ConcurrentAgreements { product_hint: None },
                ),
            },
            Identity::Legacy { product_code, .. } => (
                Partition::Legacy(product_code.to_owned()),
                CallKind::Legacy {
                    product_code: product_code.to_owned(),
                },
            ),
        };
        let bytes = record.estimated_bytes();
        let envelope = REQUEST_OVERHEAD_BYTES + kind_bytes(&kind);
        if envelope + bytes > MAX_REQUEST_BYTES {
            plan.oversized.push(record);
            continue;
        }
        if let Some(&i) = open.get(&partition) {
            let call = &mut plan.calls[i];
            if call.records.len() < MAX_USAGE_RECORDS_PER_CALL
                && call.estimated_bytes + bytes <= MAX_REQUEST_BYTES
            {
                call.estimated_bytes += bytes;
                call.records.push(record);
                continue;
            }
        }
        open.insert(partition, plan.calls.len());
        plan.calls.push(PlannedCall {
            kind,
            estimated_bytes: envelope + bytes,
            records: vec![record],
        });
    }
    plan
}

fn kind_bytes(kind: &CallKind) -> usize {
    match kind {
        CallKind::ConcurrentAgreements { .. } => 0,
        CallKind::Legacy { product_code } => json_string_bytes(product_code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_contract::keys::HourBucket;
    use awsmp_contract::row::Tag;

    fn lic(n: u32) -> String {
        format!("arn:aws:license-manager::123456789012:license:l-{n:032x}")
    }
    fn rec(license: &str, account: u32, hour: &str) -> SubmitRecord {
        SubmitRecord::new(
            GroupKey::new(
                license,
                format!("{account:012}"),
                "api",
                hour.parse::<HourBucket>().unwrap(),
            ),
            1,
            None,
        )
    }

    #[test]
    fn escaping_is_bounded() {
        assert_eq!(json_string_bytes("abc"), 5);
        assert_eq!(json_string_bytes("a\"b"), 6);
        assert_eq!(json_string_bytes("\n"), 8);
        assert_eq!(json_string_bytes("é"), 8);
        let s = "x\"\\\u{1}é😀";
        assert!(json_string_bytes(s) >= serde_json::to_string(s).unwrap().len());
    }

    #[test]
    fn estimate_bounds_a_real_serialization() {
        let mut r = rec(&lic(1), 7, "2026-11-30T11");
        r.allocations = Some(vec![Allocation {
            quantity: 5,
            tags: vec![Tag::new("team", "a\"b"), Tag::new("env", "prod")],
        }]);
        let json = serde_json::json!({
            "Timestamp": 1_764_500_400.0_f64,
            "CustomerIdentifier": "",
            "CustomerAWSAccountId": r.group.customer_aws_account_id,
            "LicenseArn": r.group.license_arn,
            "Dimension": r.group.dimension,
            "Quantity": r.quantity,
            "UsageAllocations": [{"AllocatedUsageQuantity": 5, "Tags": [{"Key":"team","Value":"a\"b"},{"Key":"env","Value":"prod"}]}],
        });
        assert!(r.estimated_bytes() > serde_json::to_string(&json).unwrap().len());
    }

    #[test]
    fn order_is_deprovisioning_then_oldest() {
        let mut a = rec(&lic(1), 1, "2026-11-30T11");
        let b = rec(&lic(1), 1, "2026-11-30T09");
        let mut c = rec(&lic(2), 1, "2026-11-30T12");
        c.deprovisioning = true;
        a.deprovisioning = false;
        let plan = plan_calls(vec![a.clone(), b.clone(), c.clone()], |_| Some("p".into()));
        assert_eq!(plan.calls.len(), 1);
        assert_eq!(plan.calls[0].records, vec![c, b, a]);
    }

    #[test]
    fn products_kinds_and_unknowns_are_kept_apart() {
        let legacy = SubmitRecord::new(
            GroupKey::new(
                "prodcode",
                "cust-1",
                "api",
                "2026-11-30T11".parse().unwrap(),
            ),
            1,
            None,
        );
        let records = vec![
            rec(&lic(1), 1, "2026-11-30T01"),
            rec(&lic(2), 1, "2026-11-30T02"),
            rec(&lic(3), 1, "2026-11-30T03"),
            rec(&lic(4), 1, "2026-11-30T04"),
            rec(&lic(4), 2, "2026-11-30T05"),
            legacy.clone(),
        ];
        let plan = plan_calls(records, |l| match l {
            l if l == lic(1) || l == lic(2) => Some("p1".into()),
            l if l == lic(3) => Some("p2".into()),
            _ => None,
        });
        let shape: Vec<(CallKind, usize)> = plan
            .calls
            .iter()
            .map(|c| (c.kind.clone(), c.records.len()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (
                    CallKind::ConcurrentAgreements {
                        product_hint: Some("p1".into())
                    },
                    2
                ),
                (
                    CallKind::ConcurrentAgreements {
                        product_hint: Some("p2".into())
                    },
                    1
                ),
                (CallKind::ConcurrentAgreements { product_hint: None }, 2),
                (
                    CallKind::Legacy {
                        product_code: "prodcode".into()
                    },
                    1
                ),
            ]
        );
    }

    #[test]
    fn byte_limit_splits_and_oversized_records_are_set_aside() {
        let big_tags: Vec<Tag> = (0..5)
            .map(|i| Tag::new(format!("k{i}"), "v".repeat(256)))
            .collect();
        let allocations: Vec<Allocation> = (0..400)
            .map(|i| Allocation {
                quantity: i,
                tags: big_tags.clone(),
            })
            .collect();
        let mut records = Vec::new();
        for a in 0..5 {
            let mut r = rec(&lic(1), a, "2026-11-30T11");
            r.allocations = Some(allocations.clone());
            records.push(r);
        }
        let mut huge = rec(&lic(1), 99, "2026-11-30T11");
        huge.allocations = Some(
            (0..1000)
                .map(|i| Allocation {
                    quantity: i,
                    tags: big_tags.clone(),
                })
                .collect(),
        );
        records.push(huge.clone());
        let per_record = records[0].estimated_bytes();
        assert!(per_record > MAX_REQUEST_BYTES / 3);
        let plan = plan_calls(records, |_| Some("p".into()));
        assert_eq!(plan.oversized, vec![huge]);
        assert!(
            plan.calls
                .iter()
                .all(|c| c.estimated_bytes <= MAX_REQUEST_BYTES)
        );
        assert_eq!(plan.calls.iter().map(|c| c.records.len()).sum::<usize>(), 5);
        assert!(plan.calls.len() >= 2);
    }
}
