//! Shared helpers of the pipeline test plan and fault tests: the local stack's clients, raw
//! row and aggregated-record builders, read-back and assertion helpers, the simulator's admin
//! API, and a queue that loses every message. Faults are injected with the test kit
//! (`awsmp_testkit::ports::Faulty` under a `FaultPlan`).
//!
//! Isolation: every test of a binary takes [`STACK`] (one runner at a time: the simulator's
//! clock is global), uses its own demo licenses and its own year, and asserts only on its own
//! rows, records and ledger entries.

#![allow(dead_code)] // each test binary uses a different subset

pub mod streams;

use anyhow::{Context, Result, bail, ensure};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::dynamodb::{to_domain, to_sdk};
use awsmp_contract::attrs as a;
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_contract::row::{Allocation, AttrValue, RawUsageRow, Tag, conforming_row};
use awsmp_local_stack::local::{LocalEnv, demo_account, demo_license_arn};
use awsmp_local_stack::runner::Runner;
use awsmp_pipeline::adapters::dynamodb::DynamoDbAggregatedStore;
use awsmp_pipeline::ports::{AggregatedItem, AggregatedStore, MessageQueue};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::sync::{Arc, LazyLock, Mutex};

/// Why the stack tests are ignored by a plain `cargo test`.
pub const NEEDS_STACK: &str = "needs the local stack (awsmp-local up); run by scripts/test";

/// One local-stack test at a time: the simulator clock and quota are shared.
pub static STACK: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

/// Years every instant of this process is moved by: a multiple of 20 (weekdays aside, the
/// calendar repeats, leap years included), random per process, so the suite can run again on
/// the same stack without meeting the rows, records and ledger lines of an earlier run.
pub static YEARS: LazyLock<i32> = LazyLock::new(|| {
    let years = 20 * rand::random_range(0..350);
    eprintln!("test instants are moved {years} years ahead");
    years
});

/// A UTC instant, `y` moved by [`YEARS`].
pub fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y + *YEARS, mo, d, h, mi, s)
        .single()
        .expect("valid instant")
}

/// A timestamp-like string (`YYYY…`) with its year moved by [`YEARS`].
pub fn shift(s: &str) -> String {
    let year: i32 = s[..4].parse().expect("a year first");
    format!("{:04}{}", year + *YEARS, &s[4..])
}

/// An hour bucket from `YYYY-MM-DDTHH`, its year moved by [`YEARS`].
pub fn hour(s: &str) -> HourBucket {
    shift(s).parse().expect("hour bucket")
}

/// The group of demo license `i` (its own account), `dimension`, `hour`.
pub fn group(i: usize, dimension: &str, hour_bucket: &str) -> GroupKey {
    GroupKey::new(
        demo_license_arn(i),
        demo_account(i),
        dimension,
        hour(hour_bucket),
    )
}

/// A conforming raw row of `group` at `second` of its hour, with audit stamps.
pub fn row(group: &GroupKey, second: u32, quantity: u64) -> RawUsageRow {
    let mut r = conforming_row(group, second, quantity, None);
    let stamp = AttrValue::s(group.hour.start().to_rfc3339());
    r.insert(a::CREATED_AT.into(), stamp.clone());
    r.insert(a::UPDATED_AT.into(), stamp);
    r
}

/// A conforming raw row carrying VMT allocations.
pub fn row_alloc(group: &GroupKey, second: u32, allocations: &[Allocation]) -> RawUsageRow {
    let q = allocations.iter().map(|x| x.quantity).sum();
    let mut r = row(group, second, q);
    set_allocations(&mut r, allocations);
    r
}

/// Replace a row's `usageAllocations`.
pub fn set_allocations(r: &mut RawUsageRow, allocations: &[Allocation]) {
    r.insert(
        a::USAGE_ALLOCATIONS.into(),
        AttrValue::L(allocations.iter().map(Allocation::to_attr).collect()),
    );
}

