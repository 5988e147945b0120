//! The local runner: plays the parts AWS plays for the pipeline — EventBridge schedules, SQS
//! event source mappings (batches, visibility timeout, redelivery, partial batch failures,
//! DLQ after maxReceiveCount via the queue's own redrive policy) — and invokes the very
//! handler functions the Lambdas run, or with [`Runner::with_hosted`] the Lambdas' built
//! binaries, each its own process. Time reaches handlers only through one settable clock,
//! shared with the Marketplace simulator (the processes read it through libfaketime).

mod sqs_mapping;

use crate::kinesis_esm::{EsmOptions, KinesisEsm};
use crate::local::LocalEnv;
use crate::local::hosted::{Hosted, scheduled_event};
use anyhow::{Context, Result, bail};
use aws_lambda_events::sqs::SqsEvent;
use awsmp_aws::emf::MetricsSink;
use awsmp_contract::clock::{Clock, FixedClock};
use awsmp_pipeline::adapters::marketplace::MarketplaceMeteringApi;
use awsmp_pipeline::config::{Config, DeploymentMode};
use awsmp_pipeline::handlers::discoverer::{DiscovererInput, DiscovererOutput, scheduled_targets};
use awsmp_pipeline::handlers::{
    Services, aggregator, cleanup, discoverer, expiry, handle_sqs_batch, submitter,
};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Visibility timeout the runner asks for when it receives (the ReceiveMessage override):
/// short, so a failed message is redelivered within a tick instead of minutes later.
pub const LOCAL_VISIBILITY_SECS: i32 = 1;
/// Messages per receive (SQS maximum; also the ESM batch size used here).
pub const RECEIVE_BATCH: i32 = 10;
/// How long `drain` may take before it gives up.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);

/// Which handler consumes a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consumer {
    Aggregator,
    Cleanup,
    Subscription,
}

/// The local runner.
pub struct Runner {
    /// Handler dependencies (clock = [`Runner::clock`]).
    pub svc: Services,
    /// The one clock.
    pub clock: Arc<FixedClock>,
    /// Captured EMF metric lines.
    pub metrics: MetricsSink,
    /// `BatchMeterUsage`, pointed at the simulator.
    pub metering: MarketplaceMeteringApi,
    /// The Kinesis consumer behind its event source mapping, if attached.
    stream: Option<StreamConsumer>,
    /// Whether `tick` polls the stream first (default). Off when the caller polls it on a
    /// task of its own with [`Runner::consume_stream`], beside the ticks, as AWS runs them.
    pub tick_consumes: bool,
    /// The discoverer fences on `svc.watermarks` although no consumer is attached
    /// ([`Runner::with_ingest_fence`]).
    fenced: bool,
    env: LocalEnv,
    sqs: aws_sdk_sqs::Client,
    http: reqwest::Client,
    queues: Vec<(String, String, Consumer)>,
    /// The subscription and deprovision-cleanup Lambdas, when the stack has their table and
    /// queue.
    pub lifecycle: Option<crate::local::lifecycle::LocalLifecycle>,
    /// The Lambdas as processes ([`Runner::with_hosted`]); `None`: the handlers in process.
    hosted: Option<Arc<Hosted>>,
    /// Under the host, deliver every SQS batch twice (duplicate deliveries from outside).
    pub redeliver: bool,
    /// The hosted functions' stdout lines this runner took.
    hosted_lines: std::sync::Mutex<Vec<String>>,
}

