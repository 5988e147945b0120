//! The local stack as a run's target: a catalog of the run's own licenses in the simulator, a
//! stream of the run's own (or, when producing only, a named existing stream that is left in
//! place), the local event source mapping and consumer, pipeline ticks on a controlled clock,
//! and the simulator's ledger as the billing record.

use super::collect::Scope;
use super::emulator_cpu::CpuWatch;
use super::fence::RunWatermarks;
use super::front_doors::{self, IngestPlan, IngestSent};
use super::meter::Stack;
use super::sim_admin::{SimAdmin, ledger_group_hour};
use super::target::{ConsumeOutcome, RunTarget};
use super::{
    LOADTEST_PRODUCT_CODE, Lambdas, RUN_STREAM_SHARDS, RunContext, RunSpec, catalog,
    licenses_needed, run_license,
};
use crate::conservation::{GroupHour, Inputs};
use crate::report::RunReport;
use anyhow::{Context, Result};
use awsmp_local_stack::local::hosted::{FunctionRun, Hosted, HostedSpec};
use awsmp_local_stack::local::{self, LocalEnv, Paths, UpOptions};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// How each fault class is injected when the Lambdas run as processes: every class applies,
/// each from outside the binaries (docs/local-stack.md, "The demo: every Lambda a process").
const FAULTS_UNDER_HOST: &str = "all apply, from outside the binaries: throttling, \
    partial-put-records, lost-responses in the producer's sink; consumer-crashes kill the \
    consumer's process 0-300 ms into about one invocation in four (SIGKILL; the mapping \
    replays), and meter-ingest's into the first attempt of about one async invoke in four \
    (Lambda retries it under the same request id); duplicate-deliveries deliver every SQS batch to the function twice (the same \
    messages, as after a lost delete); marketplace-faults and submitter-crashes in the \
    simulator (its admin API); clock-jumps on the virtual clock (libfaketime)";

/// A run on the local stack.
pub(super) struct LocalTarget {
    env: LocalEnv,
    stream: String,
    /// Whether the run created `stream` (and deletes it at the end).
    owns_stream: bool,
    licenses: Vec<(String, String)>,
    sim: SimAdmin,
    /// The event source mapping's checkpoints for this run.
    checkpoint: PathBuf,
    /// The run's ingest watermarks (`None`: the stack has no watermark table, no fence).
    watermarks: Option<Arc<RunWatermarks>>,
    /// The last license carries the injected bad inputs.
    injects: bool,
    /// The stack's DynamoDB emulator, whose CPU the report gives (`None`: not measured).
    dynamodb_pid: Option<u32>,
    /// The Lambdas as processes (`--lambdas host`); `None`: their handlers in process.
    hosted: Option<Arc<Hosted>>,
    /// What the run sends through meter-ingest (hosted runs).
    ingest: Option<IngestPlan>,
}

