//! One load run, end to end: producers → Kinesis → consumer (local event source mapping) →
//! usage table → pipeline ticks on a controlled clock → Marketplace simulator, then the
//! conservation check and the report.
//!
//! Every run gets fresh identities (its own licenses in a catalog of its own, its own stream),
//! so runs never see each other's usage and a seed replays a run exactly.
//!
//! The phases of [`run`]: set up the target ([`local_target`] or [`deployment`], behind
//! [`target::RunTarget`]) → produce while the target consumes ([`consume`]) → settle: meter
//! ([`meter`]) or wait until every group-hour is terminal → collect what every tier ended with
//! ([`collect`]) → the verdict ([`crate::conservation`]) and the report. The run's counts live
//! in one [`RunCounters`].

mod collect;
mod consume;
mod counters;
mod deployment;
mod emulator_cpu;
mod fence;
mod front_doors;
mod inject;
mod local_target;
mod meter;
mod phases;
mod progress;
mod sim_admin;
mod sites;
mod target;
mod timings;

pub use counters::RunCounters;
pub use front_doors::IngestSent;
pub use sites::{SiteReport, SitesReport, run_sites};

use crate::conservation::{self, Inputs, Verdict, Violation};
use crate::cost::{CostComparison, units};
use crate::produce::{ProduceOutcome, ProduceSpec, produce};
use crate::report::{Percentiles, RunReport};
use crate::workload::Group;
use anyhow::Result;
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_contract::row::conforming_row;
use awsmp_local_stack::local::Paths;
use awsmp_producer::Producer;
use chrono::{DateTime, Utc};
use collect::{Scope, collect_tables};
use deployment::DeploymentTarget;
use local_target::LocalTarget;
use progress::Progress;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use target::{ConsumeOutcome, RunTarget};
use timings::Timings;

/// Product code of load-test catalogs.
pub const LOADTEST_PRODUCT_CODE: &str = "awsmploadtest0product00001";
/// Shards of a run's stream.
pub const RUN_STREAM_SHARDS: i32 = 2;

/// Where a run goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The local stack (started if needed), with a catalog and a stream of the run's own, the
    /// local event source mapping and consumer, pipeline ticks on a controlled clock, and the
    /// simulator's ledger as the billing record.
    Local,
    /// A real deployment, named by the environment (`AWSMP_USAGE_STREAM`, the table names,
    /// `AWS_REGION`, credentials; `AWS_ENDPOINT_URL_<SERVICE>` if set). Its own consumer and
    /// schedules do the work; the run produces, waits until every group-hour of its licenses
    /// is terminal, and takes `Success` records of aggregated-usage as billed.
    Deployment {
        /// Licenses to meter against (license ARN, buyer account) — test licenses of the
        /// product, in a dry-run or test-account stage.
        licenses: Vec<(String, String)>,
    },
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Where it runs.
    pub target: Target,
    /// What to produce.
    pub produce: ProduceSpec,
    /// Stop after producing (no consumer, no pipeline).
    pub produce_only: bool,
    /// Produce into this existing stream and leave it there. Default: a produce-only run
    /// writes into the target's usage stream (`AWSMP_USAGE_STREAM`), a whole local run into a
    /// fresh stream of its own (deleted at the end).
    pub stream: Option<String>,
    /// Give up after this long.
    pub timeout: Duration,
    /// How the stages overlap.
    pub overlap: Overlap,
    /// Inject deliberately bad inputs through the real path, each declared with the reason it
    /// must end with (local runs; `loadtest/src/loadrun/inject.rs`).
    pub bad_inputs: bool,
    /// Show a progress bar.
    pub progress: bool,
    /// For the report.
    pub command_line: String,
    /// How a local run runs the Lambdas.
    pub lambdas: Lambdas,
    /// Under [`Lambdas::Host`]: the share of the run's events sent through meter-ingest.
    pub ingest_share: f64,
}