/// What one `tick` did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickReport {
    /// The instant of the tick.
    pub at: Option<DateTime<Utc>>,
    /// The Kinesis consumer's event source mapping, when the runner has one: the usage
    /// stream polled until every shard is caught up.
    pub consumer: Option<crate::kinesis_esm::EsmReport>,
    /// Totals over the 30 discoverer targets and the flush target.
    pub discoverer: DiscovererOutput,
    /// Messages handled per queue, and how many failed.
    pub drained: BTreeMap<String, DrainCount>,
    /// The submitter run (its error, if it failed, in `submitterError`).
    pub submitter: Option<submitter::SubmitterOutput>,
    /// Why the submitter run failed, if it did (the Lambda's Errors alarm would fire).
    pub submitter_error: Option<String>,
    /// The expiry sweep.
    pub expiry: Option<expiry::ExpiryOutput>,
    /// Lifecycle events the simulator emitted since the last tick, delivered to the
    /// subscription queue (EventBridge's part).
    pub lifecycle_events: usize,
    /// The deprovision-cleanup run (its 15-minute schedule is due at every tick).
    pub deprovision_cleanup: Option<awsmp_lifecycle::handlers::deprovision_cleanup::CleanupReport>,
}

/// The consumer and its event source mapping.
struct StreamConsumer {
    esm: tokio::sync::Mutex<KinesisEsm>,
    consumer: awsmp_consumer::Consumer,
    kinesis: aws_sdk_kinesis::Client,
    stream: String,
}

impl StreamConsumer {
    /// The heartbeat's schedule in the runner: one marker per open shard before every poll, so
    /// idle shards' watermarks advance (shards registered, drained parents retired). Then the stream is drained to its tip; once it is, no
    /// record can still arrive before the pipeline's instant `at` in the runner's timeline
    /// (`--at` may be ahead of the emulator's real arrival times), so every watermark in the
    /// stream's partition of the table is advanced to `at`; other streams metered into the same
    /// table (a load run's) are their own partitions and fence nobody here (docs/local-stack.md,
    /// "Ingest watermark").
    async fn heartbeat_and_drain(
        &self,
        at: DateTime<Utc>,
    ) -> Result<crate::kinesis_esm::EsmReport> {
        let marks = self.consumer.watermarks.as_deref();
        awsmp_consumer::heartbeat::scheduled(&self.kinesis, &self.stream, marks)
            .await
            .context("stream heartbeat")?;
        let report = self.drain().await?;
        if let Some(marks) = &self.consumer.watermarks {
            let stream = self.stream.as_str();
            for shard in marks.shards(stream).await.context("watermarks")? {
                if !shard.drained {
                    marks
                        .advance(stream, &shard.shard_id, at)
                        .await
                        .with_context(|| format!("watermark of {stream}/{}", shard.shard_id))?;
                }
            }
        }
        Ok(report)
    }

    async fn drain(&self) -> Result<crate::kinesis_esm::EsmReport> {
        let consumer = &self.consumer;
        self.esm
            .lock()
            .await
            .drain(|event| async move {
                Ok::<_, std::convert::Infallible>(consumer.handle(event).await)
            })
            .await
    }
}

/// Messages one queue delivered during a drain.
#[derive(Debug, Clone, Copy, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainCount {
    /// Deliveries handled successfully (and deleted).
    pub succeeded: u64,
    /// Deliveries that failed (left for redelivery / DLQ).
    pub failed: u64,
}