impl LocalTarget {
    /// Start the stack (if needed) with the run's catalog, reset the simulator, and create the
    /// run's stream unless the run writes into a named one.
    pub(super) async fn set_up(paths: &Paths, spec: &RunSpec, nonce: u32) -> Result<Self> {
        // A load run meters one product in one region, with a catalog of its own; it would
        // replace every region's catalog (docs/local-stack.md, "Many products, many regions").
        if local::topology::Topology::load(paths)?.is_some_and(|t| t.is_multi()) {
            anyhow::bail!(
                "the stack at {} holds several products or regions; give `--sites all` to \
                 spread the run's licenses over every site, or use a single-site stack \
                 (another AWSMP_LOCAL_DIR, or `awsmp-local up --products 1 --regions \
                 us-east-1`)",
                paths.root.display()
            );
        }
        let w = &spec.produce.workload;
        // Under the host the buyers subscribe and register through the front door instead, and
        // a module of the run's own bills licenses of its own through meter-ingest (after the
        // producers'). One more license than that carries the injected bad inputs.
        let registering = spec.lambdas == Lambdas::Host && !spec.produce_only;
        let needed = licenses_needed(spec);
        let module = if registering {
            module_licenses(spec, needed)
        } else {
            0
        };
        let injection = usize::from(spec.bad_inputs);
        let licenses: Vec<(String, String)> = (0..needed + module + injection)
            .map(|i| run_license(nonce, i))
            .collect();
        // The run's local state (its catalog, its mapping's checkpoints); older runs' goes.
        let dir = paths.loadtest();
        std::fs::create_dir_all(&dir)?;
        for old in std::fs::read_dir(&dir)?.flatten() {
            std::fs::remove_file(old.path()).ok();
        }
        let in_catalog = if registering { &[][..] } else { &licenses[..] };
        let catalog_path = dir.join(format!("catalog-{nonce:08x}.json"));
        std::fs::write(
            &catalog_path,
            serde_json::to_string_pretty(&catalog(in_catalog, &w.dimensions))?,
        )?;
        let options = UpOptions {
            catalog: Some(catalog_path),
            ephemeral: None,
            shape: None,
        };
        let env = local::up(paths, &options)
            .await
            .context("starting the local stack")?;
        let site = Site {
            licenses: licenses.clone(),
            checkpoint: dir.join(format!("esm-{nonce:08x}.json")),
            stream: format!("awsmp-loadtest-{nonce:08x}"),
            reset: true,
        };
        let mut target = Self::on_site(env, spec, site).await?;
        target.dynamodb_pid = local::service_pid(paths, "dynamodb");
        if let (Some(hosted), true) = (target.hosted.clone(), registering) {
            target.licenses = front_doors::register_customers(
                &hosted,
                &target.env,
                &target.sim,
                LOADTEST_PRODUCT_CODE,
                &licenses,
            )
            .await
            .context("registering the run's buyers through the register binary")?;
            let granted = &target.licenses[needed..needed + module];
            target.ingest = ingest_plan(spec, granted, nonce);
        }
        Ok(target)
    }

    /// The run's share on one site of the stack, whose simulator already has the run's
    /// catalog: its stream (unless the run writes into a named one), its simulator reset when
    /// `site.reset`, its watermarks.
    pub(super) async fn on_site(env: LocalEnv, spec: &RunSpec, site: Site) -> Result<Self> {
        let Site {
            licenses,
            checkpoint,
            stream: own_stream,
            reset,
        } = site;
        let (stream, owns_stream) = match named_stream(spec, &env)? {
            Some(name) => (name, false),
            None => (own_stream, true),
        };
        let kinesis = env.kinesis().await?;
        if owns_stream {
            let def = local::resources::StreamDef {
                logical_id: "LoadTestStream".into(),
                stack: "loadtest".into(),
                name: stream.clone(),
                env: String::new(),
                shards: RUN_STREAM_SHARDS,
            };
            local::resources::ensure_stream(&kinesis, &def).await?;
        } else {
            kinesis
                .describe_stream_summary()
                .stream_name(&stream)
                .send()
                .await
                .with_context(|| format!("stream {stream} (--stream names an existing stream)"))?;
        }
        let sim = SimAdmin::new(&env)?;
        if reset {
            sim.post("/_sim/reset", serde_json::json!({})).await?;
        }
        let watermarks = RunWatermarks::of_stack(&env, &stream).await?;
        let hosted = match spec.lambdas {
            Lambdas::Host if !spec.produce_only => {
                let dir = checkpoint.parent().unwrap_or(&checkpoint);
                let consumers = RUN_STREAM_SHARDS as usize * spec.overlap.parallelization_factor;
                let hosted_spec = HostedSpec::load_run(
                    &dir.join(format!("lambdas-{stream}")),
                    consumers,
                    &stream,
                )?;
                let hosted = Hosted::start(&env, &hosted_spec)
                    .await
                    .context("starting the Lambdas under the host")?;
                Some(Arc::new(hosted))
            }
            _ => None,
        };
        Ok(Self {
            hosted,
            ingest: None,
            watermarks,
            injects: spec.bad_inputs,
            env,
            stream,
            owns_stream,
            licenses,
            sim,
            checkpoint,
            dynamodb_pid: None,
        })
    }
}

