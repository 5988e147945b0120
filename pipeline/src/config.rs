//! Stage configuration, read once from the environment at start-up (fail fast).

use crate::error::{PipelineError, Result};
use awsmp_contract::limits::marketplace::BATCH_METER_USAGE_CALLS_PER_SECOND;
use awsmp_contract::time::TimeConfig;
use std::collections::BTreeSet;

/// `DeploymentMode`: which components exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentMode {
    /// Raw usage table + discoverer → aggregator → cleanup → submitter → expiry.
    Full,
    /// Only aggregated-usage + submitter + expiry: the seller writes final hourly records.
    DirectSubmit,
}

/// `MeteringMode`: whether the submitter calls BatchMeterUsage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeteringMode {
    /// Call the API.
    Live,
    /// Never call it; records end `DryRunSubmitted`.
    DryRun,
}

/// Everything a stage reads from its environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Lock, window and TTL rules.
    pub time: TimeConfig,
    /// Deployment mode.
    pub deployment_mode: DeploymentMode,
    /// Metering mode.
    pub metering_mode: MeteringMode,
    /// Accounts allowed to carry dry-run traffic (dry-run needs a test-account allowlist).
    pub dry_run_accounts: BTreeSet<String>,
    /// The product this stack meters (one main stack per product and region).
    pub product_code: String,
    /// Raw usage table (full mode only).
    pub usage_table: Option<String>,
    /// Aggregated-usage table.
    pub aggregated_table: String,
    /// Subscribers table (its deprovisioning index), if configured.
    pub subscribers_table: Option<String>,
    /// Region of the subscribers table (`AWSMP_EVENTS_REGION`): the events stack's, us-east-1
    /// in AWS (docs/deploy.md); `None` (unset or empty): the function's own region.
    pub events_region: Option<String>,
    /// Work queue URL (full mode).
    pub work_queue_url: Option<String>,
    /// Deprovision-work queue URL (full mode).
    pub deprovision_work_queue_url: Option<String>,
    /// Cleanup queue URL (full mode).
    pub cleanup_queue_url: Option<String>,
    /// Aggregated-usage TTL in days (0 = keep; set only on `Success`).
    pub aggregated_ttl_days: u32,
    /// Most aggregated records the submitter reads per run in its ordinary pass.
    pub submitter_max_records_per_run: usize,
    /// Wall-clock budget of one submitter run, in seconds (the Lambda timeout minus headroom).
    pub submitter_time_budget_secs: u64,
    /// The submitter's share of the account and region's `BatchMeterUsage` quota, in calls per
    /// second (`AWSMP_SUBMITTER_CALLS_PER_SECOND`, 1 to the quota): every product metered in
    /// the account and region shares the quota, so the shares must add up to at most it.
    pub submitter_calls_per_second: u32,
    /// CloudWatch namespace for EMF metrics.
    pub metrics_namespace: String,
    /// Ingest-watermark table (`AWSMP_INGEST_WATERMARK_TABLE`); unset: no fence (rows written
    /// without the stream, docs/guarantees.md "Ingest watermark").
    pub ingest_watermark_table: Option<String>,
    /// The usage stream whose shards' watermarks the discoverer's fence waits for
    /// (`AWSMP_USAGE_STREAM`; needed with `ingest_watermark_table`).
    pub usage_stream: Option<String>,
    /// Settle margin past an hour's end the watermark must reach before the hour is
    /// aggregated (`AWSMP_WATERMARK_SETTLE_SECONDS`).
    pub watermark_settle_secs: u64,
}

/// Default ordinary-pass cap per submitter run: 300 s × 10 calls/s × 25 records, halved for headroom.
pub const DEFAULT_SUBMITTER_MAX_RECORDS_PER_RUN: usize = 37_500;
/// Default submitter run budget: the 5-minute schedule minus a minute of headroom.
pub const DEFAULT_SUBMITTER_TIME_BUDGET_SECS: u64 = 240;
/// Default share of the `BatchMeterUsage` quota: 2 of its 10 calls/s, so up to five products
/// metered in one account and region stay within it without configuration; a seller with a
/// single product there sets [`BATCH_METER_USAGE_CALLS_PER_SECOND`]. Throttling beyond it is
/// still retried (docs/operations.md, "Quota share").
pub const DEFAULT_SUBMITTER_CALLS_PER_SECOND: u32 = 2;

/// Default settle margin: two minutes past an hour's end, for records Kinesis accepted just
/// before the hour closed to reach the consumer (docs/guarantees.md, "Ingest watermark").
pub const DEFAULT_WATERMARK_SETTLE_SECS: u64 = 120;

