//! [`ProducerBuilder`]: a producer's settings, its sink and shard map, and its start.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};

use super::{INSTANCES, Producer, Shared};
use crate::config::{ProducerConfig, RetryPolicy};
use crate::engine;
use crate::error::ProducerError;
use crate::event_id::IdGenerator;
use crate::fold::Counted;
use crate::handoff::{EngineParts, Staging};
use crate::metrics::{Metrics, StatCounters};
use crate::outcome::{Undelivered, UndeliveredCallback};
use crate::shards::{KinesisShardMapSource, ShardMapSource};
use crate::sink::{KinesisRecordSink, RecordSink};

/// Builds a [`Producer`].
pub struct ProducerBuilder {
    config: ProducerConfig,
    /// The epoch of generated ids (random unless a test fixes it, to compare two runs).
    #[cfg(test)]
    epoch: Option<u128>,
    on_undelivered: Option<UndeliveredCallback>,
    sdk_config: Option<aws_config::SdkConfig>,
}

impl ProducerBuilder {
    /// Defaults for `stream_name`.
    pub fn new(stream_name: impl Into<String>) -> Self {
        Self::from_config(ProducerConfig::new(stream_name))
    }

    /// Starts from a full configuration.
    pub fn from_config(config: ProducerConfig) -> Self {
        ProducerBuilder {
            config,
            #[cfg(test)]
            epoch: None,
            on_undelivered: None,
            sdk_config: None,
        }
    }

