//! The simulator's engine in-process, behind the pipeline's [`MeteringApi`] port: no server,
//! no sockets, on the pipeline's [`Clock`] (a virtual one in a simulation). The submitter talks
//! to the same rules, ledger, quota and faults as over HTTP.
//!
//! A call goes the way the SDK path goes: the records become the awsJson1.1 request body the
//! SDK sends (epoch-second timestamps, no `CustomerIdentifier` on a Concurrent-Agreements
//! record, `ProductCode` only on a legacy call), the engine answers it, and the answer is read
//! back through [`match_response`], the Marketplace adapter's own matching of results to
//! records. An exception reply becomes [`MeterCallError::Exception`] with AWS's name.
//!
//! The engine's `now` follows the clock before every call, and the quota's token bucket
//! sees the clock's elapsed time, so throttling at the quota is reproducible. Metering record
//! ids are sequential ([`Simulator::use_sequential_ids`]), so a replayed schedule is identical.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;
use aws_sdk_marketplacemetering::primitives::DateTime as SmithyTime;
use aws_sdk_marketplacemetering::types::{UsageRecord, UsageRecordResult, UsageRecordResultStatus};
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::Identity;
use awsmp_pipeline::adapters::marketplace::match_response;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::ports::{MeterCallError, MeteringApi};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::engine::{SimConfig, Simulator};
use super::error::SimError;
use super::ledger::Ledger;

/// `BatchMeterUsage` answered by an in-process [`Simulator`].
pub struct InProcessMeteringApi {
    sim: Mutex<Simulator>,
    clock: Arc<dyn Clock>,
    started: (Instant, DateTime<Utc>),
}

impl std::fmt::Debug for InProcessMeteringApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessMeteringApi")
            .finish_non_exhaustive()
    }
}

