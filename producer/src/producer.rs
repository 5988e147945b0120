//! The producer handle: `record()`, `try_record()`, `flush()`, `shutdown()`, and its builder.

#[path = "prepare.rs"]
mod prepare;

use prepare::{Payload, Prepared, Route};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::BytesMut;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::config::{ProducerConfig, RetryPolicy};
use crate::engine;
use crate::error::ProducerError;
use crate::event::Event;
use crate::event_id::IdGenerator;
use crate::handoff::{Command, EngineParts, RECORD_OVERHEAD_BYTES, Staging};
use crate::metrics::{Metrics, ProducerStats, StatCounters};
use crate::outcome::{FlushOutcome, Undelivered, UndeliveredCallback};
use crate::shards::{KinesisShardMapSource, ShardMapSource};
use crate::sink::{KinesisRecordSink, RecordSink};
use crate::wire::encode_single_into;

struct Shared {
    tx: mpsc::Sender<Command>,
    staging: Arc<Staging>,
    sem: Arc<Semaphore>,
    config: Arc<ProducerConfig>,
    closed: AtomicBool,
    metrics: Metrics,
    stats: Arc<StatCounters>,
    /// Generated event ids of this instance (its epoch and per-lane sequences).
    ids: Arc<IdGenerator>,
}

/// Buffers, packs and ships usage events to Kinesis from a background task. Cheap to clone;
/// all clones share one buffer.
#[derive(Clone)]
pub struct Producer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("stream", &self.shared.config.stream_name)
            .field("buffered_bytes", &self.buffered_bytes())
            .finish()
    }
}

impl Producer {
    /// A builder for `stream_name` with default settings.
    pub fn builder(stream_name: impl Into<String>) -> ProducerBuilder {
        ProducerBuilder::new(stream_name)
    }

    /// Validates `event`, gives it an id if it has none, and buffers it. Waits while the buffer
    /// is full (back-pressure). Errors give the event back.
    pub async fn record(&self, event: Event) -> Result<(), ProducerError> {
        // One unit of the task's cooperative budget per call: a caller recording in a tight
        // loop still yields (about every 128 calls) so the background task gets to run.
        tokio::task::consume_budget().await;
        let p = self.prepare(event)?;
        // Past that point the fast path neither waits nor yields: buffer space is taken
        // without awaiting when there is some, and staging is a push under a short lock.
        let cost = p.cost as u32;
        if let Ok(permit) = self.shared.sem.try_acquire_many(cost) {
            permit.forget();
        } else {
            match self.shared.sem.acquire_many(cost).await {
                Ok(permit) => permit.forget(),
                Err(_) => {
                    let event = self.give_back(p.event, p.generated);
                    return Err(ProducerError::Closed(Some(Box::new(event))));
                }
            }
        }
        self.stage(p)
    }

    /// Leaves a prepared event (its bytes charged) for the background task.
    fn stage(&self, p: Prepared) -> Result<(), ProducerError> {
        let Prepared {
            event,
            generated,
            route,
            cost,
        } = p;
        let staged = match route {
            Route::Encoded {
                payload,
                partition_key,
                hash,
            } => {
                let producer_id = self.producer_id_of(&event);
                let write = |buf: &mut BytesMut| match &payload {
                    Payload::V2 { .. } => encode_single_into(buf, &event, producer_id, generated),
                    Payload::Json(json) => buf.extend_from_slice(json),
                };
                let staging = &self.shared.staging;
                if staging.push(payload.len(), write, partition_key, hash, cost) {
                    Ok(())
                } else {
                    self.shared.sem.add_permits(cost);
                    Err((event, generated))
                }
            }
            Route::Fold { payload_len } => {
                let default_producer_id = self.shared.config.producer_id.as_deref();
                match self
                    .shared
                    .staging
                    .fold(event, default_producer_id, cost, payload_len)
                {
                    Ok(()) => Ok(()),
                    Err(event) => {
                        self.shared.sem.add_permits(cost);
                        Err((event, None))
                    }
                }
            }
        };
        match staged {
            Ok(()) => {
                self.accepted();
                Ok(())
            }
            // The background task took its last events (shutdown); the event is ours to give back.
            Err((event, generated)) => Err(ProducerError::Closed(Some(Box::new(
                self.give_back(event, generated),
            )))),
        }
    }