/// One allocation with `tags` given as `(key, value)` pairs.
pub fn alloc(quantity: u64, tags: &[(&str, &str)]) -> Allocation {
    Allocation {
        quantity,
        tags: tags.iter().map(|(k, v)| Tag::new(*k, *v)).collect(),
    }
}

/// The sort key of a row.
pub fn sort_key(r: &RawUsageRow) -> String {
    r[a::USAGE_SORT_KEY].as_s().expect("sort key").to_owned()
}

/// A runner over the exported stack, with `overrides` on top of the environment.
pub async fn runner(overrides: &[(&str, &str)]) -> Result<Runner> {
    let overrides: BTreeMap<String, String> = overrides
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Runner::new(LocalEnv::from_process(), &overrides).await
}

/// Clients and names of the running stack.
pub struct Stack {
    /// The exported environment.
    pub env: LocalEnv,
    /// DynamoDB.
    pub ddb: aws_sdk_dynamodb::Client,
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// Raw usage table.
    pub usage_table: String,
    /// Aggregated-usage table.
    pub aggregated_table: String,
    /// Simulator admin URL.
    pub admin: String,
    http: reqwest::Client,
}

impl Stack {
    /// Clients for the stack whose env file the test script exported.
    pub async fn new() -> Result<Self> {
        let env = LocalEnv::from_process();
        let ddb = env.dynamodb().await?;
        let sqs = env.sqs().await?;
        Ok(Self {
            usage_table: env.get("AWSMP_USAGE_TABLE")?.to_owned(),
            aggregated_table: env.get("AWSMP_AGGREGATED_USAGE_TABLE")?.to_owned(),
            admin: env.get("AWSMP_SIM_ADMIN_URL")?.to_owned(),
            env,
            ddb,
            sqs,
            http: reqwest::Client::new(),
        })
    }

    /// Write raw rows as the seller would (`PutItem`, exactly the given attributes).
    pub async fn put_rows(&self, rows: &[RawUsageRow]) -> Result<()> {
        for r in rows {
            self.ddb
                .put_item()
                .table_name(&self.usage_table)
                .set_item(Some(
                    r.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect(),
                ))
                .send()
                .await
                .context("writing a raw row")?;
        }
        Ok(())
    }

