//! Configuration from the environment, read once at start-up (fail fast).
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `AWSMP_USAGE_TABLE` | usage table | required |
//! | `AWSMP_AGGREGATED_USAGE_TABLE` | aggregated-usage table (finalized group-hours) | required |
//! | `AWSMP_DEDUP_TABLE` | dedup table | required |
//! | `AWSMP_REJECTED_EVENTS_TABLE` | rejected-events table | required |
//! | `AWSMP_TIMESTAMP_POLICY` | `arrival`, `server` or `trusted-client` (docs/guarantees.md, "Billing time") | `arrival` |
//! | `AWSMP_MAX_CLOCK_SKEW_SECONDS` | client vs arrival time bound | 60 |
//! | `AWSMP_ALLOWED_PRODUCERS` | comma-separated producer ids (unset: any) | unset |
//! | `AWSMP_DEDUP_TTL_HOURS` | dedup claim lifetime, 24–72 | 48 |
//! | `AWSMP_USAGE_TABLE_TTL_DAYS` | row `ttl` after its second (0: none; else ≥ 2) | 365 |
//! | `AWSMP_REJECTED_EVENTS_TTL_DAYS` | rejected-events `ttl` (0: keep) | 400 |
//! | `AWSMP_BILLABLE_WINDOW_HOURS` | window bounding trusted client time | 24 |
//! | `AWSMP_CONSUMER_CONCURRENCY` | concurrent store calls | 16 |
//! | `AWSMP_METRICS_NAMESPACE` | EMF namespace | `awsmp` |
//! | `AWSMP_BILLING_ARCHIVE_BUCKET` | the billing archive's bucket (docs/meter-ingest.md, "Billing archive") | unset: not archived |
//! | `AWSMP_INGEST_WATERMARK_TABLE` | per-shard applied arrival time, read by the discoverer's fence (docs/guarantees.md, "Ingest watermark") | unset: not published |

use std::collections::HashSet;

use awsmp_contract::time::{DEFAULT_BILLABLE_WINDOW_HOURS, MIN_METERING_LOCK_HOURS, TimeConfig};

use crate::domain::verify::{DEFAULT_MAX_CLOCK_SKEW_SECONDS, TimestampPolicy, VerifyPolicy};
use crate::error::{ConsumerError, Result};
use crate::handler::Settings;

/// Shortest dedup TTL (the dedup store keeps claims 24–72 h; docs/guarantees.md).
pub const MIN_DEDUP_TTL_HOURS: u32 = 24;
/// Longest dedup TTL.
pub const MAX_DEDUP_TTL_HOURS: u32 = 72;

/// The consumer's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Usage table.
    pub usage_table: String,
    /// Aggregated-usage table.
    pub aggregated_table: String,
    /// Dedup table.
    pub dedup_table: String,
    /// Rejected-events table.
    pub rejected_table: String,
    /// Ingest-watermark table, if the discoverer fences on it.
    pub ingest_watermark_table: Option<String>,
    /// The billing archive's bucket, if events are archived.
    pub archive_bucket: Option<String>,
    /// EMF namespace.
    pub metrics_namespace: String,
    /// Handler tunables.
    pub settings: Settings,
}