impl Runner {
    /// A runner over the stack in `env`. A setting comes from `overrides`, else the env file
    /// (the stack's resource names and URLs are authoritative there), else the process
    /// environment (e.g. `AWSMP_METERING_LOCK_HOURS`).
    pub async fn new(env: LocalEnv, overrides: &BTreeMap<String, String>) -> Result<Self> {
        let lookup = |k: &str| {
            overrides
                .get(k)
                .cloned()
                .or_else(|| env.vars.get(k).cloned())
                .or_else(|| std::env::var(k).ok())
        };
        let config = Config::from_lookup(lookup).context("pipeline configuration")?;
        let clock = Arc::new(FixedClock::new(Utc::now()));
        let metrics = MetricsSink::capture("local-runner");
        let sqs = env.sqs().await?;
        let mut svc = Services::from_clients(
            config.clone(),
            env.dynamodb().await?,
            sqs.clone(),
            metrics.clone(),
            clock.clone(),
        );
        // A site outside the events region reads the subscribers table there
        // (docs/local-stack.md, "Many products, many regions").
        if let (Some(ddb), Some(table)) = (
            crate::local::topology::events_dynamodb(&env).await?,
            &config.subscribers_table,
        ) {
            svc.deprovisioning = Some(Arc::new(
                awsmp_aws::deprovisioning::DynamoDbDeprovisioningIndex::new(ddb, table),
            ));
        }
        let mut queues = Vec::new();
        for (name, url, consumer) in [
            ("work", &config.work_queue_url, Consumer::Aggregator),
            (
                "deprovision-work",
                &config.deprovision_work_queue_url,
                Consumer::Aggregator,
            ),
            ("cleanup", &config.cleanup_queue_url, Consumer::Cleanup),
        ] {
            if let Some(url) = url {
                queues.push((name.to_owned(), url.clone(), consumer));
            }
        }
        let metering = MarketplaceMeteringApi::new(env.metering().await?);
        let lifecycle =
            crate::local::lifecycle::LocalLifecycle::from_env(&env, metrics.clone()).await?;
        if let Some(l) = &lifecycle {
            queues.push((
                "subscription".to_owned(),
                l.queue_url.clone(),
                Consumer::Subscription,
            ));
        }
        Ok(Self {
            svc,
            clock,
            metrics,
            metering,
            stream: None,
            tick_consumes: true,
            fenced: false,
            env,
            sqs,
            http: reqwest::Client::new(),
            queues,
            lifecycle,
            hosted: None,
            redeliver: false,
            hosted_lines: std::sync::Mutex::default(),
        })
    }

    /// Invoke the Lambdas as the processes of `hosted` instead of calling their handlers: each
    /// tick's scheduled targets, the queues' batches and the virtual clock go to them.
    pub fn with_hosted(mut self, hosted: Arc<Hosted>) -> Self {
        self.hosted = Some(hosted);
        self
    }

    /// The EMF metric lines of the pipeline's and lifecycle's functions so far: captured in
    /// process, or written to the hosted processes' stdout.
    pub fn metric_lines(&self) -> Vec<String> {
        let mut lines = self.metrics.lines();
        let mut taken = self.hosted_lines.lock().expect("lines");
        if let Some(h) = &self.hosted {
            taken.extend(h.take_stdout(&crate::local::hosted::VIRTUAL_CLOCK));
        }
        lines.extend(taken.iter().cloned());
        lines
    }

    /// Attach the Kinesis consumer: each tick first polls the usage stream
    /// (`AWSMP_USAGE_STREAM`) through the local event source mapping — checkpoints kept in
    /// `checkpoint`, failed batches retried with bisection, then sent to the on-failure queue —
    /// into the consumer handler, as Lambda's mapping would.
    pub async fn with_stream_consumer(mut self, checkpoint: std::path::PathBuf) -> Result<Self> {
        let env = &self.env;
        let config = awsmp_consumer::Config::from_lookup(|k| {
            env.vars.get(k).cloned().or_else(|| std::env::var(k).ok())
        })
        .context("consumer configuration")?;
        let mut consumer = awsmp_consumer::adapters::dynamodb::consumer_from_config(
            &config,
            env.dynamodb().await?,
        );
        consumer.metrics = self.metrics.clone();
        consumer.archive = crate::local::ingest::billing_archive(env).await?;
        let options = EsmOptions {
            failure_destination: Some((
                env.sqs().await?,
                env.get("AWSMP_CONSUMER_FAILURE_QUEUE_URL")?.to_owned(),
            )),
            ..EsmOptions::default()
        };
        let esm = KinesisEsm::new(
            env.kinesis().await?,
            env.get("AWSMP_USAGE_STREAM")?,
            options,
            checkpoint,
        )
        .await?;
        self.stream = Some(StreamConsumer {
            esm: tokio::sync::Mutex::new(esm),
            consumer,
            kinesis: env.kinesis().await?,
            stream: env.get("AWSMP_USAGE_STREAM")?.to_owned(),
        });
        Ok(self)
    }

