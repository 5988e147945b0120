//! The discoverer: `meter` (enqueue one work message per pending group of one hour bucket),
//! `ageout` (expire raw rows pending past the window, sharded 7 ways, no blind spot) and
//! `flush-deprovisioning` (expedite licenses in their deprovisioning window).
//!
//! Slice identity comes only from the constant target input, never from a clock read.
//!
//! With an ingest-watermark table configured, `meter` and `flush-deprovisioning` are fenced:
//! an hour is enqueued only once every shard's watermark has passed its end plus the settle
//! margin ([`Fence`]; docs/guarantees.md, "Ingest watermark"). A fenced hour is simply not
//! enqueued yet: its rows stay pending for a later run.

use super::Services;
use super::deps::DiscovererDeps;
use crate::error::{PipelineError, Result};
use awsmp_aws::emf::Metric;
use awsmp_contract::keys::HourBucket;
use awsmp_contract::metrics;
use awsmp_contract::reasons::PENDING_PAST_BILLABLE_WINDOW;
use awsmp_contract::time::{
    FLUSH_CURRENT_HOUR_LEAD_MINUTES, ageout_shard_buckets, deprovisioning_flush_buckets,
    meter_mode_bucket,
};
use chrono::{DateTime, Duration, Utc};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

/// Buckets queried at once by one age-out shard: bounded, so a run's cost stays bounded too.
const AGEOUT_CONCURRENCY: usize = 8;

/// Watermark lag past which [`metrics::INGEST_WATERMARK_STALLED`] fires: 15 minutes. Normal lag
/// is the heartbeat period (1 min) plus the consumer's iterator age (seconds); an hour is
/// fenced for at most its settle margin then. At 15 minutes an operator still has the whole
/// billable window (24 h) minus the lock before any held-back hour is at risk.
pub const WATERMARK_STALL_SECS: i64 = 15 * 60;

/// The ingest fence of one run: the lowest watermark over the shards not yet drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// The lowest watermark; `None` when no open shard has published one.
    pub low: Option<DateTime<Utc>>,
    /// The settle margin past an hour's end.
    pub settle: Duration,
}

impl Fence {
    /// True when every shard has applied the stream past `end` plus the settle margin.
    pub fn passes(&self, end: DateTime<Utc>) -> bool {
        self.low.is_some_and(|w| w >= end + self.settle)
    }

    /// The fence over `shards` (one stream's watermarks): drained (closed, read to their end)
    /// shards are done.
    pub fn over(shards: &[awsmp_aws::watermark::ShardWatermark], settle: Duration) -> Self {
        let low = shards
            .iter()
            .filter(|s| !s.drained)
            .map(|s| s.applied_through)
            .min();
        Self { low, settle }
    }
}

/// The run's fence over the usage stream's watermarks (`AWSMP_USAGE_STREAM`), its lag metrics
/// emitted; `None` when no watermark table is configured. A table without the stream is a
/// configuration error: the fence would have no shards to wait for.
async fn read_fence(svc: &DiscovererDeps, now: DateTime<Utc>) -> Result<Option<Fence>> {
    let Some(store) = svc.watermarks.as_deref().filter(|_| {
        !awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::FenceIgnoresWatermarks)
    }) else {
        return Ok(None);
    };
    let stream = svc.config.usage_stream.as_deref().ok_or_else(|| {
        PipelineError::Config(
            "AWSMP_INGEST_WATERMARK_TABLE is set without AWSMP_USAGE_STREAM: the fence needs the stream whose shards it waits for".into(),
        )
    })?;
    let settle = Duration::seconds(svc.config.watermark_settle_secs as i64);
    let fence = Fence::over(&store.shards(stream).await?, settle);
    let lag = fence.low.map(|w| (now - w).num_seconds().max(0));
    if let Some(lag) = lag {
        svc.metrics
            .emit(Metric::value(metrics::INGEST_WATERMARK_LAG, lag as f64));
    }
    if lag.is_none_or(|l| l > WATERMARK_STALL_SECS) {
        tracing::error!(
            lag_seconds = lag,
            "ingest watermark stalled: metering is held back"
        );
        svc.metrics
            .emit(Metric::count(metrics::INGEST_WATERMARK_STALLED));
    }
    Ok(Some(fence))
}