impl Config {
    /// Read from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read from any lookup (tests, the local runner).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let num = |k: &str, default: u64| -> Result<u64> {
            get(k).map_or(Ok(default), |v| {
                v.trim()
                    .parse()
                    .map_err(|_| PipelineError::Config(format!("{k}={v:?} is not a number")))
            })
        };
        let time = TimeConfig::new(
            num("AWSMP_METERING_LOCK_HOURS", 1)? as u32,
            num("AWSMP_BILLABLE_WINDOW_HOURS", 24)? as u32,
            num("AWSMP_USAGE_TABLE_TTL_DAYS", 365)? as u32,
        )?;
        let (deployment_mode, metering_mode) = modes(&get)?;
        let dry_run_accounts: BTreeSet<String> = get("AWSMP_DRY_RUN_ACCOUNTS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if metering_mode == MeteringMode::DryRun && dry_run_accounts.is_empty() {
            return Err(PipelineError::Config(
                "dry-run needs AWSMP_DRY_RUN_ACCOUNTS (the test-account allowlist)".into(),
            ));
        }
        let required = |k: &str| {
            get(k)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| PipelineError::Config(format!("{k} is not set")))
        };
        let full = deployment_mode == DeploymentMode::Full;
        let full_only = |k: &str| {
            if full {
                required(k).map(Some)
            } else {
                Ok(get(k).filter(|v| !v.is_empty()))
            }
        };
        Ok(Self {
            time,
            deployment_mode,
            metering_mode,
            dry_run_accounts,
            product_code: required("AWSMP_PRODUCT_CODE")?,
            usage_table: full_only("AWSMP_USAGE_TABLE")?,
            aggregated_table: required("AWSMP_AGGREGATED_USAGE_TABLE")?,
            subscribers_table: get("AWSMP_SUBSCRIBERS_TABLE").filter(|v| !v.is_empty()),
            events_region: events_region(get("AWSMP_EVENTS_REGION"))?,
            work_queue_url: full_only("AWSMP_WORK_QUEUE_URL")?,
            deprovision_work_queue_url: full_only("AWSMP_DEPROVISION_WORK_QUEUE_URL")?,
            cleanup_queue_url: full_only("AWSMP_CLEANUP_QUEUE_URL")?,
            aggregated_ttl_days: num("AWSMP_AGGREGATED_USAGE_TABLE_TTL_DAYS", 0)? as u32,
            submitter_max_records_per_run: num(
                "AWSMP_SUBMITTER_MAX_RECORDS_PER_RUN",
                DEFAULT_SUBMITTER_MAX_RECORDS_PER_RUN as u64,
            )? as usize,
            submitter_time_budget_secs: num(
                "AWSMP_SUBMITTER_TIME_BUDGET_SECS",
                DEFAULT_SUBMITTER_TIME_BUDGET_SECS,
            )?,
            submitter_calls_per_second: calls_per_second(num(
                "AWSMP_SUBMITTER_CALLS_PER_SECOND",
                u64::from(DEFAULT_SUBMITTER_CALLS_PER_SECOND),
            )?)?,
            metrics_namespace: get("AWSMP_METRICS_NAMESPACE")
                .unwrap_or_else(|| awsmp_aws::emf::DEFAULT_NAMESPACE.into()),
            ingest_watermark_table: get("AWSMP_INGEST_WATERMARK_TABLE").filter(|v| !v.is_empty()),
            usage_stream: get("AWSMP_USAGE_STREAM").filter(|v| !v.is_empty()),
            watermark_settle_secs: num(
                "AWSMP_WATERMARK_SETTLE_SECONDS",
                DEFAULT_WATERMARK_SETTLE_SECS,
            )?,
        })
    }
}

/// `AWSMP_DEPLOYMENT_MODE` and `AWSMP_METERING_MODE`.
fn modes(get: &impl Fn(&str) -> Option<String>) -> Result<(DeploymentMode, MeteringMode)> {
    let deployment_mode = match get("AWSMP_DEPLOYMENT_MODE").as_deref().unwrap_or("full") {
        "full" => DeploymentMode::Full,
        "direct-submit" => DeploymentMode::DirectSubmit,
        other => {
            return Err(PipelineError::Config(format!(
                "AWSMP_DEPLOYMENT_MODE={other:?}: full | direct-submit"
            )));
        }
    };
    let metering_mode = match get("AWSMP_METERING_MODE").as_deref().unwrap_or("live") {
        "live" => MeteringMode::Live,
        "dry-run" => MeteringMode::DryRun,
        other => {
            return Err(PipelineError::Config(format!(
                "AWSMP_METERING_MODE={other:?}: live | dry-run"
            )));
        }
    };
    Ok((deployment_mode, metering_mode))
}

/// `AWSMP_EVENTS_REGION`: unset or empty is the function's region; otherwise a region name
/// (`us-east-1`: lowercase letters, digits and dashes,
/// https://docs.aws.amazon.com/general/latest/gr/rande.html).
fn events_region(v: Option<String>) -> Result<Option<String>> {
    let Some(v) = v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let well_formed = v.contains('-')
        && v.split('-').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
    if well_formed {
        Ok(Some(v))
    } else {
        Err(PipelineError::Config(format!(
            "AWSMP_EVENTS_REGION={v:?} is not a region name (e.g. us-east-1)"
        )))
    }
}