    /// Fence the discoverer on `stream`'s partition of `watermarks` while the stream is
    /// consumed elsewhere (a load run consumes its own stream on a task of its own, publishing
    /// into the same table).
    pub fn with_ingest_fence(
        mut self,
        watermarks: Arc<dyn awsmp_aws::watermark::WatermarkStore>,
        stream: &str,
    ) -> Self {
        self.svc.watermarks = Some(watermarks);
        self.svc.config.usage_stream = Some(stream.to_owned());
        self.fenced = true;
        self
    }

    /// Poll the usage stream through the event source mapping until every shard is caught
    /// up, after one heartbeat marker per open shard (`None` without an attached consumer).
    pub async fn consume_stream(&self) -> Result<Option<crate::kinesis_esm::EsmReport>> {
        match &self.stream {
            // Drained to the tip as of the runner's instant, as a tick does.
            Some(stream) => Ok(Some(
                stream
                    .heartbeat_and_drain(self.clock.now())
                    .await
                    .context("the Kinesis consumer")?,
            )),
            None => Ok(None),
        }
    }

    /// Set the one instant for handlers and the simulator.
    pub async fn set_time(&self, at: DateTime<Utc>) -> Result<()> {
        self.clock.set(at);
        if let Some(h) = &self.hosted {
            h.set_time(at)?;
        }
        if let Some(admin) = self.env.vars.get("AWSMP_SIM_ADMIN_URL") {
            let res = self
                .http
                .post(format!("{admin}/_sim/clock"))
                .json(&serde_json::json!({"now": at.to_rfc3339()}))
                .send()
                .await
                .context("setting the simulator clock")?;
            if !res.status().is_success() {
                bail!("simulator clock: {}", res.status());
            }
        }
        Ok(())
    }

    /// The discoverer's services. Without the stream consumer the runner plays a seller who
    /// writes rows itself: there is no stream to fence on, so the fence is off.
    fn discoverer_services(&self) -> Services {
        let mut svc = self.svc.clone();
        if self.stream.is_none() && !self.fenced {
            svc.watermarks = None;
        }
        svc
    }

    /// Run every scheduled target once as of `at` (all 30 discoverer targets and the
    /// deprovisioning flush), drain the queues through their handlers until quiet, then run
    /// the submitter and the expiry sweep (the 5-minute rule's two targets).
    pub async fn tick(&self, at: DateTime<Utc>) -> Result<TickReport> {
        self.set_time(at).await?;
        let mut report = TickReport {
            at: Some(at),
            ..Default::default()
        };
        if self.tick_consumes
            && let Some(stream) = &self.stream
        {
            report.consumer = Some(
                stream
                    .heartbeat_and_drain(at)
                    .await
                    .context("the Kinesis consumer")?,
            );
        }
        // EventBridge's part: the buyer's lifecycle events into the subscription queue first,
        // so a deprovisioning is in the index before the flush looks.
        if let Some(l) = &self.lifecycle {
            let events = l.take_sim_events().await?;
            report.lifecycle_events = l.enqueue(&events).await?;
            if !events.is_empty() {
                report.drained = self.drain().await?;
            }
        }
        // Direct-submit deploys no discoverer rules (the raw usage table may still be named in
        // the local env file, which serves both modes).
        let full =
            self.svc.config.deployment_mode == DeploymentMode::Full && self.svc.usage.is_some();
        if full {
            self.discover_all(&mut report).await?;
            for (name, c) in self.drain().await? {
                let entry = report.drained.entry(name).or_default();
                entry.succeeded += c.succeeded;
                entry.failed += c.failed;
            }
        }
        self.submit_and_expire(at, &mut report).await?;
        Ok(report)
    }