/// Licenses of the run's meter-ingest module: about `--ingest-share` of the producers' (at
/// least one), none for a share of 0. They are the module's alone: a group metered by both a
/// producer that allocates usage (VMT) and a module that does not would mix allocated and
/// unallocated usage in one hour, which Marketplace refuses.
fn module_licenses(spec: &RunSpec, producers: usize) -> usize {
    if spec.ingest_share <= 0.0 {
        return 0;
    }
    ((producers as f64 * spec.ingest_share).ceil() as usize).max(1)
}

/// What a hosted run sends through meter-ingest: `--ingest-share` of its events, from a module
/// granted `licenses` and every dimension; `None` when it sends none.
fn ingest_plan(spec: &RunSpec, licenses: &[(String, String)], nonce: u32) -> Option<IngestPlan> {
    let p = &spec.produce;
    let seconds = p
        .duration
        .unwrap_or_else(|| p.events.unwrap_or(0) as f64 / p.rate);
    let total = p.events.map_or(p.rate * seconds, |e| e as f64);
    let events = (total * spec.ingest_share).ceil() as usize;
    if events == 0 || licenses.is_empty() {
        return None;
    }
    Some(IngestPlan {
        module: format!("loadtest-{nonce:08x}"),
        licenses: licenses.to_vec(),
        dimensions: p.workload.dimensions.clone(),
        events,
        over: std::time::Duration::from_secs_f64(seconds.max(0.0)),
        crashes: p.faults.has(crate::faults::FaultClass::ConsumerCrashes),
        seed: p.workload.seed,
        bad_inputs: spec.bad_inputs,
    })
}

/// One site's share of a run ([`LocalTarget::on_site`]).
pub(super) struct Site {
    /// The licenses the share meters against (the last carries the bad inputs, if injected).
    pub(super) licenses: Vec<(String, String)>,
    /// The event source mapping's checkpoints.
    pub(super) checkpoint: PathBuf,
    /// The name of the stream the share creates (unless the run names one).
    pub(super) stream: String,
    /// Reset the site's simulator first.
    pub(super) reset: bool,
}

impl LocalTarget {
    /// What metering uses of the stack.
    fn stack(&self) -> Stack<'_> {
        Stack {
            env: &self.env,
            sim: &self.sim,
            licenses: &self.licenses,
            fence: self.watermarks.as_ref(),
            hosted: self.hosted.as_ref(),
        }
    }
}

/// The existing stream a produce-only run writes into: `--stream`, else the stack's usage
/// stream. `None`: the run creates a stream of its own.
fn named_stream(spec: &RunSpec, env: &LocalEnv) -> Result<Option<String>> {
    match (&spec.stream, spec.produce_only) {
        (Some(name), _) => Ok(Some(name.clone())),
        (None, true) => Ok(Some(env.get("AWSMP_USAGE_STREAM")?.to_owned())),
        (None, false) => Ok(None),
    }
}

impl RunTarget for LocalTarget {
    fn env(&self) -> &LocalEnv {
        &self.env
    }

    fn stream(&self) -> &str {
        &self.stream
    }

    fn licenses(&self) -> &[(String, String)] {
        &self.licenses
    }

    fn injection_license(&self) -> Option<&(String, String)> {
        self.injects.then(|| self.licenses.last()).flatten()
    }

    fn describe(&self) -> (String, String) {
        let stream = if self.owns_stream {
            format!("{} ({RUN_STREAM_SHARDS} shards)", self.stream)
        } else {
            format!("{} (existing; left in place)", self.stream)
        };
        ("local stack".into(), stream)
    }

    /// The consumer polls the stream while (unless the run is sequential) the pipeline's
    /// schedules tick on their own task, as in AWS.
    async fn consume(&self, ctx: &RunContext<'_>) -> Result<ConsumeOutcome> {
        let consuming = async {
            let emulator = self.dynamodb_pid.and_then(CpuWatch::start);
            let this = CpuWatch::start(std::process::id());
            let (stream, checkpoint) = (&self.stream, &self.checkpoint);
            let hosted = self.hosted.clone();
            let out = super::consume::consume(ctx, &self.env, (stream, checkpoint), hosted).await;
            ctx.consumption_done.store(true, Ordering::SeqCst);
            let mut t = ctx.timings.lock().expect("poisoned");
            t.emulator = emulator.and_then(CpuWatch::stop);
            t.this_process = this.and_then(CpuWatch::stop);
            drop(t);
            out
        };
        if ctx.spec.overlap.sequential {
            return consuming.await;
        }
        let stack = self.stack();
        let ticking = super::meter::tick_while_consuming(ctx, &stack);
        let (consumed, ticked) = tokio::join!(consuming, ticking);
        let mut consumed = consumed?;
        let (rejects, overlap) = ticked?;
        for (reason, n) in rejects {
            *consumed.rejects.entry(reason).or_default() += n;
        }
        consumed.overlap = overlap;
        Ok(consumed)
    }

