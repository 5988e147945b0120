//! Producer settings. Defaults follow the KPL where it has an equivalent.

use std::time::Duration;

use crate::partition::MAX_PARTITION_KEY_CHARS;
use awsmp_contract::limits::kinesis::MAX_RECORD_BYTES;

/// The workspace's one retry policy (`awsmp_contract::retry`), re-exported so a seller needs no second
/// import: full-jitter delays doubling from `base` up to `cap`.
pub use awsmp_contract::retry::RetryPolicy;
pub use awsmp_contract::wire::WireVersion;

/// Ceiling of the delay before the first re-send of a failed entry.
pub const RETRY_BASE: Duration = Duration::from_millis(100);
/// Largest ceiling of any re-send delay.
pub const RETRY_CAP: Duration = Duration::from_secs(5);
/// Re-sends of failed entries: attempts are bounded by the record TTL, not by a count.
pub const DEFAULT_RETRY_POLICY: RetryPolicy = RetryPolicy::new(u32::MAX, RETRY_BASE, RETRY_CAP);

/// Everything the producer needs besides its sink.
#[derive(Debug, Clone, PartialEq)]
pub struct ProducerConfig {
    /// Kinesis stream name.
    pub stream_name: String,
    /// Region for the built-in Kinesis client (else the environment's).
    pub region: Option<String>,
    /// Endpoint URL for the built-in Kinesis client (else the environment's, e.g.
    /// `AWS_ENDPOINT_URL_KINESIS`).
    pub endpoint_url: Option<String>,
    /// How long the first event of a window waits for company before the window is sent
    /// (KPL `RecordMaxBufferedTime`, 100 ms).
    pub linger: Duration,
    /// Hard bound on bytes held: buffered, in flight and not yet acknowledged, or waiting to be
    /// handed back.
    pub max_buffered_bytes: usize,
    /// Pack user records into KPL aggregates.
    pub aggregation: bool,
    /// Largest aggregate, in bytes (KPL `AggregationMaxSize`, 51,200).
    pub max_aggregate_bytes: usize,
    /// Sum events of the same group and second within one linger window.
    pub collapse: bool,
    /// Concurrent PutRecords calls.
    pub max_in_flight: usize,
    /// Backoff between attempts of a failed entry; its `max_attempts` bounds them too (the
    /// default leaves that to `record_ttl`).
    pub retry: RetryPolicy,
    /// How long an event may wait for delivery before it is handed back (KPL `RecordTtl`, 30 s).
    pub record_ttl: Duration,
    /// A PutRecords call taking longer is treated as failed with unknown outcome.
    pub put_timeout: Duration,
    /// How often the shard map is re-listed even without a sign of resharding.
    pub shard_refresh_interval: Duration,
    /// Stamped on events that carry no producer id.
    pub producer_id: Option<String>,
    /// Seed for the backoff jitter (tests); `None` seeds from the OS.
    pub jitter_seed: Option<u64>,
    /// Capacity of the command channel between callers and the background task.
    pub command_capacity: usize,
    /// The encoding written (docs/wire-format.md): v2 by default, v1 JSON for consumers
    /// that do not read v2 yet.
    pub wire_version: WireVersion,
}

impl ProducerConfig {
    /// Defaults for `stream_name`.
    pub fn new(stream_name: impl Into<String>) -> Self {
        ProducerConfig {
            stream_name: stream_name.into(),
            region: None,
            endpoint_url: None,
            linger: Duration::from_millis(100),
            max_buffered_bytes: 64 * 1024 * 1024,
            aggregation: true,
            max_aggregate_bytes: 51_200,
            collapse: false,
            max_in_flight: 8,
            retry: DEFAULT_RETRY_POLICY,
            record_ttl: Duration::from_secs(30),
            put_timeout: Duration::from_secs(10),
            shard_refresh_interval: Duration::from_secs(60),
            producer_id: None,
            jitter_seed: None,
            command_capacity: 4_096,
            wire_version: WireVersion::V2,
        }
    }

    /// Checks the settings against each other and the Kinesis limits.
    pub fn validate(&self) -> Result<(), String> {
        if self.stream_name.is_empty() {
            return Err("stream name is empty".into());
        }
        // The largest possible partition key is 256 characters of up to 4 UTF-8 bytes.
        let max_agg = MAX_RECORD_BYTES - 4 * MAX_PARTITION_KEY_CHARS;
        if !(1024..=max_agg).contains(&self.max_aggregate_bytes) {
            return Err(format!(
                "max_aggregate_bytes must be within 1024..={max_agg}"
            ));
        }
        if self.max_buffered_bytes < 64 * 1024
            || self.max_buffered_bytes > tokio::sync::Semaphore::MAX_PERMITS
        {
            return Err("max_buffered_bytes must be at least 64 KiB".into());
        }
        if self.max_in_flight == 0 {
            return Err("max_in_flight must be at least 1".into());
        }
        if self.command_capacity == 0 {
            return Err("command_capacity must be at least 1".into());
        }
        if self.record_ttl.is_zero() || self.put_timeout.is_zero() {
            return Err("record_ttl and put_timeout must be positive".into());
        }
        if self.retry.max_attempts == 0
            || self.retry.base.is_zero()
            || self.retry.cap < self.retry.base
        {
            return Err("retry policy needs an attempt, a positive base and cap ≥ base".into());
        }
        if self.shard_refresh_interval < std::time::Duration::from_secs(1) {
            return Err("shard_refresh_interval must be at least 1 s".into());
        }
        if let Some(p) = &self.producer_id
            && p.is_empty()
        {
            return Err("producer_id is empty".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_caps_double_up_to_the_maximum() {
        // Retry n (1-based) has ceiling `ceiling(n - 1)`.
        let p = DEFAULT_RETRY_POLICY;
        assert_eq!(p.ceiling(0), Duration::from_millis(100));
        assert_eq!(p.ceiling(1), Duration::from_millis(200));
        assert_eq!(p.ceiling(5), Duration::from_millis(3200));
        assert_eq!(p.ceiling(6), Duration::from_secs(5));
        assert_eq!(p.ceiling(999), Duration::from_secs(5));
    }

    #[test]
    fn defaults_are_valid_and_bad_settings_are_refused() {
        assert_eq!(ProducerConfig::new("s").validate(), Ok(()));
        let bad = [
            ProducerConfig::new(""),
            ProducerConfig {
                max_aggregate_bytes: 2 * 1024 * 1024,
                ..ProducerConfig::new("s")
            },
            ProducerConfig {
                max_in_flight: 0,
                ..ProducerConfig::new("s")
            },
            ProducerConfig {
                max_buffered_bytes: 10,
                ..ProducerConfig::new("s")
            },
            ProducerConfig {
                record_ttl: Duration::ZERO,
                ..ProducerConfig::new("s")
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