    /// A raw row as stored.
    pub async fn raw(&self, license: &str, sort_key: &str) -> Result<RawUsageRow> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.usage_table)
            .key(a::LICENSE_ARN, Av::S(license.into()))
            .key(a::USAGE_SORT_KEY, Av::S(sort_key.into()))
            .consistent_read(true)
            .send()
            .await?;
        let item = out
            .item
            .with_context(|| format!("raw row {license} {sort_key} is gone"))?;
        Ok(item
            .iter()
            .map(|(k, v)| (k.clone(), to_domain(v)))
            .collect())
    }

    /// Assert a raw row is terminal with `status` and exactly `reason`.
    pub async fn assert_raw(&self, r: &RawUsageRow, status: &str, reason: &str) -> Result<()> {
        let license = r[a::LICENSE_ARN].as_s().expect("license");
        let sk = sort_key(r);
        let stored = self.raw(license, &sk).await?;
        let got = |k: &str| stored.get(k).and_then(AttrValue::as_s).map(str::to_owned);
        ensure!(
            got(a::METERING_STATUS).as_deref() == Some(status)
                && got(a::METERING_STATUS_REASON).as_deref() == Some(reason),
            "row {sk}: expected {status} / {reason:?}, got {:?} / {:?} (meteringPending {:?}, updatedAt {:?})",
            got(a::METERING_STATUS),
            got(a::METERING_STATUS_REASON),
            stored.get(a::METERING_PENDING),
            got(a::UPDATED_AT)
        );
        ensure!(
            !stored.contains_key(a::METERING_PENDING),
            "row {sk} is terminal but still carries meteringPending"
        );
        ensure!(
            stored.contains_key(a::UPDATED_AT),
            "row {sk} has no updatedAt"
        );
        Ok(())
    }

    /// Assert a raw row is still pending and carries no status.
    pub async fn assert_pending(&self, r: &RawUsageRow) -> Result<()> {
        let license = r[a::LICENSE_ARN].as_s().expect("license");
        let sk = sort_key(r);
        let stored = self.raw(license, &sk).await?;
        ensure!(
            stored.contains_key(a::METERING_PENDING) && !stored.contains_key(a::METERING_STATUS),
            "row {sk} should still be pending: {stored:?}"
        );
        Ok(())
    }

    /// The aggregated record of `group`, if any.
    pub async fn aggregated(&self, group: &GroupKey) -> Result<Option<AggregatedItem>> {
        Ok(
            DynamoDbAggregatedStore::new(self.ddb.clone(), &self.aggregated_table)
                .get(group)
                .await?,
        )
    }

    /// The aggregated record of `group`, which must exist.
    pub async fn record(&self, group: &GroupKey) -> Result<AggregatedItem> {
        self.aggregated(group)
            .await?
            .with_context(|| format!("no aggregated record for {group}"))
    }

    /// Write a finalized hourly record straight into aggregated-usage, as a direct-submit
    /// seller does: exactly the contract's attributes.
    pub async fn put_direct_record(&self, group: &GroupKey, quantity: u64) -> Result<()> {
        let item: HashMap<String, Av> = HashMap::from([
            (a::LICENSE_ARN.into(), Av::S(group.license_arn.clone())),
            (
                a::AGGREGATED_SORT_KEY.into(),
                Av::S(group.aggregated_sort_key()),
            ),
            (
                a::CUSTOMER_AWS_ACCOUNT_ID.into(),
                Av::S(group.customer_aws_account_id.clone()),
            ),
            (a::DIMENSION.into(), Av::S(group.dimension.clone())),
            (a::HOUR_BUCKET.into(), Av::S(group.hour.to_string())),
            (a::QUANTITY.into(), Av::N(quantity.to_string())),
            (a::METERING_PENDING.into(), Av::S(group.hour.to_string())),
        ]);
        self.ddb
            .put_item()
            .table_name(&self.aggregated_table)
            .set_item(Some(item))
            .send()
            .await
            .context("writing a direct-submit record")?;
        Ok(())
    }

    /// Send `body` to the queue whose URL is in `env_key`.
    pub async fn send(&self, env_key: &str, body: &str) -> Result<()> {
        self.sqs
            .send_message()
            .queue_url(self.env.get(env_key)?)
            .message_body(body)
            .send()
            .await?;
        Ok(())
    }

    /// The simulator's whole ledger.
    pub async fn ledger_json(&self) -> Result<Value> {
        Ok(self
            .http
            .get(format!("{}/_sim/ledger", self.admin))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Ledger lines (billed records and duplicate attempts) of one license, for hours of this
    /// process's years only (an earlier run on the same stack used other years).
    pub async fn ledger(&self, license: &str) -> Result<LicenseLedger> {
        let v = self.ledger_json().await?;
        let ours = |r: &Value| {
            r["hour"]
                .as_str()
                .and_then(|h| h.get(..4))
                .and_then(|y| y.parse::<i32>().ok())
                .is_some_and(|y| (2030..2100).contains(&(y - *YEARS)))
        };
        let of = |k: &str| -> Vec<Value> {
            v[k].as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["licenseArn"] == license && ours(r))
                .cloned()
                .collect()
        };
        Ok(LicenseLedger {
            records: of("records"),
            duplicates: of("duplicates"),
        })
    }

    /// The simulator's counters.
    pub async fn counters(&self) -> Result<Value> {
        Ok(self.ledger_json().await?["counters"].clone())
    }

    /// Replace the simulator's faults; the returned guard puts zeros back when dropped, even
    /// when the test fails.
    pub async fn faults(&self, faults: Value) -> Result<FaultGuard> {
        let guard = FaultGuard {
            admin: self.admin.clone(),
        };
        self.post_faults(faults).await?;
        Ok(guard)
    }

    /// Replace the simulator's faults.
    pub async fn post_faults(&self, faults: Value) -> Result<()> {
        let res = self
            .http
            .post(format!("{}/_sim/faults", self.admin))
            .json(&faults)
            .send()
            .await?;
        if !res.status().is_success() {
            bail!("setting faults: {} {}", res.status(), res.text().await?);
        }
        Ok(())
    }
}