/// How a local run runs the Lambdas (docs/local-stack.md, "The demo: every Lambda a process").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lambdas {
    /// Their handler functions, called in this process: the load test's speed.
    #[default]
    InProcess,
    /// Each Lambda its built binary in its own process under the Lambda Runtime API
    /// (`awsmp-lambda-host`), the scheduled ones on the run's virtual clock through libfaketime.
    Host,
}

impl Lambdas {
    /// What the report says ran.
    pub fn describe(self) -> &'static str {
        match self {
            Self::InProcess => awsmp_local_stack::local::hosted::IN_PROCESS_DESCRIPTION,
            Self::Host => awsmp_local_stack::local::hosted::HOST_DESCRIPTION,
        }
    }
}

/// How a local run's stages overlap. By default, as in AWS: the consumer polls the stream on
/// its own task while the pipeline's schedules tick; `sequential` keeps the old order
/// (produce and consume, then meter) for debugging.
#[derive(Debug, Clone, Default)]
pub struct Overlap {
    /// Produce and consume first, meter after.
    pub sequential: bool,
    /// How far the pipeline's clock runs ahead of the stream while consuming (consumer lag).
    pub consumer_lag: chrono::Duration,
    /// Put the run's first license into its deprovisioning flush window while consuming.
    pub deprovision: bool,
    /// The local event source mapping's `ParallelizationFactor`.
    pub parallelization_factor: usize,
    /// The local event source mapping's `MaximumBatchingWindowInSeconds` (zero: deliver what
    /// a poll read at once).
    pub batching_window: Duration,
}

/// What every phase of a run shares.
struct RunContext<'a> {
    spec: &'a RunSpec,
    /// When the run started (for elapsed times and the timeline).
    started: Instant,
    /// The same instant on the wall clock (what of the tables is this run's).
    started_at: DateTime<Utc>,
    /// Give up after this.
    deadline: Instant,
    counters: Arc<RunCounters>,
    timings: Mutex<Timings>,
    /// Set when every producer has shut down.
    production_done: AtomicBool,
    /// Set when the consumer has caught up after production.
    consumption_done: AtomicBool,
    /// The pipeline's last tick while consuming (settling never ticks before it).
    last_tick: Mutex<Option<DateTime<Utc>>>,
    progress: Progress,
}

/// License ARN and account of license `i` in run `nonce`: fresh identities per run.
pub fn run_license(nonce: u32, i: usize) -> (String, String) {
    (
        format!(
            "arn:aws:license-manager::123456789012:license:l-{nonce:08x}{:024x}",
            i
        ),
        format!(
            "{:012}",
            300_000_000_000_u64 + u64::from(nonce % 1000) * 1_000_000 + i as u64
        ),
    )
}

/// Licenses a run needs: its groups spread over the dimensions.
fn licenses_needed(spec: &RunSpec) -> usize {
    let w = &spec.produce.workload;
    w.groups.div_ceil(w.dimensions.len())
}

/// The simulator catalog of a local run: one product, the run's licenses and dimensions.
fn catalog(licenses: &[(String, String)], dimensions: &[String]) -> serde_json::Value {
    serde_json::json!({
        "windowHours": 24,
        "requestsPerSecond": 10,
        "maxAllocationsPerRecord": 2500,
        "products": [{
            "productCode": LOADTEST_PRODUCT_CODE,
            "dimensions": dimensions,
            "licenses": licenses.iter().map(|(l, a)| serde_json::json!({"licenseArn": l, "customerAWSAccountId": a, "status": "active"})).collect::<Vec<_>>(),
        }]
    })
}

/// Run the load test: on the local stack in `paths`, or against the deployment the
/// environment names.
pub async fn run(paths: &Paths, spec: &RunSpec) -> Result<RunReport> {
    let (started, started_at) = (Instant::now(), Utc::now());
    let nonce = run_nonce(spec);
    match &spec.target {
        Target::Local => {
            let target = LocalTarget::set_up(paths, spec, nonce).await?;
            run_on(&target, &context(spec, started, started_at)).await
        }
        Target::Deployment { licenses } => {
            let target = DeploymentTarget::set_up(spec, licenses)?;
            run_on(&target, &context(spec, started, started_at)).await
        }
    }
}