    /// Every discoverer target once: the template's constant inputs to the hosted process, or
    /// the handler on each target in process.
    async fn discover_all(&self, report: &mut TickReport) -> Result<()> {
        let mut targets = scheduled_targets();
        if self.svc.deprovisioning.is_some() {
            targets.push(DiscovererInput::FlushDeprovisioning);
        }
        let svc = self.discoverer_services();
        let hosted = self.hosted.as_deref();
        let inputs: Vec<Value> = match hosted {
            Some(h) => h.discoverer_inputs().to_vec(),
            None => targets
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()?,
        };
        for input in inputs {
            let out: DiscovererOutput = match hosted {
                Some(h) => h.call("discoverer", &input).await,
                None => {
                    Ok(discoverer::discover(&svc, serde_json::from_value(input.clone())?).await?)
                }
            }
            .with_context(|| format!("discoverer {input}"))?;
            report.discoverer.buckets += out.buckets;
            report.discoverer.groups_enqueued += out.groups_enqueued;
            report.discoverer.rows_expired += out.rows_expired;
            report.discoverer.quantity_expired += out.quantity_expired;
            report.discoverer.buckets_fenced += out.buckets_fenced;
        }
        Ok(())
    }

    /// The submitter (its failure recorded, not raised: the next tick retries), the expiry
    /// sweep and the deprovision-cleanup run, each on its scheduled event when hosted.
    async fn submit_and_expire(&self, at: DateTime<Utc>, report: &mut TickReport) -> Result<()> {
        let hosted = self.hosted.as_deref();
        let submitted = match hosted {
            Some(h) => h.call("submitter", &scheduled_event("submitter", at)).await,
            None => submitter::submit(&self.svc, &self.metering)
                .await
                .map_err(anyhow::Error::from),
        };
        match submitted {
            Ok(out) => report.submitter = Some(out),
            Err(e) => report.submitter_error = Some(format!("{e:#}")),
        }
        report.expiry = Some(
            match hosted {
                Some(h) => h.call("expiry", &scheduled_event("expiry", at)).await,
                None => expiry::expire(&self.svc).await.map_err(anyhow::Error::from),
            }
            .context("expiry")?,
        );
        if let Some(l) = &self.lifecycle {
            let event = scheduled_event("deprovision-cleanup", at);
            report.deprovision_cleanup = Some(
                match hosted {
                    Some(h) => h.call("deprovision-cleanup", &event).await,
                    None => l.cleanup(at).await,
                }
                .context("deprovision-cleanup")?,
            );
        }
        Ok(())
    }

    /// Invoke one function with a JSON event, as `lambda invoke` would; returns its response.
    pub async fn invoke(&self, function: &str, event: Value) -> Result<Value> {
        let svc = &self.svc;
        Ok(match function {
            "discoverer" => serde_json::to_value(
                discoverer::discover(&self.discoverer_services(), serde_json::from_value(event)?)
                    .await?,
            )?,
            "aggregator" | "cleanup" => {
                let event: SqsEvent =
                    serde_json::from_value(event).context("an SQS event ({\"Records\":[…]})")?;
                let response = if function == "aggregator" {
                    handle_sqs_batch("aggregator", event, |body| async move {
                        aggregator::aggregate(svc, &body).await.map(drop)
                    })
                    .await
                } else {
                    handle_sqs_batch("cleanup", event, |body| async move {
                        cleanup::cleanup(svc, &body).await.map(drop)
                    })
                    .await
                };
                serde_json::to_value(response)?
            }
            "submitter" => serde_json::to_value(submitter::submit(svc, &self.metering).await?)?,
            "subscription" | "deprovision-cleanup" => {
                let Some(l) = &self.lifecycle else {
                    bail!("the stack has no subscribers table or subscription queue");
                };
                if function == "subscription" {
                    let event: SqsEvent = serde_json::from_value(event)
                        .context("an SQS event ({\"Records\":[…]})")?;
                    serde_json::to_value(l.handle(event).await)?
                } else {
                    serde_json::to_value(l.cleanup(self.clock.now()).await?)?
                }
            }
            "expiry" => serde_json::to_value(expiry::expire(svc).await?)?,
            other => bail!(
                "unknown function {other:?} (discoverer, aggregator, cleanup, submitter, expiry, subscription, deprovision-cleanup)"
            ),
        })
    }
}
