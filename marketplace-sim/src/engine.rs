//! The simulator's state machine: one region's ledger, counters, faults, quota and clock.
//! It takes request bodies and returns replies (status, exception, JSON); the HTTP layer in
//! `server.rs` only moves bytes. Rule checks live in `rules.rs`, billing in `ledger.rs`.

use std::collections::BTreeMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::catalog::{Catalog, CatalogIndex};
use super::cloudtrail::CloudTrailLog;
use super::error::{ApiError, ErrorCode, SimError};
use super::faults::{Faults, TokenBucket};
use super::ledger::{Ledger, WriteOutcome};
use super::rules::{Disposition, Limits, ValidatedRecord, parse_batch_request, validate_batch};

/// Everything a simulator instance (one region) starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Products, licenses, tokens and limits.
    pub catalog: Catalog,
    /// The region this instance plays (reported by the admin API).
    pub region: String,
    /// Overrides the catalog's `windowHours`.
    pub window_hours: Option<u32>,
    /// Every BatchMeterUsage call gets DisabledApiException (a region without the API).
    pub disabled: bool,
    /// Faults active from the start.
    pub faults: Faults,
}

impl SimConfig {
    /// A us-east-1 simulator over `catalog`, no faults.
    pub fn new(catalog: Catalog) -> Self {
        Self {
            catalog,
            region: "us-east-1".into(),
            window_hours: None,
            disabled: false,
            faults: Faults::default(),
        }
    }
}

/// Counters since start or the last reset (`GET /_sim/ledger` → `counters`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    /// BatchMeterUsage calls received (every outcome).
    pub requests: u64,
    /// Calls answered ThrottlingException (quota or injected).
    pub throttled: u64,
    /// Injected 500s before anything was applied.
    pub internal_errors: u64,
    /// Calls applied and then answered with a 500.
    pub apply_then_fail: u64,
    /// Records returned in UnprocessedRecords.
    pub unprocessed: u64,
    /// Records billed for the first time (Status Success, new id).
    pub success: u64,
    /// Identical resubmissions (Status Success, same id, nothing billed).
    pub identical_retries: u64,
    /// Records answered DuplicateRecord.
    pub duplicate_record: u64,
    /// Records answered CustomerNotSubscribed.
    pub customer_not_subscribed: u64,
    /// Every error response of BatchMeterUsage, by exception name.
    pub request_errors: BTreeMap<String, u64>,
}

/// One API answer: HTTP status, the exception (if any) and the JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The exception, for the `x-amzn-ErrorType` header.
    pub error: Option<ErrorCode>,
    /// The JSON body.
    pub body: Value,
}

impl Reply {
    fn ok(body: Value) -> Self {
        Self {
            status: 200,
            error: None,
            body,
        }
    }

    /// The error reply AWS sends for `e`: `{"__type", "message"}` with its HTTP status.
    pub fn error(e: &ApiError) -> Self {
        Self {
            status: e.code.http_status(),
            error: Some(e.code),
            body: json!({"__type": e.code.name(), "message": e.message}),
        }
    }
}

/// One simulated region.
#[derive(Debug)]
pub struct Simulator {
    catalog: CatalogIndex,
    region: String,
    limits: Limits,
    disabled: bool,
    faults: Faults,
    rng: StdRng,
    bucket: TokenBucket,
    clock: Option<DateTime<Utc>>,
    ledger: Ledger,
    counters: Counters,
    lifecycle: super::lifecycle::LifecycleState,
    cloudtrail: CloudTrailLog,
    /// `Some(n)`: metering record ids are sequential (the `n`th so far), not random.
    sequential_ids: Option<u64>,
}

impl Simulator {
    /// Build from a config; `now` starts the quota's token bucket (full).
    pub fn new(config: SimConfig, now: Instant) -> Result<Self, SimError> {
        config.faults.validate()?;
        if config.window_hours == Some(0) {
            return Err(SimError::InvalidCatalog(
                "window hours must be at least 1".into(),
            ));
        }
        let limits = Limits {
            window_hours: config.window_hours.unwrap_or(config.catalog.window_hours),
            max_allocations_per_record: config.catalog.max_allocations_per_record,
        };
        let bucket = TokenBucket::new(config.catalog.requests_per_second, now);
        Ok(Self {
            catalog: CatalogIndex::new(config.catalog)?,
            region: config.region,
            limits,
            disabled: config.disabled,
            rng: StdRng::seed_from_u64(config.faults.seed),
            faults: config.faults,
            bucket,
            clock: None,
            ledger: Ledger::default(),
            counters: Counters::default(),
            lifecycle: Default::default(),
            cloudtrail: CloudTrailLog::new(now),
            sequential_ids: None,
        })
    }