/// One license's view of the simulator ledger.
#[derive(Debug, Clone)]
pub struct LicenseLedger {
    /// Billed records.
    pub records: Vec<Value>,
    /// Resubmissions with another quantity (not billed).
    pub duplicates: Vec<Value>,
}

impl LicenseLedger {
    /// The billed record of `group`, if any.
    pub fn record(&self, group: &GroupKey) -> Option<&Value> {
        self.records.iter().find(|r| {
            r["customerAWSAccountId"] == group.customer_aws_account_id.as_str()
                && r["dimension"] == group.dimension.as_str()
                && r["hour"] == group.hour.to_string().as_str()
        })
    }

    /// The billed record of `group`, which must exist exactly once.
    pub fn billed(&self, group: &GroupKey) -> Result<&Value> {
        let n = self
            .records
            .iter()
            .filter(|r| {
                r["customerAWSAccountId"] == group.customer_aws_account_id.as_str()
                    && r["dimension"] == group.dimension.as_str()
                    && r["hour"] == group.hour.to_string().as_str()
            })
            .count();
        ensure!(n == 1, "{group}: {n} ledger records, expected exactly 1");
        Ok(self.record(group).expect("counted"))
    }
}

/// Puts the simulator's faults back to zero on drop (a raw HTTP/1.1 request: drop is sync).
pub struct FaultGuard {
    admin: String,
}

impl Drop for FaultGuard {
    fn drop(&mut self) {
        if let Err(e) = post_zero_faults(&self.admin) {
            eprintln!("could not reset simulator faults: {e:#}");
        }
    }
}

fn post_zero_faults(admin: &str) -> Result<()> {
    let host = admin
        .strip_prefix("http://")
        .context("admin URL is not http://")?;
    let body = json!({"throttleRate":0.0,"internalErrorRate":0.0,"unprocessedRate":0.0,
        "applyThenFailRate":0.0,"latencyMs":0,"seed":1})
    .to_string();
    let mut s = std::net::TcpStream::connect(host)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(
        s,
        "POST /_sim/faults HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    ensure!(answer.starts_with("HTTP/1.1 200"), "answer: {answer}");
    Ok(())
}

/// EMF data points named `name` captured by `runner`.
pub fn points(runner: &Runner, name: &str) -> Vec<Value> {
    runner.metrics.points(name)
}

/// Whether `runner` emitted `name` with dimension `dim` = `value`.
pub fn has_point(runner: &Runner, name: &str, dim: &str, value: &str) -> bool {
    points(runner, name).iter().any(|p| {
        p[dim] == value
            && p["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == dim))
    })
}

/// A message queue that accepts every send and delivers nothing (a lost message). A queue's
/// behaviour, not a call fault: every send succeeds and applies, so no `Fault` of the test kit
/// (each of which fails a call, or loses only its answer) names it.
pub struct BlackHoleQueue {
    /// Bodies swallowed.
    pub swallowed: Mutex<Vec<String>>,
}

impl BlackHoleQueue {
    /// A new black hole.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            swallowed: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl MessageQueue for BlackHoleQueue {
    async fn send_all(&self, bodies: &[String]) -> awsmp_pipeline::Result<()> {
        self.swallowed
            .lock()
            .expect("poisoned")
            .extend_from_slice(bodies);
        Ok(())
    }
}