/// The submitter's quota share: 1 to [`BATCH_METER_USAGE_CALLS_PER_SECOND`].
fn calls_per_second(n: u64) -> Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=BATCH_METER_USAGE_CALLS_PER_SECOND).contains(n))
        .ok_or_else(|| {
            PipelineError::Config(format!(
                "AWSMP_SUBMITTER_CALLS_PER_SECOND={n}: 1..={BATCH_METER_USAGE_CALLS_PER_SECOND} (the account and region's BatchMeterUsage quota, shared by every product metered there)"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    const FULL: &[(&str, &str)] = &[
        ("AWSMP_PRODUCT_CODE", "p"),
        ("AWSMP_USAGE_TABLE", "u"),
        ("AWSMP_AGGREGATED_USAGE_TABLE", "a"),
        ("AWSMP_WORK_QUEUE_URL", "w"),
        ("AWSMP_DEPROVISION_WORK_QUEUE_URL", "d"),
        ("AWSMP_CLEANUP_QUEUE_URL", "c"),
    ];

    #[test]
    fn full_mode_needs_its_tables_and_queues() {
        assert!(cfg(FULL).is_ok());
        assert!(cfg(&FULL[..5]).is_err());
    }

    #[test]
    fn direct_submit_needs_only_the_aggregated_table() {
        let c = cfg(&[
            ("AWSMP_PRODUCT_CODE", "p"),
            ("AWSMP_AGGREGATED_USAGE_TABLE", "a"),
            ("AWSMP_DEPLOYMENT_MODE", "direct-submit"),
        ])
        .unwrap();
        assert_eq!(c.deployment_mode, DeploymentMode::DirectSubmit);
        assert!(c.usage_table.is_none());
    }

    #[test]
    fn rejects_bad_values() {
        let mut v = FULL.to_vec();
        v.push(("AWSMP_METERING_LOCK_HOURS", "21"));
        assert!(cfg(&v).is_err());
        let mut v = FULL.to_vec();
        v.push(("AWSMP_METERING_MODE", "dry-run"));
        assert!(cfg(&v).is_err(), "dry-run without an allowlist");
        v.push(("AWSMP_DRY_RUN_ACCOUNTS", "111122223333"));
        assert_eq!(cfg(&v).unwrap().metering_mode, MeteringMode::DryRun);
    }

    #[test]
    fn the_quota_share_is_validated_and_defaults_below_the_quota() {
        let share = |v: &str| {
            let mut pairs = FULL.to_vec();
            pairs.push(("AWSMP_SUBMITTER_CALLS_PER_SECOND", v));
            cfg(&pairs).map(|c| c.submitter_calls_per_second)
        };
        assert_eq!(cfg(FULL).unwrap().submitter_calls_per_second, 2);
        assert_eq!(share("10").unwrap(), 10);
        assert_eq!(share("1").unwrap(), 1);
        for bad in ["0", "11", "-1", "x", "4294967297"] {
            assert!(share(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_events_region_defaults_to_the_functions_and_is_validated() {
        let region = |v: Option<&str>| {
            let mut pairs = FULL.to_vec();
            pairs.push(("AWSMP_SUBSCRIBERS_TABLE", "subscribers"));
            if let Some(v) = v {
                pairs.push(("AWSMP_EVENTS_REGION", v));
            }
            cfg(&pairs).map(|c| c.events_region)
        };
        assert_eq!(region(None).unwrap(), None);
        assert_eq!(region(Some("")).unwrap(), None);
        assert_eq!(region(Some("  ")).unwrap(), None);
        assert_eq!(
            region(Some("us-east-1")).unwrap().as_deref(),
            Some("us-east-1")
        );
        assert_eq!(
            region(Some(" eu-west-1 ")).unwrap().as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            region(Some("us-gov-west-1")).unwrap().as_deref(),
            Some("us-gov-west-1")
        );
        for bad in [
            "US-EAST-1",
            "us east 1",
            "useast1",
            "us--east-1",
            "-us-east-1",
            "us-east-1/",
        ] {
            let err = region(Some(bad)).unwrap_err().to_string();
            assert!(err.contains("AWSMP_EVENTS_REGION"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_flush_lead_covers_the_chain_from_fence_to_billed_with_one_flush_run_lost() {
        // Seconds from the flush's instant until the hour is billed, worst case: the fence's
        // settle margin (this file), a heartbeat (infra/ingest.yaml), two runs of
        // the flush (one failed) and one of the submitter (infra/main.yaml).
        const HEARTBEAT_SECS: u64 = 60;
        const FLUSH_EVERY_SECS: u64 = 300;
        const SUBMIT_EVERY_SECS: u64 = 300;
        let chain = DEFAULT_WATERMARK_SETTLE_SECS
            + HEARTBEAT_SECS
            + 2 * FLUSH_EVERY_SECS
            + SUBMIT_EVERY_SECS;
        assert!(
            chain <= awsmp_contract::time::FLUSH_CURRENT_HOUR_LEAD_MINUTES as u64 * 60,
            "{chain} s"
        );
    }
}
