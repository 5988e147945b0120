//! Metering on the local stack: the pipeline on a controlled clock (hours close without
//! waiting an hour), ticked by the local runner until every group-hour of the run is terminal,
//! with the Marketplace, duplicate-delivery and clock-jump faults of the run.

use super::RunContext;
use super::collect::{Scope, pending_hours};
use super::counters::RunCounters;
use super::fence::RunWatermarks;
use super::sim_admin::SimAdmin;
use crate::conservation::GroupHour;
use crate::faults::FaultClass;
use crate::report::RunReport;
use anyhow::{Context, Result};
use awsmp_contract::keys::HourBucket;
use awsmp_local_stack::local::LocalEnv;
use awsmp_local_stack::local::hosted::Hosted;
use awsmp_local_stack::runner::Runner;
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Pipeline ticks with Marketplace faults on; later ticks run clean so a run settles.
const FAULTY_TICKS: usize = 4;
/// Real time between the pipeline's ticks while the consumer is consuming: the schedules'
/// 5- and 15-minute rates (`infra/main.yaml`) compressed 60–180×. Ticking every second kept
/// the local DynamoDB busy with the discoverer's queries and tripled the consumer's event →
/// row latency (docs/local-stack.md, "The report").
const LIVE_TICK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// Most pipeline ticks before a run is declared unsettled.
const MAX_TICKS: usize = 40;

/// Tick the pipeline until the run's group-hours are terminal; returns those still pending.
pub(super) async fn meter(
    ctx: &RunContext<'_>,
    stack: &Stack<'_>,
    scope: &Scope<'_>,
    report: &mut RunReport,
    settings: &mut BTreeMap<String, String>,
) -> Result<BTreeSet<GroupHour>> {
    ctx.progress.phase("metering");
    let sim = stack.sim;
    let runner = runner(ctx, stack).await?;
    set_marketplace_faults(ctx, sim).await?;
    let (ticks, pending) = tick_until_settled(ctx, stack, &runner, scope).await?;
    settings.insert("pipelineTicks".into(), ticks.to_string());
    let counters = sim.ledger().await?["counters"].clone();
    for (k, name) in [
        ("throttled", "marketplace:throttled"),
        ("internalErrors", "marketplace:internalErrors"),
        ("unprocessed", "marketplace:unprocessed"),
        ("applyThenFail", "marketplace:applyThenFail"),
    ] {
        if let Some(n) = counters[k].as_u64().filter(|n| *n > 0) {
            report.faults.insert(name.into(), n);
        }
    }
    for (reason, n) in pipeline_rejects(&runner) {
        *report.rejects.entry(reason).or_default() += n;
    }
    Ok(pending)
}

/// The pipeline's rejected usage records by `pipeline:<reason>` (its `UsageRecordRejected`
/// metric lines).
pub(super) fn pipeline_rejects(runner: &Runner) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in runner.metric_lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v.get("UsageRecordRejected").is_some() {
            *out.entry(format!("pipeline:{}", v["Reason"].as_str().unwrap_or("?")))
                .or_default() += 1;
        }
    }
    out
}

/// What of the local stack metering uses: its endpoints, the simulator, the run's licenses
/// and the run's ingest watermarks (the fence; `None` when the stack has no watermark table).
pub(super) struct Stack<'a> {
    pub(super) env: &'a LocalEnv,
    pub(super) sim: &'a SimAdmin,
    pub(super) licenses: &'a [(String, String)],
    pub(super) fence: Option<&'a Arc<RunWatermarks>>,
    /// The Lambdas as processes; `None`: their handlers in process.
    pub(super) hosted: Option<&'a Arc<Hosted>>,
}

/// A runner over the stack, fenced on the run's watermarks, with the run's duplicate
/// deliveries.
async fn runner(ctx: &RunContext<'_>, stack: &Stack<'_>) -> Result<Runner> {
    let mut runner = Runner::new(stack.env.clone(), &BTreeMap::new()).await?;
    if let Some(fence) = stack.fence {
        runner = runner.with_ingest_fence(fence.table(), fence.stream());
    }
    if let Some(hosted) = stack.hosted {
        runner = runner.with_hosted(hosted.clone());
    }
    if ctx.spec.produce.faults.has(FaultClass::DuplicateDeliveries) {
        // Under the host the binaries send their own messages: the runner's mapping delivers
        // every batch twice instead.
        match stack.hosted {
            Some(_) => runner.redeliver = true,
            None => duplicate_deliveries(&mut runner),
        }
    }
    Ok(runner)
}

