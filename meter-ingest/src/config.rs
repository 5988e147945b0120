//! Configuration of the `meter-ingest` Lambda, read once at start-up (fail fast).
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `AWSMP_INGEST_MAPPING_TABLE` | the mapping table (invoked ARN → what the module may bill) | required |
//! | `AWSMP_DEDUP_TABLE` | the dedup table: event-id claims and rate counters | required |
//! | `AWSMP_USAGE_STREAM` | the usage stream accepted events go to | required |
//! | `AWSMP_INGEST_HELD_TABLE` | held and rejected events | required |
//! | `AWSMP_ENVIRONMENT` | this function's environment (`prod`, `staging`, …) | required |
//! | `AWSMP_ALLOWED_ACCOUNTS` | comma-separated accounts whose aliases may invoke it | required |
//! | `AWSMP_MAX_CLOCK_SKEW_SECONDS` | `recordedAtHint` vs receive time bound | 60 |
//! | `AWSMP_DEDUP_TTL_HOURS` | event-id claim lifetime, 24–72 | 48 |
//! | `AWSMP_INGEST_MAPPING_CACHE_SECONDS` | how long a mapping entry is cached (an absent one: at most 5 s) | 30 |
//! | `AWSMP_REJECTED_EVENTS_TTL_DAYS` | TTL of rejected events (0: keep; held ones are always kept) | 400 |
//! | `AWSMP_CONSUMER_CONCURRENCY` | concurrent store calls | 16 |
//! | `AWSMP_METRICS_NAMESPACE` | EMF namespace | `awsmp` |

use std::collections::HashSet;

use crate::error::{IngestError, Result};
use awsmp_consumer::config::{MAX_DEDUP_TTL_HOURS, MIN_DEDUP_TTL_HOURS};
use awsmp_consumer::domain::verify::DEFAULT_MAX_CLOCK_SKEW_SECONDS;

use super::identity::Allowlist;
use super::service::IngestSettings;

/// Default `AWSMP_INGEST_MAPPING_CACHE_SECONDS`. Our choice: a new or changed entry is seen
/// within half a minute, at one mapping read per module per container per half minute.
pub const DEFAULT_MAPPING_CACHE_SECONDS: u32 = 30;

/// The configuration of `meter-ingest`.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Mapping table.
    pub mapping_table: String,
    /// Dedup table.
    pub dedup_table: String,
    /// Usage stream.
    pub usage_stream: String,
    /// Held-events table.
    pub held_table: String,
    /// Mapping cache lifetime.
    pub mapping_cache: std::time::Duration,
    /// EMF namespace.
    pub metrics_namespace: String,
    /// Handler tunables.
    pub settings: IngestSettings,
}