    /// Like [`Producer::record`] but never waits: a full buffer is [`ProducerError::Full`]
    /// (with the event, id assigned, so a retry keeps the same id).
    pub fn try_record(&self, event: Event) -> Result<(), ProducerError> {
        let p = self.prepare(event)?;
        let permit = match self.shared.sem.try_acquire_many(p.cost as u32) {
            Ok(permit) => permit,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                self.shared.metrics.refused("Full");
                let event = self.give_back(p.event, p.generated);
                return Err(ProducerError::Full(Box::new(event)));
            }
            Err(tokio::sync::TryAcquireError::Closed) => {
                let event = self.give_back(p.event, p.generated);
                return Err(ProducerError::Closed(Some(Box::new(event))));
            }
        };
        permit.forget();
        self.stage(p)
    }

    /// Sends everything buffered now (ignoring linger) and waits until every event recorded
    /// before this call is acknowledged or handed back. Returns the events handed back since
    /// the last flush (none when an undelivered callback is installed).
    pub async fn flush(&self) -> Result<FlushOutcome, ProducerError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .tx
            .send(Command::Flush(tx))
            .await
            .map_err(|_| ProducerError::Closed(None))?;
        rx.await.map_err(|_| ProducerError::Closed(None))
    }

    /// Stops accepting events, delivers everything buffered (bounded by the record TTL), stops
    /// the background task, and returns what could not be delivered.
    pub async fn shutdown(&self) -> Result<FlushOutcome, ProducerError> {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Callers waiting for buffer space get `Closed` (with their event) instead of waiting.
        self.shared.sem.close();
        let (tx, rx) = oneshot::channel();
        self.shared
            .tx
            .send(Command::Shutdown(tx))
            .await
            .map_err(|_| ProducerError::Closed(None))?;
        rx.await.map_err(|_| ProducerError::Closed(None))
    }

    /// Takes the events handed back so far without waiting for a flush.
    pub async fn take_undelivered(&self) -> Result<Vec<Undelivered>, ProducerError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .tx
            .send(Command::TakeUndelivered(tx))
            .await
            .map_err(|_| ProducerError::Closed(None))?;
        rx.await.map_err(|_| ProducerError::Closed(None))
    }

    /// Bytes currently held against [`ProducerConfig::max_buffered_bytes`].
    pub fn buffered_bytes(&self) -> usize {
        self.shared
            .config
            .max_buffered_bytes
            .saturating_sub(self.shared.sem.available_permits())
    }

    /// The settings in use.
    pub fn config(&self) -> &ProducerConfig {
        &self.shared.config
    }

    /// Counters since start.
    pub fn stats(&self) -> ProducerStats {
        self.shared.stats.snapshot()
    }

    /// What a validated event costs against the buffer bound.
    pub fn buffer_cost(payload_len: usize, partition_key_len: usize) -> usize {
        payload_len + partition_key_len + RECORD_OVERHEAD_BYTES
    }

    fn accepted(&self) {
        self.shared.metrics.events_recorded.increment(1);
        StatCounters::add(&self.shared.stats.events_recorded, 1);
    }
}

/// Builds a [`Producer`].
pub struct ProducerBuilder {
    config: ProducerConfig,
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

    /// Per-second collapse on or off.
    pub fn collapse(mut self, on: bool) -> Self {
        self.config.collapse = on;
        self
    }

    /// The encoding written: v2 (the default) or v1 JSON (docs/wire-format.md).
    pub fn wire_version(mut self, version: crate::wire::WireVersion) -> Self {
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
                aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .http_client(http)
                    .load()
                    .await
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
        let staging = Arc::new(Staging::new(engine::size_trigger(&config)));
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
            }),
        })
    }
}
