//! Per-stage dependencies, resolved once at start: each stage's struct names exactly what its
//! handler uses, required resources as plain fields, so a missing one fails
//! `from_services` when the process starts — naming it — instead of a message finding it
//! while being handled. A field that stays optional is optional by design (and says why).
//!
//! Each stage's metrics carry its own name as the `Service` dimension (the name of its binary
//! and of what its alarms filter on), whatever sink the process handed it.

use super::Services;
use crate::config::Config;
use crate::error::{PipelineError, Result};
use crate::ports::{AggregatedStore, MessageQueue, UsageStore};
use awsmp_aws::deprovisioning::DeprovisioningIndex;
use awsmp_aws::emf::MetricsSink;
use awsmp_aws::watermark::WatermarkStore;
use awsmp_contract::clock::Clock;
use std::sync::Arc;

fn required<T: ?Sized>(stage: &str, resource: Option<&Arc<T>>, what: &str) -> Result<Arc<T>> {
    resource.cloned().ok_or_else(|| {
        PipelineError::Config(format!("the {stage} needs {what}, which is not configured"))
    })
}

const USAGE_TABLE: &str = "the raw usage table (AWSMP_USAGE_TABLE, full deployment mode)";

/// What the aggregator uses.
#[derive(Clone)]
pub struct AggregatorDeps {
    /// Configuration.
    pub config: Config,
    /// Raw usage table.
    pub usage: Arc<dyn UsageStore>,
    /// Aggregated-usage table.
    pub aggregated: Arc<dyn AggregatedStore>,
    /// Cleanup queue.
    pub cleanup_queue: Arc<dyn MessageQueue>,
    /// Business metrics.
    pub metrics: MetricsSink,
    /// The one clock.
    pub clock: Arc<dyn Clock>,
}

impl AggregatorDeps {
    /// Resolve from `svc`: the usage table and the cleanup queue must be configured.
    pub fn from_services(svc: &Services) -> Result<Self> {
        let stage = "aggregator";
        Ok(Self {
            config: svc.config.clone(),
            usage: required(stage, svc.usage.as_ref(), USAGE_TABLE)?,
            aggregated: svc.aggregated.clone(),
            cleanup_queue: required(
                stage,
                svc.cleanup_queue.as_ref(),
                "the cleanup queue (AWSMP_CLEANUP_QUEUE_URL)",
            )?,
            metrics: svc.metrics.for_service("aggregator"),
            clock: svc.clock.clone(),
        })
    }
}

/// What cleanup uses.
#[derive(Clone)]
pub struct CleanupDeps {
    /// Raw usage table.
    pub usage: Arc<dyn UsageStore>,
    /// Business metrics.
    pub metrics: MetricsSink,
    /// The one clock.
    pub clock: Arc<dyn Clock>,
}

impl CleanupDeps {
    /// Resolve from `svc`: the usage table must be configured.
    pub fn from_services(svc: &Services) -> Result<Self> {
        Ok(Self {
            usage: required("cleanup", svc.usage.as_ref(), USAGE_TABLE)?,
            metrics: svc.metrics.for_service("cleanup"),
            clock: svc.clock.clone(),
        })
    }
}

/// The deprovisioning flush's pair: the index it reads and the queue it fills.
#[derive(Clone)]
pub struct DeprovisionFlush {
    /// The subscribers table's deprovisioning index.
    pub index: Arc<dyn DeprovisioningIndex>,
    /// Deprovision-work queue.
    pub queue: Arc<dyn MessageQueue>,
}

/// What the discoverer uses.
#[derive(Clone)]
pub struct DiscovererDeps {
    /// Configuration.
    pub config: Config,
    /// Raw usage table.
    pub usage: Arc<dyn UsageStore>,
    /// Work queue.
    pub work_queue: Arc<dyn MessageQueue>,
    /// The deprovisioning flush, when a subscribers table is configured (the
    /// `flush-deprovisioning` target is refused without one).
    pub deprovision: Option<DeprovisionFlush>,
    /// Ingest watermarks; `None` turns the fence off (a deployment without the table).
    pub watermarks: Option<Arc<dyn WatermarkStore>>,
    /// Business metrics.
    pub metrics: MetricsSink,
    /// The one clock.
    pub clock: Arc<dyn Clock>,
}

impl DiscovererDeps {
    /// Resolve from `svc`: the usage table and the work queue must be configured, with a
    /// subscribers table the deprovision-work queue too, and with a watermark table the usage
    /// stream whose shards the fence waits for.
    pub fn from_services(svc: &Services) -> Result<Self> {
        let stage = "discoverer";
        if svc.watermarks.is_some() && svc.config.usage_stream.is_none() {
            return Err(PipelineError::Config(format!(
                "the {stage} needs the usage stream (AWSMP_USAGE_STREAM) with the ingest \
                 watermark table (AWSMP_INGEST_WATERMARK_TABLE): the fence waits for its shards"
            )));
        }
        let deprovision = match &svc.deprovisioning {
            None => None,
            Some(index) => Some(DeprovisionFlush {
                index: index.clone(),
                queue: required(
                    stage,
                    svc.deprovision_queue.as_ref(),
                    "the deprovision-work queue (AWSMP_DEPROVISION_WORK_QUEUE_URL)",
                )?,
            }),
        };
        Ok(Self {
            config: svc.config.clone(),
            usage: required(stage, svc.usage.as_ref(), USAGE_TABLE)?,
            work_queue: required(
                stage,
                svc.work_queue.as_ref(),
                "the work queue (AWSMP_WORK_QUEUE_URL)",
            )?,
            deprovision,
            watermarks: svc.watermarks.clone(),
            metrics: svc.metrics.for_service("discoverer"),
            clock: svc.clock.clone(),
        })
    }
}