    /// The simulator's "now": the set instant, else the real clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.unwrap_or_else(Utc::now)
    }

    /// Freeze the clock at an instant, or (`None`) return to the real clock.
    pub fn set_clock(&mut self, now: Option<DateTime<Utc>>) {
        self.clock = now;
    }

    /// The set instant, if the clock is not the real one.
    pub fn clock_override(&self) -> Option<DateTime<Utc>> {
        self.clock
    }

    /// Give metering record ids in sequence (UUID-shaped, from
    /// `00000000-0000-4000-8000-000000000001`), so an in-process run replays identically.
    pub fn use_sequential_ids(&mut self) {
        self.sequential_ids.get_or_insert(0);
    }

    /// Current faults.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Replace the faults and reseed the fault RNG from `faults.seed`.
    pub fn set_faults(&mut self, faults: Faults) -> Result<(), SimError> {
        faults.validate()?;
        self.rng = StdRng::seed_from_u64(faults.seed);
        self.faults = faults;
        Ok(())
    }

    /// Clear ledger, counters and faults, refill the quota; catalog and clock stay.
    pub fn reset(&mut self, now: Instant) {
        self.ledger = Ledger::default();
        self.counters = Counters::default();
        self.cloudtrail = CloudTrailLog::new(now);
        self.faults = Faults::default();
        self.rng = StdRng::seed_from_u64(self.faults.seed);
        self.bucket = TokenBucket::new(self.catalog.catalog().requests_per_second, now);
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The catalog, as subscriptions and tokens have changed it.
    pub fn catalog(&self) -> &CatalogIndex {
        &self.catalog
    }

    /// Replace the catalog (the lifecycle admin API: subscribe, tokens, window close).
    pub fn replace_catalog(&mut self, catalog: Catalog) -> Result<(), SimError> {
        self.catalog = CatalogIndex::new(catalog)?;
        Ok(())
    }

    /// Lifecycle state (`crate::lifecycle`).
    pub fn lifecycle(&self) -> &super::lifecycle::LifecycleState {
        &self.lifecycle
    }

    /// Lifecycle state, to change.
    pub fn lifecycle_mut(&mut self) -> &mut super::lifecycle::LifecycleState {
        &mut self.lifecycle
    }

    /// The region this instance plays.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// `GET /_sim/ledger` body.
    pub fn ledger_json(&self) -> Value {
        json!({
            "region": self.region,
            "records": self.ledger.records(),
            "duplicates": self.ledger.duplicates(),
            "counters": self.counters,
        })
    }

    fn roll(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p)
    }

    fn fail(&mut self, e: ApiError) -> Reply {
        *self
            .counters
            .request_errors
            .entry(e.code.name().to_owned())
            .or_default() += 1;
        Reply::error(&e)
    }

    /// The CloudTrail log of the calls served.
    pub fn cloudtrail(&self) -> &CloudTrailLog {
        &self.cloudtrail
    }

    /// The CloudTrail log, to serve `LookupEvents` or change its delivery lag.
    pub fn cloudtrail_mut(&mut self) -> &mut CloudTrailLog {
        &mut self.cloudtrail
    }

    /// Handle `AWSMPMeteringService.BatchMeterUsage` and log the call as CloudTrail would.
    /// `at` is the arrival time for the quota.
    pub fn batch_meter_usage(&mut self, body: &[u8], at: Instant) -> Reply {
        let reply = self.serve_batch_meter_usage(body, at);
        let ids = (
            uuid::Uuid::new_v4().to_string(),
            uuid::Uuid::new_v4().to_string(),
        );
        let now = self.now();
        self.cloudtrail
            .record_batch_meter_usage(&self.region, body, &reply, now, ids);
        reply
    }

    fn serve_batch_meter_usage(&mut self, body: &[u8], at: Instant) -> Reply {
        self.counters.requests += 1;
        // Deprovisioned licenses whose final hour is over stop being billable.
        if let Err(e) = super::lifecycle::settle(self) {
            tracing::error!(error = %e, "closing deprovisioning windows failed");
        }
        if let Err(e) = self.admit(at) {
            return self.fail(e);
        }
        let now = self.now();
        let validated = match parse_batch_request(body)
            .and_then(|req| validate_batch(&req, &self.catalog, now, self.limits).map(|v| (req, v)))
        {
            Ok(v) => v,
            Err(e) => return self.fail(e),
        };
        let (req, validated) = validated;
        let mut results = Vec::with_capacity(validated.len());
        let mut unprocessed = Vec::new();
        for (v, raw) in validated.into_iter().zip(req.raw_records) {
            if self.roll(self.faults.unprocessed_rate) {
                self.counters.unprocessed += 1;
                unprocessed.push(raw);
                continue;
            }
            results.push(self.apply(v, raw, now));
        }
        if self.roll(self.faults.apply_then_fail_rate) {
            self.counters.apply_then_fail += 1;
            return self.fail(ApiError::new(
                ErrorCode::InternalServiceError,
                "An internal error has occurred (injected after the records were applied)",
            ));
        }
        Reply::ok(json!({"Results": results, "UnprocessedRecords": unprocessed}))
    }

    /// Request-level refusals before anything is read: a disabled region, the quota, and the
    /// injected throttling and internal errors.
    fn admit(&mut self, at: Instant) -> Result<(), ApiError> {
        if self.disabled {
            return Err(ApiError::new(
                ErrorCode::DisabledApi,
                format!("BatchMeterUsage is not available in {}", self.region),
            ));
        }
        if !self.bucket.try_take(at) {
            self.counters.throttled += 1;
            return Err(ApiError::new(ErrorCode::Throttling, "Rate exceeded"));
        }
        if self.roll(self.faults.throttle_rate) {
            self.counters.throttled += 1;
            return Err(ApiError::new(
                ErrorCode::Throttling,
                "Rate exceeded (injected)",
            ));
        }
        if self.roll(self.faults.internal_error_rate) {
            self.counters.internal_errors += 1;
            return Err(ApiError::new(
                ErrorCode::InternalServiceError,
                "An internal error has occurred (injected, nothing applied)",
            ));
        }
        Ok(())
    }

    /// One validated record against the ledger: its entry of `Results`.
    fn apply(&mut self, v: ValidatedRecord, raw: Value, now: DateTime<Utc>) -> Value {
        let product_code = match v.disposition {
            Disposition::NotSubscribed => {
                self.counters.customer_not_subscribed += 1;
                return json!({"UsageRecord": raw, "Status": "CustomerNotSubscribed"});
            }
            Disposition::Billable { product_code } => product_code,
        };
        let outcome = self.ledger.write(
            &v.key,
            &product_code,
            v.record.quantity,
            &v.record.usage_allocations,
            now,
            || match &mut self.sequential_ids {
                Some(n) => {
                    *n += 1;
                    format!("00000000-0000-4000-8000-{n:012x}")
                }
                None => uuid::Uuid::new_v4().to_string(),
            },
        );
        let (status, id) = match outcome {
            WriteOutcome::Billed(id) => {
                self.counters.success += 1;
                ("Success", id)
            }
            WriteOutcome::IdenticalRetry(id) => {
                self.counters.identical_retries += 1;
                ("Success", id)
            }
            WriteOutcome::Duplicate(id) => {
                self.counters.duplicate_record += 1;
                ("DuplicateRecord", id)
            }
        };
        json!({"UsageRecord": raw, "MeteringRecordId": id, "Status": status})
    }

    /// Handle `AWSMPMeteringService.ResolveCustomer`.
    pub fn resolve_customer(&mut self, body: &[u8]) -> Reply {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(rename = "RegistrationToken")]
            registration_token: Option<String>,
        }
        let wire: Wire = match serde_json::from_slice(body) {
            Ok(w) => w,
            Err(e) => {
                return Reply::error(&ApiError::new(
                    ErrorCode::Serialization,
                    format!("cannot decode request: {e}"),
                ));
            }
        };
        let Some(token) = wire.registration_token.filter(|t| !t.is_empty()) else {
            return Reply::error(&ApiError::new(
                ErrorCode::Validation,
                "RegistrationToken is required",
            ));
        };
        let now = self.now();
        match self.catalog.token(&token) {
            None => Reply::error(&ApiError::new(
                ErrorCode::InvalidToken,
                "Registration token is invalid",
            )),
            Some((_, t)) if now >= t.expires_at => Reply::error(&ApiError::new(
                ErrorCode::ExpiredToken,
                format!(
                    "Registration token expired at {}",
                    t.expires_at.to_rfc3339()
                ),
            )),
            // CustomerIdentifier is deprecated and absent for Concurrent Agreements products.
            Some((p, t)) => Reply::ok(json!({
                "CustomerAWSAccountId": t.customer_aws_account_id,
                "LicenseArn": t.license_arn,
                "ProductCode": p.product_code,
            })),
        }
    }
}

#[cfg(test)]
mod tests;