impl InProcessMeteringApi {
    /// A simulator over `config` on `clock` (its quota starts full).
    pub fn new(config: SimConfig, clock: Arc<dyn Clock>) -> Result<Self, SimError> {
        let now = Instant::now();
        let mut sim = Simulator::new(config, now)?;
        sim.use_sequential_ids();
        let started = (now, clock.now());
        Ok(Self {
            sim: Mutex::new(sim),
            clock,
            started,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Simulator> {
        // A poisoned lock only means another thread panicked mid-call; the state is plain data.
        self.sim.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read or change the simulator (faults, counters, clock override).
    pub fn with_sim<T>(&self, f: impl FnOnce(&mut Simulator) -> T) -> T {
        f(&mut self.lock())
    }

    /// The ledger: what was billed, and every duplicate attempt.
    pub fn ledger(&self) -> Ledger {
        self.lock().ledger().clone()
    }

    /// The quota's arrival instant for a call at `now`: the start plus the clock's elapsed
    /// time (a clock set backwards arrives at the start, the bucket cannot run backwards).
    fn arrival(&self, now: DateTime<Utc>) -> Instant {
        let elapsed = (now - self.started.1).to_std().unwrap_or_default();
        self.started.0 + elapsed
    }
}

/// The awsJson1.1 body the SDK sends for `records` (`ProductCode` on a legacy call only).
pub fn request_body(kind: &CallKind, records: &[SubmitRecord]) -> Vec<u8> {
    let usage: Vec<Value> = records.iter().map(wire_record).collect();
    let body = match kind {
        CallKind::Legacy { product_code } => {
            json!({"ProductCode": product_code, "UsageRecords": usage})
        }
        CallKind::ConcurrentAgreements { .. } => json!({"UsageRecords": usage}),
    };
    body.to_string().into_bytes()
}

fn wire_record(r: &SubmitRecord) -> Value {
    let mut record = json!({
        "Timestamp": r.group.hour.start().timestamp(),
        "Dimension": r.group.dimension,
        "Quantity": r.quantity,
    });
    match r.group.identity() {
        Identity::ConcurrentAgreements {
            license_arn,
            customer_aws_account_id,
        } => {
            record["LicenseArn"] = json!(license_arn);
            record["CustomerAWSAccountId"] = json!(customer_aws_account_id);
        }
        Identity::Legacy {
            customer_identifier,
            ..
        } => record["CustomerIdentifier"] = json!(customer_identifier),
    }
    if let Some(allocations) = &r.allocations {
        record["UsageAllocations"] = json!(allocations);
    }
    record
}

/// An echoed `UsageRecord` as the SDK reads it (only the members results are matched by).
fn echoed(v: &Value) -> UsageRecord {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    UsageRecord::builder()
        .timestamp(SmithyTime::from_secs(
            v.get("Timestamp")
                .and_then(Value::as_i64)
                .unwrap_or_default(),
        ))
        .customer_identifier(s("CustomerIdentifier").unwrap_or_default())
        .dimension(s("Dimension").unwrap_or_default())
        .set_customer_aws_account_id(s("CustomerAWSAccountId"))
        .set_license_arn(s("LicenseArn"))
        .build()
        .unwrap_or_else(|_| unreachable!("timestamp and dimension are always set"))
}

/// Read a successful reply's `Results` and `UnprocessedRecords` against the call's records.
pub fn read_reply(records: &[SubmitRecord], body: &Value) -> ApiResponse {
    let list = |k: &str| {
        body.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let results: Vec<UsageRecordResult> = list("Results")
        .iter()
        .map(|r| {
            UsageRecordResult::builder()
                .set_usage_record(r.get("UsageRecord").map(echoed))
                .set_metering_record_id(
                    r.get("MeteringRecordId")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                )
                .set_status(
                    r.get("Status")
                        .and_then(Value::as_str)
                        .map(UsageRecordResultStatus::from),
                )
                .build()
        })
        .collect();
    let unprocessed: Vec<UsageRecord> = list("UnprocessedRecords").iter().map(echoed).collect();
    match_response(records, &results, &unprocessed)
}

#[async_trait]
impl MeteringApi for InProcessMeteringApi {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        let body = request_body(kind, records);
        let now = self.clock.now();
        let reply = {
            let mut sim = self.lock();
            sim.set_clock(Some(now));
            sim.batch_meter_usage(&body, self.arrival(now))
        };
        match reply.error {
            None => Ok(read_reply(records, &reply.body)),
            Some(code) => Err(MeterCallError::Exception {
                name: code.name().to_owned(),
                message: reply
                    .body
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                source: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Catalog, Faults};
    use awsmp_contract::clock::FixedClock;
    use awsmp_contract::keys::GroupKey;
    use awsmp_pipeline::domain::results::ApiStatus;

    const L1: &str =
        "arn:aws:license-manager::123456789012:license:l-11111111111111111111111111111111";
    const A: &str = "111111111111";

    fn clock() -> FixedClock {
        FixedClock::new("2026-11-30T12:00:00Z".parse().unwrap())
    }

    fn api(rps: u32, clock: &FixedClock) -> InProcessMeteringApi {
        let catalog = Catalog::from_json(&format!(
            r#"{{"requestsPerSecond":{rps},"products":[{{"productCode":"prod1","dimensions":["requests"],
                "licenses":[{{"licenseArn":"{L1}","customerAWSAccountId":"{A}","status":"active"}}],
                "legacyCustomers":[{{"customerIdentifier":"cust-1","status":"active"}}]}}]}}"#
        ))
        .unwrap();
        InProcessMeteringApi::new(SimConfig::new(catalog), Arc::new(clock.clone())).unwrap()
    }

    fn record(license: &str, account: &str, hour: &str, quantity: u64) -> SubmitRecord {
        SubmitRecord::new(
            GroupKey::new(license, account, "requests", hour.parse().unwrap()),
            quantity,
            None,
        )
    }

    const CA: CallKind = CallKind::ConcurrentAgreements { product_hint: None };

    #[tokio::test]
    async fn first_writes_are_billed_with_sequential_ids_and_resubmissions_answered() {
        let c = clock();
        let api = api(100, &c);
        let r = |q| [record(L1, A, "2026-11-30T10", q)];
        let first = api.batch_meter_usage(&CA, &r(5)).await.unwrap();
        let again = api.batch_meter_usage(&CA, &r(5)).await.unwrap();
        let other = api.batch_meter_usage(&CA, &r(6)).await.unwrap();
        assert_eq!(first.results[0].status, ApiStatus::Success);
        assert_eq!(
            first.results[0].metering_record_id.as_deref(),
            Some("00000000-0000-4000-8000-000000000001")
        );
        assert_eq!(again.results[0], first.results[0]);
        assert_eq!(other.results[0].status, ApiStatus::DuplicateRecord);
        assert_eq!(api.ledger().billed_units(), 5);
    }

    #[tokio::test]
    async fn a_legacy_call_sends_its_product_code_and_customer_identifier() {
        let c = clock();
        let api = api(100, &c);
        let kind = CallKind::Legacy {
            product_code: "prod1".into(),
        };
        let r = record("prod1", "cust-1", "2026-11-30T11", 3);
        let out = api
            .batch_meter_usage(&kind, std::slice::from_ref(&r))
            .await
            .unwrap();
        assert_eq!(out.results.len(), 1);
        assert_eq!(
            (&out.results[0].group, &out.results[0].status),
            (&r.group, &ApiStatus::Success)
        );
    }

    #[tokio::test]
    async fn the_quota_and_the_window_follow_the_virtual_clock() {
        let c = clock();
        let api = api(1, &c);
        let r = [record(L1, A, "2026-11-30T10", 1)];
        api.batch_meter_usage(&CA, &r).await.unwrap();
        let e = api.batch_meter_usage(&CA, &r).await.unwrap_err();
        assert_eq!(e.exception_name(), Some("ThrottlingException"));
        c.advance(chrono::Duration::seconds(1));
        api.batch_meter_usage(&CA, &r).await.unwrap();
        // A day on, the record's hour is outside the catalog's 24-hour window.
        c.advance(chrono::Duration::hours(25));
        let e = api.batch_meter_usage(&CA, &r).await.unwrap_err();
        assert_eq!(e.exception_name(), Some("TimestampOutOfBoundsException"));
    }

    #[tokio::test]
    async fn unprocessed_records_and_applied_then_failed_calls_reach_the_port() {
        let c = clock();
        let api = api(100, &c);
        let faults = |f: Faults| api.with_sim(|s| s.set_faults(f)).unwrap();
        faults(Faults {
            unprocessed_rate: 1.0,
            ..Faults::default()
        });
        let r = [record(L1, A, "2026-11-30T10", 2)];
        let out = api.batch_meter_usage(&CA, &r).await.unwrap();
        assert_eq!(
            (out.results.len(), out.unprocessed),
            (0, vec![r[0].group.clone()])
        );
        faults(Faults {
            apply_then_fail_rate: 1.0,
            ..Faults::default()
        });
        let e = api.batch_meter_usage(&CA, &r).await.unwrap_err();
        assert_eq!(e.exception_name(), Some("InternalServiceErrorException"));
        assert_eq!(api.ledger().billed_units(), 2, "applied before the failure");
    }
}