    async fn settle(
        &self,
        ctx: &RunContext<'_>,
        scope: &Scope<'_>,
        _inputs: &Inputs,
        report: &mut RunReport,
        settings: &mut BTreeMap<String, String>,
    ) -> Result<BTreeSet<GroupHour>> {
        // The latency goal is "p99 ≤ 2 s plus the batching window": the report says which.
        settings.insert(
            "batchingWindowMs".to_owned(),
            ctx.spec.overlap.batching_window.as_millis().to_string(),
        );
        if let Some(h) = &self.hosted {
            settings.insert("lambdaProcesses".to_owned(), h.describe());
            settings.insert("faultsUnderHost".to_owned(), FAULTS_UNDER_HOST.to_owned());
        }
        super::meter::meter(ctx, &self.stack(), scope, report, settings).await
    }

    /// The simulator's ledger is the billing record.
    async fn billed(
        &self,
        scope: &Scope<'_>,
        _accepted: BTreeMap<GroupHour, u64>,
    ) -> Result<BTreeMap<GroupHour, u64>> {
        let ledger = self.sim.ledger().await?;
        let mut billed = BTreeMap::new();
        for r in ledger["records"].as_array().into_iter().flatten() {
            let gh = ledger_group_hour(r);
            if scope.licenses.contains(&gh.0) && scope.keeps(&gh) {
                *billed.entry(gh).or_default() += r["quantity"].as_u64().unwrap_or(0);
            }
        }
        Ok(billed)
    }

    /// When the simulator first saw each record (its clock: virtual time).
    async fn billed_instants(
        &self,
        scope: &Scope<'_>,
    ) -> Result<BTreeMap<GroupHour, DateTime<Utc>>> {
        let ledger = self.sim.ledger().await?;
        let mut out = BTreeMap::new();
        for r in ledger["records"].as_array().into_iter().flatten() {
            let gh = ledger_group_hour(r);
            let billed_at = r["firstSeen"]
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
            if let Some(at) = billed_at.filter(|_| scope.licenses.contains(&gh.0)) {
                out.insert(gh, at.with_timezone(&Utc));
            }
        }
        Ok(out)
    }

    /// A share of the usage through the meter-ingest binary, beside the producers.
    async fn ingest(&self, _ctx: &RunContext<'_>) -> Result<Option<IngestSent>> {
        let (Some(hosted), Some(plan)) = (&self.hosted, &self.ingest) else {
            return Ok(None);
        };
        let sent = front_doors::ingest(hosted, &self.env, plan)
            .await
            .context("sending usage through the meter-ingest binary")?;
        Ok(Some(sent))
    }

    fn functions(&self) -> Vec<FunctionRun> {
        self.hosted
            .as_ref()
            .map(|h| h.functions())
            .unwrap_or_default()
    }

    async fn tear_down(&self) -> Result<()> {
        if let Some(h) = &self.hosted {
            h.stop().await;
        }
        if self.owns_stream {
            let kinesis = self.env.kinesis().await?;
            let deleted = kinesis
                .delete_stream()
                .stream_name(&self.stream)
                .send()
                .await;
            if let Err(e) = deleted {
                tracing::warn!(stream = %self.stream, error = %aws_sdk_kinesis::error::DisplayErrorContext(&e), "could not delete the run's stream");
            }
            // The stream is gone: its shards must not hold anyone's fence.
            if let Some(watermarks) = &self.watermarks {
                watermarks.retire().await?;
            }
        }
        Ok(())
    }
}