/// The run's fresh identities: from its seed and the wall clock.
fn run_nonce(spec: &RunSpec) -> u32 {
    (spec.produce.workload.seed as u32) ^ (Utc::now().timestamp() as u32).rotate_left(16)
}

/// A run's shared state, from `started` (the same instant on the wall clock: `started_at`).
fn context(spec: &RunSpec, started: Instant, started_at: DateTime<Utc>) -> RunContext<'_> {
    RunContext {
        spec,
        started,
        started_at,
        deadline: started + spec.timeout,
        counters: Arc::default(),
        timings: Mutex::default(),
        production_done: AtomicBool::new(false),
        consumption_done: AtomicBool::new(false),
        last_tick: Mutex::default(),
        progress: Progress::new(spec),
    }
}

/// The phases after set-up, on any target.
async fn run_on<T: RunTarget>(target: &T, ctx: &RunContext<'_>) -> Result<RunReport> {
    let spec = ctx.spec;
    let mut settings = settings(spec, target);
    let producers = Arc::new(Mutex::new(Vec::new()));
    let sampler = counters::Sampler::start(
        ctx.started,
        ctx.counters.clone(),
        producers.clone(),
        ctx.progress.clone(),
    );
    let (produced, injection, ingested, consumed) =
        produce_and_consume(target, ctx, producers).await?;
    let mut report = RunReport {
        faults: produced.faults.clone(),
        ..Default::default()
    };
    for (reason, n) in &produced.returned_by_reason {
        *report
            .rejects
            .entry(format!("producer:{reason}"))
            .or_default() += n;
    }
    let mut inputs = Inputs {
        produced: produced
            .produced
            .iter()
            .map(|(g, q)| (key(g), *q))
            .collect(),
        producer_returned: produced
            .returned
            .iter()
            .map(|(g, q)| (key(g), *q))
            .collect(),
        ..Default::default()
    };
    declare(&mut inputs, injection, &mut report);
    count_ingested(&mut inputs, ingested.as_ref(), &mut report);
    report.ingest = ingested;
    let record_to_ack = timings::producer_latency();
    if spec.produce_only {
        ctx.progress.phase("done");
        report.conservation = ingestion_verdict(&produced, &inputs, target.stream());
    } else {
        settle_and_check(
            target,
            ctx,
            consumed,
            &mut inputs,
            &mut report,
            &mut settings,
        )
        .await?;
    }
    report.latency.insert(
        "recordToAck".into(),
        Percentiles::from_micros(&record_to_ack),
    );
    report.timeline = sampler.stop().await;
    ctx.progress.finish();
    report.functions = target.functions();
    target.tear_down().await?;
    settings.insert("target".into(), target.describe().0);
    report.settings = settings;
    report.mode = if spec.produce_only { "produce" } else { "run" }.into();
    if spec.target == Target::Local && !spec.produce_only {
        report.lambdas = spec.lambdas.describe().into();
    }
    report.elapsed_secs = ctx.started.elapsed().as_secs_f64();
    Ok(report)
}

/// The run's settings, for the report.
fn settings(spec: &RunSpec, target: &impl RunTarget) -> BTreeMap<String, String> {
    let (p, w) = (&spec.produce, &spec.produce.workload);
    BTreeMap::from([
        ("command".to_owned(), spec.command_line.clone()),
        (
            "events".to_owned(),
            p.events.map_or("-".into(), |e| e.to_string()),
        ),
        (
            "duration".to_owned(),
            p.duration.map_or("-".into(), |d| format!("{d} s")),
        ),
        ("rate".to_owned(), format!("{} events/s", p.rate)),
        ("groups".to_owned(), w.groups.to_string()),
        ("dimensions".to_owned(), w.dimensions.join(",")),
        ("producers".to_owned(), p.producers.to_string()),
        ("collapse".to_owned(), p.collapse.to_string()),
        ("seed".to_owned(), w.seed.to_string()),
        ("faults".to_owned(), p.faults.describe()),
        ("stages".to_owned(), stages(&spec.overlap)),
        ("stream".to_owned(), target.describe().1),
    ])
}