impl IngestConfig {
    /// From the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// From any variable lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let required =
            |k: &str| set(k).ok_or_else(|| IngestError::Config(format!("{k} is not set")));
        let number = |k: &str, default: u32| -> Result<u32> {
            set(k).map_or(Ok(default), |v| {
                v.trim()
                    .parse()
                    .map_err(|_| IngestError::Config(format!("{k}={v:?} is not a whole number")))
            })
        };
        let accounts: HashSet<String> = required("AWSMP_ALLOWED_ACCOUNTS")?
            .split(',')
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        if accounts.is_empty() {
            return Err(IngestError::Config(
                "AWSMP_ALLOWED_ACCOUNTS lists no account".into(),
            ));
        }
        if let Some(bad) = accounts
            .iter()
            .find(|a| awsmp_contract::event::validate_account_id(a).is_err())
        {
            return Err(IngestError::Config(format!(
                "AWSMP_ALLOWED_ACCOUNTS: {bad:?} is not a 12-digit account id"
            )));
        }
        let dedup_hours = number("AWSMP_DEDUP_TTL_HOURS", 48)?;
        if !(MIN_DEDUP_TTL_HOURS..=MAX_DEDUP_TTL_HOURS).contains(&dedup_hours) {
            return Err(IngestError::Config(format!(
                "AWSMP_DEDUP_TTL_HOURS={dedup_hours} is outside {MIN_DEDUP_TTL_HOURS}-{MAX_DEDUP_TTL_HOURS}"
            )));
        }
        let skew = number(
            "AWSMP_MAX_CLOCK_SKEW_SECONDS",
            DEFAULT_MAX_CLOCK_SKEW_SECONDS as u32,
        )?;
        Ok(Self {
            mapping_table: required("AWSMP_INGEST_MAPPING_TABLE")?,
            dedup_table: required("AWSMP_DEDUP_TABLE")?,
            usage_stream: required("AWSMP_USAGE_STREAM")?,
            held_table: required("AWSMP_INGEST_HELD_TABLE")?,
            mapping_cache: std::time::Duration::from_secs(u64::from(number(
                "AWSMP_INGEST_MAPPING_CACHE_SECONDS",
                DEFAULT_MAPPING_CACHE_SECONDS,
            )?)),
            metrics_namespace: set("AWSMP_METRICS_NAMESPACE")
                .unwrap_or_else(|| awsmp_aws::emf::DEFAULT_NAMESPACE.to_owned()),
            settings: IngestSettings {
                allowlist: Allowlist {
                    environment: required("AWSMP_ENVIRONMENT")?,
                    accounts,
                },
                max_clock_skew: chrono::Duration::seconds(i64::from(skew)),
                dedup_ttl: chrono::Duration::hours(i64::from(dedup_hours)),
                rejected_ttl_days: number("AWSMP_REJECTED_EVENTS_TTL_DAYS", 400)?,
                concurrency: number("AWSMP_CONSUMER_CONCURRENCY", 16)?.max(1) as usize,
                ..IngestSettings::default()
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
            ("AWSMP_INGEST_MAPPING_TABLE", "m"),
            ("AWSMP_DEDUP_TABLE", "d"),
            ("AWSMP_USAGE_STREAM", "s"),
            ("AWSMP_INGEST_HELD_TABLE", "h"),
            ("AWSMP_ENVIRONMENT", "prod"),
            ("AWSMP_ALLOWED_ACCOUNTS", "111111111111, 222222222222"),
        ])
    }

    fn load(vars: &HashMap<&str, &str>) -> Result<IngestConfig> {
        IngestConfig::from_lookup(|k| vars.get(k).map(|v| (*v).to_owned()))
    }

    #[test]
    fn defaults_and_the_allowlist() {
        let c = load(&base()).unwrap();
        assert_eq!(c.settings.allowlist.accounts.len(), 2);
        assert_eq!(c.settings.allowlist.environment, "prod");
        assert_eq!(c.settings.max_clock_skew.num_seconds(), 60);
        assert_eq!(c.settings.dedup_ttl.num_hours(), 48);
        assert_eq!(c.mapping_cache.as_secs(), 30);
    }

    #[test]
    fn every_bad_value_fails_fast() {
        for k in [
            "AWSMP_ENVIRONMENT",
            "AWSMP_ALLOWED_ACCOUNTS",
            "AWSMP_INGEST_MAPPING_TABLE",
            "AWSMP_INGEST_HELD_TABLE",
        ] {
            let mut vars = base();
            vars.remove(k);
            assert!(load(&vars).is_err(), "{k} missing");
        }
        for (k, v) in [
            ("AWSMP_ALLOWED_ACCOUNTS", "1234"),
            ("AWSMP_ALLOWED_ACCOUNTS", " , "),
            ("AWSMP_DEDUP_TTL_HOURS", "12"),
            ("AWSMP_MAX_CLOCK_SKEW_SECONDS", "-1"),
            ("AWSMP_INGEST_MAPPING_CACHE_SECONDS", "x"),
        ] {
            let mut vars = base();
            vars.insert(k, v);
            assert!(load(&vars).is_err(), "{k}={v}");
        }
    }
}
