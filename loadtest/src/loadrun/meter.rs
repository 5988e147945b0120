//! Metering on the local stack: the pipeline on a controlled clock (hours close without
//! waiting an hour), ticked by the local runner until every group-hour of the run is terminal,
//! with the Marketplace, duplicate-delivery and clock-jump faults of the run.

use super::RunContext;
use super::collect::{Scope, pending_hours};
use super::counters::RunCounters;
use super::sim_admin::SimAdmin;
use crate::conservation::GroupHour;
use crate::faults::FaultClass;
use crate::local::LocalEnv;
use crate::report::RunReport;
use crate::runner::Runner;
use anyhow::{Context, Result};
use awsmp_pipeline::domain::keys::HourBucket;
use chrono::{Duration as ChronoDuration, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

/// Pipeline ticks with Marketplace faults on; later ticks run clean so a run settles.
const FAULTY_TICKS: usize = 4;
/// Most pipeline ticks before a run is declared unsettled.
const MAX_TICKS: usize = 40;

/// Tick the pipeline until the run's group-hours are terminal; returns those still pending.
pub(super) async fn meter(
    ctx: &RunContext<'_>,
    env: &LocalEnv,
    sim: &SimAdmin,
    licenses: &[(String, String)],
    scope: &Scope<'_>,
    report: &mut RunReport,
    settings: &mut BTreeMap<String, String>,
) -> Result<BTreeSet<GroupHour>> {
    ctx.progress.phase("metering");
    let mut runner = Runner::new(env.clone(), &BTreeMap::new()).await?;
    if ctx.spec.produce.faults.has(FaultClass::DuplicateDeliveries) {
        duplicate_deliveries(&mut runner);
    }
    set_marketplace_faults(ctx, sim).await?;
    let (ticks, pending) = tick_until_settled(ctx, env, &runner, sim, licenses, scope).await?;
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
    for line in runner.metrics.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v.get("UsageRecordRejected").is_some() {
            *report
                .rejects
                .entry(format!("pipeline:{}", v["Reason"].as_str().unwrap_or("?")))
                .or_default() += 1;
        }
    }
    Ok(pending)
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
async fn tick_until_settled(
    ctx: &RunContext<'_>,
    env: &LocalEnv,
    runner: &Runner,
    sim: &SimAdmin,
    licenses: &[(String, String)],
    scope: &Scope<'_>,
) -> Result<(usize, BTreeSet<GroupHour>)> {
    let last_hour = HourBucket::containing(Utc::now());
    let lock = runner.svc.config.time.metering_lock_hours();
    let mut at = last_hour.plus_hours(i64::from(lock) + 1).start() + ChronoDuration::minutes(5);
    let mut ticks = 0;
    loop {
        let tick = runner
            .tick(at)
            .await
            .with_context(|| format!("tick at {at}"))?;
        ticks += 1;
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
