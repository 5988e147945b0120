//! Stage handlers: the same functions run under `lambda_runtime` in AWS and under the local
//! runner. They see only [`Services`] (ports, config, metrics, clock), never an SDK client:
//! [`Services::from_sdk`] builds it over the AWS adapters,
//! [`MemoryAdapters::services`](crate::adapters::memory::MemoryAdapters::services) over the
//! in-memory ones.

pub mod aggregator;
pub mod cleanup;
pub mod deps;
pub mod discoverer;
pub mod expiry;
pub mod submitter;

use crate::adapters::dynamodb::{DynamoDbAggregatedStore, DynamoDbUsageStore};
use crate::adapters::sqs::SqsQueue;
use crate::config::Config;
use crate::error::{PipelineError, Result};
use crate::ports::{AggregatedStore, MessageQueue, UsageStore};
use awsmp_aws::deprovisioning::{DeprovisioningIndex, DynamoDbDeprovisioningIndex};
use awsmp_aws::emf::MetricsSink;
use awsmp_aws::watermark::{DynamoDbWatermarkStore, WatermarkStore};
use awsmp_contract::clock::Clock;
pub use deps::{
    AggregatorDeps, CleanupDeps, DeprovisionFlush, DiscovererDeps, ExpiryDeps, SubmitterDeps,
};

use awsmp_contract::retry::RetryPolicy;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Everything a stage handler needs, built once per process.
#[derive(Clone)]
pub struct Services {
    /// Configuration.
    pub config: Config,
    /// Raw usage table (full mode).
    pub usage: Option<Arc<dyn UsageStore>>,
    /// Aggregated-usage table.
    pub aggregated: Arc<dyn AggregatedStore>,
    /// Subscribers' deprovisioning index, if configured.
    pub deprovisioning: Option<Arc<dyn DeprovisioningIndex>>,
    /// Work queue (full mode).
    pub work_queue: Option<Arc<dyn MessageQueue>>,
    /// Deprovision-work queue (full mode).
    pub deprovision_queue: Option<Arc<dyn MessageQueue>>,
    /// Cleanup queue (full mode).
    pub cleanup_queue: Option<Arc<dyn MessageQueue>>,
    /// Ingest watermarks; `None` turns the discoverer's fence off.
    pub watermarks: Option<Arc<dyn WatermarkStore>>,
    /// Business metrics.
    pub metrics: MetricsSink,
    /// The one clock.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Services {
    /// Adapters over the AWS SDK for `config`'s resources. The subscribers table lives in the
    /// events stack's region (`AWSMP_EVENTS_REGION`), so its deprovisioning index is read with a
    /// client for that region; every other resource is in the function's own region.
    pub fn from_sdk(
        config: Config,
        sdk: &aws_config::SdkConfig,
        metrics: MetricsSink,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let ddb = aws_sdk_dynamodb::Client::new(sdk);
        let subscribers_ddb = match &config.events_region {
            Some(region) => aws_sdk_dynamodb::Client::from_conf(
                aws_sdk_dynamodb::config::Builder::from(sdk)
                    .region(aws_config::Region::new(region.clone()))
                    .build(),
            ),
            None => ddb.clone(),
        };
        Self::over_clients(
            config,
            ddb,
            subscribers_ddb,
            aws_sdk_sqs::Client::new(sdk),
            metrics,
            clock,
        )
    }

    /// Adapters over the given clients (the local runner points each at its emulator), the
    /// subscribers table's included.
    pub fn from_clients(
        config: Config,
        ddb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        metrics: MetricsSink,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::over_clients(config, ddb.clone(), ddb, sqs, metrics, clock)
    }

    fn over_clients(
        config: Config,
        ddb: aws_sdk_dynamodb::Client,
        subscribers_ddb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        metrics: MetricsSink,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let queue = |url: &Option<String>| {
            url.as_ref()
                .map(|u| Arc::new(SqsQueue::new(sqs.clone(), u)) as Arc<dyn MessageQueue>)
        };
        Self {
            usage: config
                .usage_table
                .as_ref()
                .map(|t| Arc::new(DynamoDbUsageStore::new(ddb.clone(), t)) as Arc<dyn UsageStore>),
            aggregated: Arc::new(DynamoDbAggregatedStore::new(
                ddb.clone(),
                &config.aggregated_table,
            )),
            deprovisioning: config.subscribers_table.as_ref().map(|t| {
                Arc::new(DynamoDbDeprovisioningIndex::new(subscribers_ddb, t))
                    as Arc<dyn DeprovisioningIndex>
            }),
            work_queue: queue(&config.work_queue_url),
            deprovision_queue: queue(&config.deprovision_work_queue_url),
            cleanup_queue: queue(&config.cleanup_queue_url),
            watermarks: config.ingest_watermark_table.as_ref().map(|t| {
                Arc::new(DynamoDbWatermarkStore::new(ddb.clone(), t)) as Arc<dyn WatermarkStore>
            }),
            metrics,
            clock,
            config,
        }
    }

    /// The raw usage table, or a configuration error in direct-submit mode.
    pub fn usage(&self) -> Result<&dyn UsageStore> {
        self.usage.as_deref().ok_or_else(|| {
            PipelineError::Config(
                "this stage needs the raw usage table (full deployment mode)".into(),
            )
        })
    }
}

/// Idempotent storage calls (DynamoDB reads and conditional updates): five calls, at most
/// 0.75 s of waiting, then the error reaches the handler, which fails the message or the run so
/// SQS or the next schedule retries it later.
pub const STORE_RETRY: RetryPolicy =
    RetryPolicy::new(5, Duration::from_millis(50), Duration::from_secs(2));

/// Run `per_message` over every record of an SQS event and report per-message failures
/// (`ReportBatchItemFailures`): one bad message never fails, or re-drives, the others.
pub async fn handle_sqs_batch<F, Fut>(
    stage: &str,
    event: aws_lambda_events::sqs::SqsEvent,
    per_message: F,
) -> aws_lambda_events::sqs::SqsBatchResponse
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut response = aws_lambda_events::sqs::SqsBatchResponse::default();
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
        let outcome = match record.body {
            Some(body) => per_message(body).await,
            None => Err(PipelineError::BadMessage(
                "SQS message without a body".into(),
            )),
        };
        if let Err(e) = outcome {
            tracing::warn!(stage, message_id = %id, error = %e, retryable = e.is_retryable(), "message failed; SQS will redeliver it (DLQ after maxReceiveCount)");
            response.add_failure(id);
        }
    }
    response
}

/// Build [`Services`] for a Lambda from its environment: config (fail fast), one SDK config,
/// EMF metrics on stdout, the system clock.
pub async fn services_from_env(stage: &str) -> Result<Services> {
    let config = Config::from_env()?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let metrics = MetricsSink::stdout(config.metrics_namespace.clone(), stage);
    Ok(Services::from_sdk(
        config,
        &sdk,
        metrics,
        Arc::new(awsmp_contract::clock::SystemClock),
    ))
}