/// While the consumer consumes: tick the pipeline's schedules every [`LIVE_TICK_EVERY`] at the
/// wall clock plus the run's consumer lag (never backwards), as AWS runs them beside the
/// consumer; with `deprovision`, the run's first license enters its flush window first.
/// Returns the pipeline's rejects meanwhile, by `pipeline:<reason>`, and what it did
/// ([`ConsumeOutcome::overlap`](super::target::ConsumeOutcome)).
pub(super) async fn tick_while_consuming(
    ctx: &RunContext<'_>,
    stack: &Stack<'_>,
) -> Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
    let mut overlap = BTreeMap::new();
    let runner = runner(ctx, stack).await?;
    set_marketplace_faults(ctx, stack.sim).await?;
    let lag = ctx.spec.overlap.consumer_lag;
    if ctx.spec.overlap.deprovision
        && let Some(license) = stack.licenses.first()
    {
        let expiry = Utc::now() + lag + ChronoDuration::hours(2);
        deprovision(stack.env, license, expiry).await?;
    }
    let mut last: Option<DateTime<Utc>> = None;
    while !ctx.consumption_done.load(Ordering::SeqCst) {
        let now = Utc::now() + lag;
        let at = last.map_or(now, |l| now.max(l + ChronoDuration::milliseconds(1)));
        let tick = runner
            .tick(at)
            .await
            .with_context(|| format!("tick at {at} while consuming"))?;
        ctx.counters.add_tick(&tick);
        if let Some(e) = &tick.submitter_error {
            tracing::info!(error = %e, "submitter run failed; the next tick retries");
        }
        for (k, n) in [
            ("liveTicks", 1),
            ("liveGroupsEnqueued", tick.discoverer.groups_enqueued as u64),
            ("liveBucketsFenced", tick.discoverer.buckets_fenced as u64),
            (
                "liveSubmitterCalls",
                tick.submitter.as_ref().map_or(0, |s| s.calls as u64),
            ),
        ] {
            *overlap.entry(k.to_owned()).or_default() += n;
        }
        last = Some(at);
        *ctx.last_tick.lock().unwrap_or_else(|e| e.into_inner()) = last;
        let next = Instant::now() + LIVE_TICK_EVERY;
        while Instant::now() < next && !ctx.consumption_done.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    Ok((pipeline_rejects(&runner), overlap))
}