impl Config {
    /// From the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// From any variable lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let required = |k: &str| {
            get(k)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| ConsumerError::Config(format!("{k} is not set")))
        };
        let number = |k: &str, default: u32| -> Result<u32> {
            match get(k).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => v
                    .parse()
                    .map_err(|_| ConsumerError::Config(format!("{k}={v:?} is not a whole number"))),
            }
        };
        let policy = match get("AWSMP_TIMESTAMP_POLICY").filter(|v| !v.is_empty()) {
            None => TimestampPolicy::Arrival,
            Some(v) => v.parse().map_err(ConsumerError::Config)?,
        };
        let skew = number(
            "AWSMP_MAX_CLOCK_SKEW_SECONDS",
            DEFAULT_MAX_CLOCK_SKEW_SECONDS as u32,
        )?;
        let dedup_hours = number("AWSMP_DEDUP_TTL_HOURS", 48)?;
        if !(MIN_DEDUP_TTL_HOURS..=MAX_DEDUP_TTL_HOURS).contains(&dedup_hours) {
            return Err(ConsumerError::Config(format!(
                "AWSMP_DEDUP_TTL_HOURS={dedup_hours} is outside {MIN_DEDUP_TTL_HOURS}-{MAX_DEDUP_TTL_HOURS}"
            )));
        }
        let usage_ttl_days = number("AWSMP_USAGE_TABLE_TTL_DAYS", 365)?;
        let window = number("AWSMP_BILLABLE_WINDOW_HOURS", DEFAULT_BILLABLE_WINDOW_HOURS)?;
        // The lock does not matter to the consumer; TimeConfig validates window and TTL.
        let time = TimeConfig::new(MIN_METERING_LOCK_HOURS, window, usage_ttl_days)?;
        let allowed_producers = get("AWSMP_ALLOWED_PRODUCERS")
            .filter(|v| !v.trim().is_empty())
            .map(|v| {
                v.split(',')
                    .map(|p| p.trim().to_owned())
                    .filter(|p| !p.is_empty())
                    .collect::<HashSet<_>>()
            });
        let concurrency = number(
            "AWSMP_CONSUMER_CONCURRENCY",
            crate::handler::DEFAULT_STORE_CONCURRENCY as u32,
        )?
        .max(1) as usize;
        Ok(Self {
            usage_table: required("AWSMP_USAGE_TABLE")?,
            aggregated_table: required("AWSMP_AGGREGATED_USAGE_TABLE")?,
            dedup_table: required("AWSMP_DEDUP_TABLE")?,
            rejected_table: required("AWSMP_REJECTED_EVENTS_TABLE")?,
            ingest_watermark_table: get("AWSMP_INGEST_WATERMARK_TABLE").filter(|v| !v.is_empty()),
            archive_bucket: get("AWSMP_BILLING_ARCHIVE_BUCKET").filter(|v| !v.is_empty()),
            metrics_namespace: get("AWSMP_METRICS_NAMESPACE")
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| awsmp_aws::emf::DEFAULT_NAMESPACE.to_owned()),
            settings: Settings {
                verify: VerifyPolicy {
                    timestamp: policy,
                    max_clock_skew: chrono::Duration::seconds(i64::from(skew)),
                    allowed_producers,
                    time,
                },
                dedup_ttl: chrono::Duration::hours(i64::from(dedup_hours)),
                usage_ttl_days,
                rejected_ttl_days: number("AWSMP_REJECTED_EVENTS_TTL_DAYS", 400)?,
                concurrency,
                ..Settings::default()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn base() -> HashMap<&'static str, &'static str> {
        HashMap::from([
            ("AWSMP_USAGE_TABLE", "u"),
            ("AWSMP_AGGREGATED_USAGE_TABLE", "a"),
            ("AWSMP_DEDUP_TABLE", "d"),
            ("AWSMP_REJECTED_EVENTS_TABLE", "r"),
        ])
    }

    fn load(vars: &HashMap<&str, &str>) -> Result<Config> {
        Config::from_lookup(|k| vars.get(k).map(|v| (*v).to_owned()))
    }

    #[test]
    fn defaults() {
        let c = load(&base()).unwrap();
        assert_eq!(c.settings.verify.timestamp, TimestampPolicy::Arrival);
        assert_eq!(c.settings.verify.max_clock_skew.num_seconds(), 60);
        assert_eq!(c.settings.dedup_ttl.num_hours(), 48);
        assert_eq!(c.settings.usage_ttl_days, 365);
        assert!(c.settings.verify.allowed_producers.is_none());
    }

    #[test]
    fn every_bad_value_fails_fast() {
        let mut missing = base();
        missing.remove("AWSMP_DEDUP_TABLE");
        assert!(load(&missing).is_err());
        for (k, v) in [
            ("AWSMP_TIMESTAMP_POLICY", "client"),
            ("AWSMP_DEDUP_TTL_HOURS", "12"),
            ("AWSMP_DEDUP_TTL_HOURS", "73"),
            ("AWSMP_MAX_CLOCK_SKEW_SECONDS", "-1"),
            ("AWSMP_USAGE_TABLE_TTL_DAYS", "1"),
        ] {
            let mut vars = base();
            vars.insert(k, v);
            assert!(load(&vars).is_err(), "{k}={v}");
        }
        let mut vars = base();
        vars.insert("AWSMP_TIMESTAMP_POLICY", "trusted-client");
        vars.insert("AWSMP_ALLOWED_PRODUCERS", "a, b,,");
        let c = load(&vars).unwrap();
        assert_eq!(c.settings.verify.timestamp, TimestampPolicy::TrustedClient);
        assert_eq!(
            c.settings.verify.allowed_producers,
            Some(HashSet::from(["a".to_owned(), "b".to_owned()]))
        );
    }
}