/// What the submitter uses.
#[derive(Clone)]
pub struct SubmitterDeps {
    /// Configuration.
    pub config: Config,
    /// Aggregated-usage table.
    pub aggregated: Arc<dyn AggregatedStore>,
    /// Subscribers' deprovisioning index; `None` (no subscribers table) means the ordinary
    /// pass only.
    pub deprovisioning: Option<Arc<dyn DeprovisioningIndex>>,
    /// Business metrics.
    pub metrics: MetricsSink,
    /// The one clock.
    pub clock: Arc<dyn Clock>,
}

impl SubmitterDeps {
    /// Resolve from `svc` (everything it needs is always configured).
    pub fn from_services(svc: &Services) -> Result<Self> {
        Ok(Self {
            config: svc.config.clone(),
            aggregated: svc.aggregated.clone(),
            deprovisioning: svc.deprovisioning.clone(),
            metrics: svc.metrics.for_service("submitter"),
            clock: svc.clock.clone(),
        })
    }
}

/// What expiry uses.
#[derive(Clone)]
pub struct ExpiryDeps {
    /// Configuration.
    pub config: Config,
    /// Aggregated-usage table.
    pub aggregated: Arc<dyn AggregatedStore>,
    /// Business metrics.
    pub metrics: MetricsSink,
    /// The one clock.
    pub clock: Arc<dyn Clock>,
}

impl ExpiryDeps {
    /// Resolve from `svc` (everything it needs is always configured).
    pub fn from_services(svc: &Services) -> Result<Self> {
        Ok(Self {
            config: svc.config.clone(),
            aggregated: svc.aggregated.clone(),
            metrics: svc.metrics.for_service("expiry"),
            clock: svc.clock.clone(),
        })
    }
}

macro_rules! debug_by_name {
    ($($t:ty),*) => {$(
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).finish_non_exhaustive()
            }
        }
    )*};
}

debug_by_name!(
    AggregatorDeps,
    CleanupDeps,
    DeprovisionFlush,
    DiscovererDeps,
    SubmitterDeps,
    ExpiryDeps
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryAdapters;
    use awsmp_contract::clock::FixedClock;

    fn services(mode: &str, subscribers: bool) -> Services {
        let config = Config::from_lookup(|k| match k {
            "AWSMP_PRODUCT_CODE" => Some("prod-1".into()),
            "AWSMP_AGGREGATED_USAGE_TABLE" => Some("aggregated-usage".into()),
            "AWSMP_USAGE_TABLE" => Some("usage".into()),
            "AWSMP_WORK_QUEUE_URL" => Some("http://127.0.0.1/work".into()),
            "AWSMP_DEPROVISION_WORK_QUEUE_URL" => Some("http://127.0.0.1/dw".into()),
            "AWSMP_CLEANUP_QUEUE_URL" => Some("http://127.0.0.1/cleanup".into()),
            "AWSMP_SUBSCRIBERS_TABLE" if subscribers => Some("subscribers".into()),
            "AWSMP_DEPLOYMENT_MODE" => Some(mode.into()),
            _ => None,
        })
        .unwrap();
        let clock = Arc::new(FixedClock::new("2026-11-30T12:00:00Z".parse().unwrap()));
        MemoryAdapters::new().services(config, MetricsSink::capture("deps"), clock)
    }

    #[test]
    fn a_full_deployment_resolves_every_stage() {
        let svc = services("full", true);
        assert!(AggregatorDeps::from_services(&svc).is_ok());
        assert!(CleanupDeps::from_services(&svc).is_ok());
        let d = DiscovererDeps::from_services(&svc).unwrap();
        assert!(d.deprovision.is_some() && d.watermarks.is_none());
        assert!(
            SubmitterDeps::from_services(&svc)
                .unwrap()
                .deprovisioning
                .is_some()
        );
        assert!(ExpiryDeps::from_services(&svc).is_ok());
    }

    #[test]
    fn a_missing_resource_fails_at_start_and_is_named() {
        let svc = services("direct-submit", false);
        let e = AggregatorDeps::from_services(&svc).unwrap_err().to_string();
        assert!(
            e.contains("aggregator") && e.contains("AWSMP_USAGE_TABLE"),
            "{e}"
        );
        let e = DiscovererDeps::from_services(&svc).unwrap_err().to_string();
        assert!(
            e.contains("discoverer") && e.contains("AWSMP_USAGE_TABLE"),
            "{e}"
        );
        assert!(CleanupDeps::from_services(&svc).is_err());
        let mut svc = services("full", true);
        svc.cleanup_queue = None;
        let e = AggregatorDeps::from_services(&svc).unwrap_err().to_string();
        assert!(e.contains("AWSMP_CLEANUP_QUEUE_URL"), "{e}");
        svc.deprovision_queue = None;
        let e = DiscovererDeps::from_services(&svc).unwrap_err().to_string();
        assert!(e.contains("AWSMP_DEPROVISION_WORK_QUEUE_URL"), "{e}");
        // A watermark table without its stream: the fence would have no shards to wait for.
        let mut svc = services("full", true);
        svc.watermarks = Some(Arc::new(awsmp_aws::watermark::MemoryWatermarkStore::new()));
        let e = DiscovererDeps::from_services(&svc).unwrap_err().to_string();
        assert!(e.contains("AWSMP_USAGE_STREAM"), "{e}");
        svc.config.usage_stream = Some("awsmp-usage".into());
        assert!(
            DiscovererDeps::from_services(&svc)
                .unwrap()
                .watermarks
                .is_some()
        );
        // Expiry and the submitter need only what every deployment has.
        assert!(ExpiryDeps::from_services(&svc).is_ok());
        assert!(SubmitterDeps::from_services(&svc).is_ok());
    }
}