    /// Region of the built-in Kinesis client.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.config.region = Some(region.into());
        self
    }

    /// Endpoint of the built-in Kinesis client (e.g. a local emulator).
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.config.endpoint_url = Some(url.into());
        self
    }

    /// Uses this SDK configuration for the built-in Kinesis client (region and endpoint
    /// settings of the builder still apply on top).
    pub fn sdk_config(mut self, sdk_config: aws_config::SdkConfig) -> Self {
        self.sdk_config = Some(sdk_config);
        self
    }

    /// Linger time of a window.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.config.linger = linger;
        self
    }

    /// Hard bound on held bytes.
    pub fn max_buffered_bytes(mut self, bytes: usize) -> Self {
        self.config.max_buffered_bytes = bytes;
        self
    }

    /// KPL aggregation on or off.
    pub fn aggregation(mut self, on: bool) -> Self {
        self.config.aggregation = on;
        self
    }

    /// Largest aggregate.
    pub fn max_aggregate_bytes(mut self, bytes: usize) -> Self {
        self.config.max_aggregate_bytes = bytes;
        self
    }

    /// Per-second collapse on or off: events recorded without an id, of one group, UTC
    /// second and producer inside one linger window, are sent as one event named by one
    /// generated id (docs/row-contract.md, "Collapse"). An event with an id of its own is
    /// never merged.
    pub fn collapse(mut self, on: bool) -> Self {
        self.config.collapse = on;
        self
    }

    /// The encoding written: v2 (the default) or v1 JSON (docs/wire-format.md).
    pub fn wire_version(mut self, version: awsmp_contract::wire::WireVersion) -> Self {
        self.config.wire_version = version;
        self
    }

    /// Concurrent PutRecords calls.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.config.max_in_flight = n;
        self
    }

    /// Backoff policy.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// Record TTL.
    pub fn record_ttl(mut self, ttl: Duration) -> Self {
        self.config.record_ttl = ttl;
        self
    }

    /// PutRecords call timeout.
    pub fn put_timeout(mut self, timeout: Duration) -> Self {
        self.config.put_timeout = timeout;
        self
    }

    /// Periodic shard map refresh.
    pub fn shard_refresh_interval(mut self, interval: Duration) -> Self {
        self.config.shard_refresh_interval = interval;
        self
    }

    /// Producer id stamped on events without one.
    pub fn producer_id(mut self, id: impl Into<String>) -> Self {
        self.config.producer_id = Some(id.into());
        self
    }

    /// Seed of the backoff jitter.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.config.jitter_seed = Some(seed);
        self
    }

    /// Fixes the epoch of generated ids (tests comparing two producers' bytes).
    #[cfg(test)]
    pub(crate) fn id_epoch(mut self, epoch: u128) -> Self {
        self.epoch = Some(epoch);
        self
    }

    /// Delivers undelivered events to `callback` as soon as they are known.
    pub fn on_undelivered(
        mut self,
        callback: impl Fn(Vec<Undelivered>) + Send + Sync + 'static,
    ) -> Self {
        self.on_undelivered = Some(Arc::new(callback));
        self
    }

    /// Starts a producer writing to Kinesis with the workspace's HTTP client and the default
    /// credential chain.
    pub async fn build(self) -> Result<Producer, ProducerError> {
        self.config.validate().map_err(ProducerError::Config)?;
        let base = match &self.sdk_config {
            Some(c) => c.clone(),
            None => {
                use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
                let http = aws_smithy_http_client::Builder::new()
                    .tls_provider(Provider::Rustls(CryptoMode::Ring))
                    .build_https();
                let mut loader =
                    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http);
                // A region given here is the region: the default chain is not asked (its last
                // resort is the instance metadata service, a network call).
                if let Some(r) = &self.config.region {
                    loader = loader.region(aws_config::Region::new(r.clone()));
                }
                loader.load().await
            }
        };
        let mut kc = aws_sdk_kinesis::config::Builder::from(&base);
        if let Some(r) = &self.config.region {
            kc = kc.region(aws_sdk_kinesis::config::Region::new(r.clone()));
        }
        if let Some(u) = &self.config.endpoint_url {
            kc = kc.endpoint_url(u.clone());
        }
        let list_client = aws_sdk_kinesis::Client::from_conf(kc.clone().build());
        // The engine retries only the failed entries, with its own backoff and budget; SDK
        // retries of whole calls would resend the accepted ones and hide throttling from it.
        let put_client = aws_sdk_kinesis::Client::from_conf(
            kc.retry_config(aws_config::retry::RetryConfig::disabled())
                .build(),
        );
        let stream = self.config.stream_name.clone();
        self.start_with(
            KinesisRecordSink::new(put_client, stream.clone()),
            KinesisShardMapSource::new(list_client, stream),
        )
    }

    /// Starts a producer over any sink and shard source (tests, benches, other transports).
    /// Must be called inside a Tokio runtime.
    pub fn start_with<S: RecordSink, M: ShardMapSource>(
        self,
        sink: S,
        shards: M,
    ) -> Result<Producer, ProducerError> {
        self.config.validate().map_err(ProducerError::Config)?;
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| ProducerError::NoRuntime)?;
        let config = Arc::new(self.config);
        let sem = Arc::new(Semaphore::new(config.max_buffered_bytes));
        let (tx, rx) = mpsc::channel(config.command_capacity);
        let metrics = Metrics::new(&config.stream_name);
        let stats = Arc::new(StatCounters::default());
        let counted = Counted {
            metric: metrics.events_recorded.clone(),
            stats: stats.clone(),
        };
        let staging = Arc::new(Staging::new(engine::size_trigger(&config), counted));
        #[cfg(test)]
        let ids = Arc::new(
            self.epoch
                .map_or_else(IdGenerator::new, IdGenerator::with_epoch),
        );
        #[cfg(not(test))]
        let ids = Arc::new(IdGenerator::new());
        engine::spawn(
            &runtime,
            EngineParts {
                config: config.clone(),
                sink: Arc::new(sink),
                shards: Arc::new(shards),
                rx,
                staging: staging.clone(),
                sem: sem.clone(),
                on_undelivered: self.on_undelivered,
                metrics: metrics.clone(),
                stats: stats.clone(),
                ids: ids.clone(),
            },
        );
        Ok(Producer {
            shared: Arc::new(Shared {
                tx,
                staging,
                sem,
                config,
                closed: AtomicBool::new(false),
                metrics,
                stats,
                ids,
                instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            }),
        })
    }
}