/// The instant the fence must pass before the flush enqueues `bucket` of a license expiring at
/// `expiry`: the hour's end, or for the still open hour the flush's own instant (expiry − lead).
fn flush_fence_instant(bucket: HourBucket, expiry: DateTime<Utc>) -> DateTime<Utc> {
    bucket
        .end()
        .min(expiry - Duration::minutes(FLUSH_CURRENT_HOUR_LEAD_MINUTES))
}

/// The constant EventBridge target input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DiscovererInput {
    /// Enqueue the pending groups of `floor(now, hour) − hourOffset`.
    Meter {
        /// 1–23.
        #[serde(rename = "hourOffset")]
        hour_offset: u32,
    },
    /// Expire pending raw rows of the buckets this shard owns.
    Ageout {
        /// 0–6.
        shard: u32,
    },
    /// Enqueue deprovisioning licenses' pending groups, lock bypassed.
    FlushDeprovisioning,
}

/// What one invocation did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscovererOutput {
    /// Buckets examined.
    pub buckets: usize,
    /// Work messages enqueued.
    pub groups_enqueued: usize,
    /// Raw rows aged out.
    pub rows_expired: usize,
    /// Quantity those rows carried.
    pub quantity_expired: u64,
    /// Buckets held back by the ingest fence (still pending).
    pub buckets_fenced: usize,
}

/// Run one discoverer target, resolving the discoverer's dependencies from `svc` (a process
/// resolves them once, at start, and calls [`discover_with`]).
pub async fn discover(svc: &Services, input: DiscovererInput) -> Result<DiscovererOutput> {
    discover_with(&DiscovererDeps::from_services(svc)?, input).await
}

/// Run one discoverer target.
pub async fn discover_with(
    svc: &DiscovererDeps,
    input: DiscovererInput,
) -> Result<DiscovererOutput> {
    let usage = svc.usage.as_ref();
    let now = svc.clock.now();
    let cfg = &svc.config.time;
    let mut out = DiscovererOutput::default();
    match input {
        DiscovererInput::Meter { hour_offset } => {
            let Some(bucket) = meter_mode_bucket(hour_offset, now, cfg)? else {
                return Ok(out); // below the lock (or outside the window): a no-op by design
            };
            out.buckets = 1;
            if read_fence(svc, now)
                .await?
                .is_some_and(|f| !f.passes(bucket.end()))
            {
                out.buckets_fenced = 1;
                return Ok(out);
            }
            let groups = usage.pending_groups(bucket, None).await?;
            let bodies: Vec<String> = groups.iter().map(|g| g.to_work_message()).collect();
            svc.work_queue.send_all(&bodies).await?;
            out.groups_enqueued = bodies.len();
        }
        DiscovererInput::Ageout { shard } => {
            let buckets = ageout_shard_buckets(shard, now, cfg)?;
            out.buckets = buckets.len();
            let expired: Vec<Vec<crate::ports::ExpiredRow>> = futures::stream::iter(buckets)
                .map(|b: HourBucket| usage.expire_bucket(b, PENDING_PAST_BILLABLE_WINDOW, now))
                .buffer_unordered(AGEOUT_CONCURRENCY)
                .try_collect()
                .await?;
            for row in expired.iter().flatten() {
                out.rows_expired += 1;
                out.quantity_expired += row.quantity.unwrap_or(0);
            }
            if out.rows_expired > 0 {
                tracing::error!(
                    rows = out.rows_expired,
                    quantity = out.quantity_expired,
                    "raw usage aged out before aggregation"
                );
                svc.metrics.emit(Metric::counts(
                    metrics::USAGE_AGGREGATION_EXPIRED,
                    out.rows_expired as u64,
                ));
            }
        }
        DiscovererInput::FlushDeprovisioning => {
            let flush = svc.deprovision.as_ref().ok_or_else(|| {
                PipelineError::Config("flush-deprovisioning needs AWSMP_SUBSCRIBERS_TABLE".into())
            })?;
            let fence = read_fence(svc, now).await?;
            let mut bodies = Vec::new();
            for d in flush.index.active().await? {
                for bucket in deprovisioning_flush_buckets(now, d.expiry, cfg) {
                    if awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::FlushSkipsCurrentHour)
                        && bucket == HourBucket::containing(now)
                    {
                        continue;
                    }
                    out.buckets += 1;
                    if fence.is_some_and(|f| !f.passes(flush_fence_instant(bucket, d.expiry))) {
                        out.buckets_fenced += 1;
                        continue;
                    }
                    for g in usage.pending_groups(bucket, Some(&d.license_arn)).await? {
                        bodies.push(g.to_work_message());
                    }
                }
            }
            flush.queue.send_all(&bodies).await?;
            out.groups_enqueued = bodies.len();
        }
    }
    Ok(out)
}