/// How the stages ran, for the report.
fn stages(o: &Overlap) -> String {
    if o.sequential {
        return "sequential".into();
    }
    let mut s = format!(
        "overlapping (consumer lag {} s, parallelization factor {})",
        o.consumer_lag.num_seconds(),
        o.parallelization_factor.max(1)
    );
    if o.deprovision {
        s.push_str(", deprovisioning flush");
    }
    s
}

/// What meter-ingest was sent into the check's inputs: produced usage of its groups, what it
/// refused ended there, its bad inputs declared with their reasons; its crashes and bad inputs
/// among the report's faults.
fn count_ingested(inputs: &mut Inputs, ingested: Option<&IngestSent>, report: &mut RunReport) {
    let Some(sent) = ingested else {
        return;
    };
    for (g, q) in &sent.sent {
        *inputs.produced.entry(g.clone()).or_default() += q;
    }
    inputs.ingest_refused.clone_from(&sent.refused);
    for (k, q) in &sent.injected {
        *inputs.injected.entry(k.clone()).or_default() += q;
    }
    for (name, n) in [
        ("meter-ingest:badInputs", sent.injected.len() as u64),
        ("meter-ingest:crashes", sent.crashes),
    ] {
        if n > 0 {
            report.faults.insert(name.into(), n);
        }
    }
}

/// The injected bad inputs into the check's inputs (their units are produced, and the
/// reasons they must end with declared), and into the report's faults.
fn declare(inputs: &mut Inputs, injection: Option<inject::Injection>, report: &mut RunReport) {
    let Some(inj) = injection else {
        return;
    };
    let kinds = inj.units.len() + inj.records.len() + inj.duplicates.len();
    report.faults.insert("badInputs".into(), kinds as u64);
    for (g, q) in inj.produced {
        *inputs.produced.entry(g).or_default() += q;
    }
    for ((g, reason), q) in inj.units {
        *inputs.produced.entry(g.clone()).or_default() += q;
        *inputs.injected.entry((g, reason)).or_default() += q;
    }
    for (reason, n) in inj.records {
        *inputs.injected_records.entry(reason).or_default() += n;
    }
    for (g, q) in inj.duplicates {
        *inputs.injected_duplicates.entry(g).or_default() += q;
    }
}

/// Producing and consuming run side by side, as they would in production; the bad inputs (if
/// the run injects them) go in first.
async fn produce_and_consume<T: RunTarget>(
    target: &T,
    ctx: &RunContext<'_>,
    producers: Arc<Mutex<Vec<Producer>>>,
) -> Result<(
    ProduceOutcome,
    Option<inject::Injection>,
    Option<IngestSent>,
    ConsumeOutcome,
)> {
    let spec = ctx.spec;
    let consuming = async {
        if spec.produce_only {
            return Ok(ConsumeOutcome::default());
        }
        target.consume(ctx).await
    };
    let producing = async {
        ctx.progress.phase("producing");
        let (env, stream, licenses) = (target.env(), target.stream(), target.licenses());
        let injection = match target.injection_license() {
            Some(license) if spec.bad_inputs && !spec.produce_only => {
                let dimension = &spec.produce.workload.dimensions[0];
                let kinesis = env.kinesis().await?;
                Some(inject::inject(&kinesis, stream, license, dimension).await?)
            }
            _ => None,
        };
        let counters = ctx.counters.clone();
        let producing = produce(env, stream, licenses, &spec.produce, counters, producers);
        let ingesting = async {
            if spec.produce_only {
                return Ok(None);
            }
            target.ingest(ctx).await
        };
        let (out, ingested) = tokio::join!(producing, ingesting);
        ctx.production_done.store(true, Ordering::SeqCst);
        if out.is_ok() && !spec.produce_only {
            ctx.progress.phase("consuming");
        }
        anyhow::Ok((out?, injection, ingested?))
    };
    let (produced, consumed) = tokio::join!(producing, consuming);
    let (produced, injection, ingested) = produced?;
    Ok((produced, injection, ingested, consumed?))
}