/// Put `license` into its deprovisioning flush window (the subscribers table's sparse
/// `deprovisioning-pending-index`, `infra/resources.json`), AWS accepting usage until `expiry`.
async fn deprovision(
    env: &LocalEnv,
    license: &(String, String),
    expiry: DateTime<Utc>,
) -> Result<()> {
    use aws_sdk_dynamodb::types::AttributeValue as Av;
    use awsmp_contract::subscribers::DEPROVISIONING_PENDING_VALUE;
    let table = env.get("AWSMP_SUBSCRIBERS_TABLE")?;
    env.dynamodb()
        .await?
        .put_item()
        .table_name(table)
        .item("licenseArn", Av::S(license.0.clone()))
        .item("customerAWSAccountId", Av::S(license.1.clone()))
        .item(
            "deprovisioningPendingFlag",
            Av::S(DEPROVISIONING_PENDING_VALUE.into()),
        )
        .item(
            "deprovisioningExpiry",
            Av::S(expiry.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        )
        .send()
        .await
        .with_context(|| format!("deprovisioning {} in {table}", license.0))?;
    Ok(())
}

async fn set_marketplace_faults(ctx: &RunContext<'_>, sim: &SimAdmin) -> Result<()> {
    let faults = &ctx.spec.produce.faults;
    let marketplace_faults = faults.has(FaultClass::MarketplaceFaults);
    let submitter_crashes = faults.has(FaultClass::SubmitterCrashes);
    if !(marketplace_faults || submitter_crashes) {
        return Ok(());
    }
    sim.post(
        "/_sim/faults",
        serde_json::json!({
            "throttleRate": if marketplace_faults { 0.2 } else { 0.0 },
            "internalErrorRate": if marketplace_faults { 0.05 } else { 0.0 },
            "unprocessedRate": if marketplace_faults { 0.1 } else { 0.0 },
            "applyThenFailRate": if submitter_crashes { 0.3 } else { 0.0 },
            "latencyMs": 0,
            "seed": ctx.spec.produce.workload.seed,
        }),
    )
    .await
}

/// Tick from just after the lock of the current hour has passed, until nothing of the run is
/// pending, `MAX_TICKS` or the deadline. Returns the ticks run and what is still pending.
/// The stream is finished by then, so each tick first advances the run's watermarks to its
/// instant ([`RunWatermarks::finished_through`]).
async fn tick_until_settled(
    ctx: &RunContext<'_>,
    stack: &Stack<'_>,
    runner: &Runner,
    scope: &Scope<'_>,
) -> Result<(usize, BTreeSet<GroupHour>)> {
    let (env, sim, licenses) = (stack.env, stack.sim, stack.licenses);
    let last_hour = HourBucket::containing(Utc::now());
    let lock = runner.svc.config.time.metering_lock_hours();
    let mut at = last_hour.plus_hours(i64::from(lock) + 1).start() + ChronoDuration::minutes(5);
    // Never before the ticks that ran while consuming.
    if let Some(last) = *ctx.last_tick.lock().unwrap_or_else(|e| e.into_inner()) {
        at = at.max(last + ChronoDuration::minutes(5));
    }
    let mut ticks = 0;
    loop {
        if let Some(fence) = stack.fence {
            fence.finished_through(at).await?;
        }
        let tick = runner
            .tick(at)
            .await
            .with_context(|| format!("tick at {at}"))?;
        ticks += 1;
        ctx.counters.add_tick(&tick);
        if let Some(e) = &tick.submitter_error {
            tracing::info!(error = %e, "submitter run failed; the next tick retries");
        }
        let ledger = sim.ledger().await?;
        RunCounters::set(
            &ctx.counters.billed,
            ledger["records"].as_array().map_or(0, |r| r.len() as u64),
        );
        if ticks == FAULTY_TICKS {
            sim.post("/_sim/faults", serde_json::json!({})).await?;
        }
        let pending = pending_hours(env, licenses, scope).await?;
        if pending.is_empty() || ticks >= MAX_TICKS || Instant::now() > ctx.deadline {
            return Ok((ticks, pending));
        }
        at += next_step(ctx, ticks);
    }
}

/// Five minutes of virtual time per tick; with clock jumps, irregular jumps of 1–40 minutes,
/// never backwards.
fn next_step(ctx: &RunContext<'_>, ticks: usize) -> ChronoDuration {
    if ctx.spec.produce.faults.has(FaultClass::ClockJumps) {
        let seed = ctx.spec.produce.workload.seed;
        ChronoDuration::minutes(1 + (seed.wrapping_add(ticks as u64 * 7919) % 40) as i64)
    } else {
        ChronoDuration::minutes(5)
    }
}

/// Wrap the runner's work and cleanup queues so every message is sent twice.
fn duplicate_deliveries(runner: &mut Runner) {
    let svc = &mut runner.svc;
    for q in [
        &mut svc.work_queue,
        &mut svc.deprovision_queue,
        &mut svc.cleanup_queue,
    ] {
        if let Some(inner) = q.take() {
            *q = Some(Arc::new(DuplicatingQueue(inner)));
        }
    }
}

/// Sends every message twice: SQS is at-least-once, and the pipeline must not care.
struct DuplicatingQueue(Arc<dyn awsmp_pipeline::ports::MessageQueue>);

#[async_trait::async_trait]
impl awsmp_pipeline::ports::MessageQueue for DuplicatingQueue {
    async fn send_all(&self, bodies: &[String]) -> awsmp_pipeline::Result<()> {
        self.0.send_all(bodies).await?;
        self.0.send_all(bodies).await
    }
}