/// All 30 scheduled discoverer targets, in rule order (23 meter + 7 age-out).
pub fn scheduled_targets() -> Vec<DiscovererInput> {
    (1..=23)
        .map(|hour_offset| DiscovererInput::Meter { hour_offset })
        .chain((0..7).map(|shard| DiscovererInput::Ageout { shard }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_aws::watermark::ShardWatermark;
    use chrono::TimeZone;

    #[test]
    fn the_fence_is_the_lowest_open_shard() {
        let t = |m: u32| Utc.with_ymd_and_hms(2026, 11, 30, 13, m, 0).unwrap();
        let settle = Duration::seconds(120);
        let w = |shard: &str, at: DateTime<Utc>, drained: bool| ShardWatermark {
            stream: "usage".into(),
            shard_id: shard.into(),
            applied_through: at,
            drained,
        };
        let shards = [
            w("shardId-000000000000", t(30), false),
            w("shardId-000000000001", t(10), true),
            w("shardId-000000000002", t(20), false),
        ];
        let fence = Fence::over(&shards, settle);
        assert_eq!(fence.low, Some(t(20)), "drained shards are done");
        assert!(fence.passes(t(18)));
        assert!(!fence.passes(t(19)), "the settle margin applies");
        assert_eq!(Fence::over(&[], settle).low, None);
        assert!(
            !Fence::over(&[], settle).passes(t(0)),
            "no watermark: fenced"
        );
    }

    #[test]
    fn target_inputs_parse_exactly() {
        let m: DiscovererInput =
            serde_json::from_str(r#"{"mode":"meter","hourOffset":3}"#).unwrap();
        assert_eq!(m, DiscovererInput::Meter { hour_offset: 3 });
        let a: DiscovererInput = serde_json::from_str(r#"{"mode":"ageout","shard":6}"#).unwrap();
        assert_eq!(a, DiscovererInput::Ageout { shard: 6 });
        let f: DiscovererInput =
            serde_json::from_str(r#"{"mode":"flush-deprovisioning"}"#).unwrap();
        assert_eq!(f, DiscovererInput::FlushDeprovisioning);
        assert!(
            serde_json::from_str::<DiscovererInput>(r#"{"mode":"meter","hourOffset":3,"x":1}"#)
                .is_err()
        );
        assert_eq!(scheduled_targets().len(), 30);
    }

    #[test]
    fn the_listed_schedule_inputs_are_the_scheduled_targets_and_the_flush() {
        let listed: Vec<DiscovererInput> = awsmp_contract::stages::named("discoverer")
            .schedule_inputs()
            .into_iter()
            .map(|v| serde_json::from_value(v.clone()).expect("an input the handler reads"))
            .collect();
        let mut targets = scheduled_targets();
        targets.push(DiscovererInput::FlushDeprovisioning);
        assert_eq!(listed, targets, "infra/stages.json's discoverer inputs");
    }
}