/// Ingestion only: every accepted event was acknowledged by Kinesis or handed back.
fn ingestion_verdict(produced: &ProduceOutcome, inputs: &Inputs, stream: &str) -> Verdict {
    let returned: u64 = produced.returned_by_reason.values().sum();
    let mut verdict = Verdict {
        produced: inputs.produced.values().sum(),
        ..Default::default()
    };
    if produced.acked + returned != produced.events {
        verdict.violations.push(Violation {
            stage: "produce",
            key: stream.to_owned(),
            expected: produced.events,
            found: produced.acked + returned,
            detail: "events neither acknowledged by Kinesis nor handed back".into(),
        });
    }
    verdict.conserved = verdict.violations.is_empty();
    verdict
}

/// Settle the target, read what every tier ended with, and check conservation.
async fn settle_and_check<T: RunTarget>(
    target: &T,
    ctx: &RunContext<'_>,
    consumed: ConsumeOutcome,
    inputs: &mut Inputs,
    report: &mut RunReport,
    settings: &mut BTreeMap<String, String>,
) -> Result<()> {
    report.faults.extend(consumed.faults);
    for (k, n) in consumed.overlap {
        settings.insert(k, n.to_string());
    }
    for (reason, n) in consumed.rejects {
        *report.rejects.entry(reason).or_default() += n;
    }
    let ours: BTreeSet<String> = target.licenses().iter().map(|(l, _)| l.clone()).collect();
    // Only this run's groups and hours: a deployment's licenses outlive one run.
    let scope = Scope::new(target.stream(), &ours, inputs, ctx.started_at);
    let pending = target.settle(ctx, &scope, inputs, report, settings).await?;
    inputs.still_pending = pending;

    ctx.progress.phase("checking");
    let accepted = collect_tables(target.env(), &scope, inputs).await?;
    for (gh, q) in target.billed(&scope, accepted).await? {
        *inputs.billed.entry(gh).or_default() += q;
    }
    let billed_at = target.billed_instants(&scope).await?;
    timings::record_latencies(&ctx.timings, &billed_at, report);
    report.conservation = conservation::check(inputs);
    crate::ledger_check::check_run(
        target.env(),
        &ours,
        ctx.started_at,
        &mut report.conservation,
    )
    .await?;
    let consumed = RunCounters::get(&ctx.counters.consumed);
    report.write_amplification = if consumed > 0 {
        RunCounters::get(&ctx.counters.update_items) as f64 * 1000.0 / consumed as f64
    } else {
        0.0
    };
    report.cost = Some(run_cost(
        target,
        ctx,
        report.conservation.group_hours as u64,
    ));
    Ok(())
}

/// The run's AWS cost per million events, from its counts (`loadtest/src/cost/`).
fn run_cost<T: RunTarget>(target: &T, ctx: &RunContext<'_>, group_hours: u64) -> CostComparison {
    let row_bytes = target
        .licenses()
        .first()
        .zip(ctx.spec.produce.workload.dimensions.first())
        .map_or(0, |((license, account), dimension)| {
            let group = GroupKey::new(
                license,
                account,
                dimension,
                HourBucket::containing(ctx.started_at),
            );
            units::item_bytes(&conforming_row(&group, 0, 1, None))
        });
    CostComparison::of(ctx.counters.cost_counts(
        ctx.started.elapsed().as_secs_f64(),
        RUN_STREAM_SHARDS as u32,
        row_bytes,
        group_hours,
    ))
}

fn key(g: &Group) -> conservation::Group {
    (
        g.license_arn.clone(),
        g.account.clone(),
        g.dimension.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_identities_are_valid_and_distinct() {
        let (l0, a0) = run_license(0xdead_beef, 0);
        let (l1, a1) = run_license(0xdead_beef, 1);
        assert!(awsmp_contract::ids::is_valid_license_arn(&l0), "{l0}");
        assert!(awsmp_contract::ids::is_valid_account_id(&a0), "{a0}");
        assert_ne!(l0, l1);
        assert_ne!(a0, a1);
        assert_ne!(run_license(1, 0).0, run_license(2, 0).0);
    }
}
