//! One schedule: a [`Setup`] drawn from the seed, an active phase in which a seeded scheduler
//! picks the next step (a stage's unit of work, the clock, a heartbeat, a reshard) and the
//! fault plan fires, then a fault-free drain until nothing is in flight, then the invariants.
//!
//! Everything runs in one current-thread Tokio runtime whose time is paused (sleeps of retry
//! back-offs and of the producer's linger complete at once, in order); the billing clock is
//! the virtual [`FixedClock`](awsmp_contract::clock::FixedClock) the scheduler moves.

use crate::esm::MappingConfig;
use crate::faults::{Rates, mix};
use crate::invariants;
use crate::world::{Setup, World, lock};
use awsmp_contract::clock::Clock;
use awsmp_contract::time::MAX_HOUR_OFFSET;
use awsmp_pipeline::handlers::discoverer::DiscovererInput;
use chrono::{DateTime, Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Rounds of the drain before a schedule that still has work in flight is a violation.
const MAX_DRAIN_ROUNDS: usize = 200;

/// Virtual start instants: just before a month ends, just before a year ends, mid-month.
const STARTS: [&str; 3] = [
    "2026-11-30T21:40:00Z",
    "2026-12-31T21:40:00Z",
    "2026-06-15T09:40:00Z",
];

/// What a schedule explored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explored {
    /// Faults injected, by class.
    pub faults: BTreeMap<String, u64>,
    /// Interleavings run, by the port call they preempted.
    pub interleavings: BTreeMap<String, u64>,
    /// Event source mapping events (batches, function errors, bisections, resumes).
    pub mapping: BTreeMap<String, u64>,
    /// Hour boundaries the clock crossed.
    pub hours_crossed: u64,
    /// SQS redeliveries.
    pub redeliveries: u64,
    /// Steps run (trace lines).
    pub steps: u64,
    /// Limits reached (`limit-*`: a 25-record call, a full cleanup message, the submitter's
    /// per-run cap, a dedup lane's compaction, the metering lock's edge with work pending), how
    /// often; in a sweep, how many schedules reached each (`simulation/src/scale.rs`,
    /// `simulation/src/lock_edge.rs`).
    pub limits: BTreeMap<String, u64>,
    /// Units billed.
    pub billed: u64,
}

/// One schedule's result.
#[derive(Debug, Clone)]
pub struct ScheduleReport {
    /// Its seed.
    pub seed: u64,
    /// What it simulated.
    pub setup: Setup,
    /// Every invariant it broke (empty: it passed).
    pub violations: Vec<String>,
    /// The trace (empty unless asked for).
    pub trace: Vec<String>,
    /// What it explored.
    pub explored: Explored,
}

/// The setup of `seed`.
pub fn setup_for(seed: u64) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed));
    let start: DateTime<Utc> = STARTS[r.random_range(0..STARTS.len())]
        .parse()
        .expect("valid start");
    let short_window = r.random_bool(0.25);
    let setup = Setup {
        seed,
        start: start + Duration::minutes(r.random_range(0..15)),
        shards: r.random_range(1..=3),
        mapping: MappingConfig::unbounded(
            [1, 3, 10, 100][r.random_range(0..4)],
            Duration::seconds(r.random_range(0..=5)),
            // ParallelizationFactor 1: with more lanes per shard the per-shard ingest watermark
            // is unsound (docs/guarantees.md, "Known limitations";
            // `simulation/tests/integration/known_limitations.rs` shows the loss).
            1,
            r.random_bool(0.5),
        ),
        rates: Rates {
            throttle: r.random_range(0..=80),
            // Refusals with a 5xx are drawn as throttles (`Failed::code`, variants).
            fail_before_apply: 0,
            lose_response: r.random_range(0..=30),
            crash: r.random_range(0..=15),
            preempt: r.random_range(0..=60),
        },
        licenses: r.random_range(1..=3),
        dimensions: crate::names::DIMENSIONS.len(),
        window_hours: if short_window { 3 } else { 24 },
        steps: r.random_range(40..=120),
        fresh_deployment: false,
        outage_from: (short_window && r.random_bool(0.5))
            .then(|| start + Duration::minutes(r.random_range(60..=150))),
        poison_from: None,
        poison_own_lane: true,
        ingest: false,
        clock_moves: 0,
        race: false,
        race_grace: false,
        scale: false,
        submitter_cap: None,
        lane_owned_ranges: None,
        lock_edge: false,
        crash_point: false,
    };
    let setup = discard_class(seed, poison_class(seed, setup));
    let setup = race_class(seed, ingest_class(seed, setup));
    let setup = crate::lock_edge::lock_edge_class(seed, crate::scale::scale_class(seed, setup));
    crate::crash_point::crash_point_class(seed, setup)
}

/// Schedules, per thousand, whose mapping gives up on any failing batch (outside the poison
/// class).
const DISCARD_PER_MILLE: u32 = 100;

/// The discard class, drawn from an RNG of its own so every other schedule stays as it was:
/// `MaximumRetryAttempts` 0 or 1 (bisection as the schedule drew it), so a batch the
/// schedule's ordinary faults fail — often after some of its rows were written — is discarded
/// to the on-failure destination while later records of its lanes move on, and re-driven by
/// the operator in the drain (docs/guarantees.md, "Consumer: a re-drive from the on-failure
/// queue is billed once").
fn discard_class(seed: u64, mut setup: Setup) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed ^ 0xd15_ca4d));
    if r.random_range(0..1000) >= DISCARD_PER_MILLE || setup.poison_from.is_some() {
        return setup;
    }
    setup.mapping.max_retry_attempts = Some(r.random_range(0..=1));
    setup
}

/// Schedules of the window-close race class, per thousand.
const RACE_PER_MILLE: u32 = 100;
/// Most calls per thousand that see the clock move first, outside the race class.
const MAX_CLOCK_MOVES: u32 = 30;
/// Calls per thousand that see the clock move first in the race class.
const RACE_CLOCK_MOVES: u32 = 60;

/// Time inside invocations and the window-close race class (`simulation/src/race.rs`),
/// drawn from an RNG of their own so every other choice of the schedule stays as it was.
fn race_class(seed: u64, mut setup: Setup) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed ^ 0x7ace));
    setup.clock_moves = r.random_range(0..=MAX_CLOCK_MOVES);
    let drawn = r.random_range(0..1000) < RACE_PER_MILLE;
    if !(drawn || FORCE_RACE.load(Ordering::Relaxed)) {
        return setup;
    }
    setup.race = true;
    setup.window_hours = 3;
    setup.clock_moves = RACE_CLOCK_MOVES;
    if r.random_bool(0.5) {
        // The month's grace: minutes before it ends at 06:00 UTC on the 1st, a 24 h window.
        let start: DateTime<Utc> = GRACE_START.parse().expect("valid start");
        let start = start + Duration::minutes(r.random_range(0..15));
        let shift = start - setup.start;
        setup.start = start;
        setup.window_hours = 24;
        setup.race_grace = true;
        setup.outage_from = None;
        setup.poison_from = setup.poison_from.map(|t| t + shift);
    }
    setup
}

/// Where a race schedule at the month's grace starts.
const GRACE_START: &str = "2026-12-01T05:40:00Z";

/// Every schedule in the race class (`scripts/simulate --race`), not one in ten.
static FORCE_RACE: AtomicBool = AtomicBool::new(false);

/// Put every schedule of this process into the race class (`on`), or only the drawn ones.
pub fn force_race(on: bool) {
    FORCE_RACE.store(on, Ordering::Relaxed);
}

/// Schedules in which untrusted modules meter through meter-ingest, per thousand.
const INGEST_PER_MILLE: u32 = 300;

/// The meter-ingest class (`simulation/src/ingest.rs`), drawn from its own RNG so every other
/// schedule stays as it was.
fn ingest_class(seed: u64, mut setup: Setup) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed ^ 0x1_6e57));
    setup.ingest = r.random_range(0..1000) < INGEST_PER_MILLE;
    setup
}

/// Schedules of the poison-batch class, per thousand.
const POISON_PER_MILLE: u32 = 150;

/// The poison-batch class (`simulation/src/poison.rs`), drawn from its own RNG so every other
/// schedule stays as it was: a batch that fails every retry, under the template's unbounded
/// `MaximumRetryAttempts` (the shard waits) or a finite one a seller may set (the poison goes
/// to the on-failure destination and is re-driven). In half the class the poison events share
/// the producer's partition key, so the mapping moves their lane on past them and later
/// records write the same rows before the re-drive; in the other half they keep a lane of
/// their own.
fn poison_class(seed: u64, mut setup: Setup) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed ^ 0x0de5_7a7e));
    if r.random_range(0..1000) >= POISON_PER_MILLE {
        return setup;
    }
    setup.poison_from = Some(setup.start + Duration::minutes(r.random_range(5..=60)));
    // At least 3 retries: random faults then practically never use them up, so a discarded
    // batch is the poison isolated by bisection (the template's `BisectBatchOnFunctionError`).
    setup.mapping.max_retry_attempts = [None, Some(3), Some(5)][r.random_range(0..3)];
    setup.mapping.bisect = true;
    setup.poison_own_lane = r.random_bool(0.5);
    setup
}

/// Run the schedule of `seed`; keep its trace when `trace`.
pub fn run(seed: u64, trace: bool) -> ScheduleReport {
    run_setup(setup_for(seed), trace)
}

/// Run the schedule of `setup` (a seed's, possibly with some choices overridden).
pub fn run_setup(setup: Setup, trace: bool) -> ScheduleReport {
    let seed = setup.seed;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    let local = tokio::task::LocalSet::new();
    // The handlers' retry delays, seeded: their retries wake in the same order on a replay.
    awsmp_aws::retry::seed_delays(Some(mix(seed ^ 0xde1a_7500)));
    let report = local.block_on(&runtime, async move {
        let world = World::new(setup.clone());
        lock(&world.trace).keep = trace;
        if !setup.fresh_deployment {
            for (shard, _) in world.stream.open_shards() {
                let at = setup.start - Duration::minutes(1);
                let _ = awsmp_aws::watermark::WatermarkStore::advance(
                    world.watermarks.as_ref(),
                    crate::esm::STREAM_NAME,
                    &shard,
                    at,
                )
                .await;
            }
        }
        world.log(format!("seed {seed}: {setup:?}"));
        active(&world).await;
        let drained = drain(&world).await;
        let mut violations = invariants::check(&world);
        if !drained {
            violations.push(format!(
                "work still in flight after {MAX_DRAIN_ROUNDS} fault-free drain rounds"
            ));
        }
        let explored = explored(&world);
        world.log(format!("verdict: {} violations", violations.len()));
        let trace = lock(&world.trace).lines().to_vec();
        world.producer.shutdown().await.ok();
        ScheduleReport {
            seed,
            setup,
            violations,
            trace,
            explored,
        }
    });
    awsmp_aws::retry::seed_delays(None);
    report
}

/// The active phase: the scheduler's choices, weighted.
async fn active(w: &World) {
    let producing_until = w.setup.start + Duration::hours(2);
    w.race_backlog();
    for step in 0..w.setup.steps {
        w.race_step(step).await;
        w.lifecycle_step().await;
        w.poison_step();
        w.ingest_step().await;
        let producing = w.clock.now() < producing_until;
        w.scale_step(producing).await;
        if w.lock_edge_step(producing).await {
            continue;
        }
        let choice = lock(&w.rng).random_range(0..100);
        match choice {
            0..=17 if w.clock.now() < producing_until => {
                let n = lock(&w.rng).random_range(1..=8);
                w.produce(n).await;
            }
            0..=37 => {
                let secs = if lock(&w.rng).random_bool(0.1) {
                    lock(&w.rng).random_range(300..=2400)
                } else {
                    lock(&w.rng).random_range(1..=90)
                };
                w.advance(Duration::seconds(secs));
            }
            38..=57 => {
                w.deliver().await;
            }
            58..=62 => w.heartbeat(),
            63..=70 => {
                let hour_offset = lock(&w.rng).random_range(1..=3);
                w.discover(DiscovererInput::Meter { hour_offset }).await;
            }
            71..=80 => {
                w.aggregate().await;
            }
            81..=88 => {
                w.clean().await;
            }
            89..=93 => w.submit().await,
            94..=95 => w.expire().await,
            96 => {
                let shard = lock(&w.rng).random_range(0..7);
                w.discover(DiscovererInput::Ageout { shard }).await;
            }
            97 => w.reshard(),
            _ => w.mark_drained().await,
        }
    }
}

/// The fault-free drain: every stage in turn until nothing is in flight. True when it got
/// there.
async fn drain(w: &World) -> bool {
    w.faults.set_enabled(false);
    w.log("drain: faults off");
    let last_produced = w.clock.now();
    for round in 0..MAX_DRAIN_ROUNDS {
        if !lock(&w.truth).handed_back.is_empty() {
            w.produce(0).await;
        }
        w.ingest_drain().await;
        w.heartbeat();
        // Past every batching window (at most 5 s here), so the markers are delivered now.
        w.advance(Duration::seconds(10));
        while w.deliver().await {}
        if w.redrive_failures().await > 0 {
            while w.deliver().await {}
        }
        w.lifecycle_drain().await;
        w.mark_drained().await;
        // Offsets 1–3 every round; once an hour every meter target of the deployment
        // (1–23: docs/time-rules.md, "Discoverer offsets"), so an hour the fence held past its
        // third offset (a consumer lagging under faults) is still aggregated.
        let last = if round % 6 == 0 { MAX_HOUR_OFFSET } else { 3 };
        for hour_offset in 1..=last {
            w.discover(DiscovererInput::Meter { hour_offset }).await;
        }
        // Age-out runs hourly (one round in six), each run over its whole lookback; only a
        // short window or the month's grace lets rows age out within a schedule (the in-memory
        // index scan is the sweep's most expensive call, so the others skip it).
        let ageout = (w.setup.window_hours < 24 || w.setup.race_grace) && round % 6 == 0;
        for shard in (0..7).filter(|_| ageout) {
            w.discover(DiscovererInput::Ageout { shard }).await;
        }
        while w.aggregate().await {}
        while w.clean().await {}
        w.submit().await;
        w.expire().await;
        if w.clock.now() > last_produced + Duration::hours(3) && invariants::quiescent(w) {
            return true;
        }
        w.advance(Duration::minutes(10));
    }
    false
}

fn explored(w: &World) -> Explored {
    let mut faults: BTreeMap<String, u64> = w
        .faults
        .tally()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let mut interleavings = lock(&w.interleavings).clone();
    let hours_crossed = interleavings.remove("hours-crossed").unwrap_or(0);
    faults.retain(|_, v| *v > 0);
    let (limits, faults): (BTreeMap<_, _>, BTreeMap<_, _>) = faults
        .into_iter()
        .partition(|(k, _)| k.starts_with("limit-"));
    Explored {
        limits,
        faults,
        interleavings,
        mapping: lock(&w.esm)
            .stats
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
        hours_crossed,
        redeliveries: w.work.redeliveries() + w.cleanup.redeliveries(),
        steps: lock(&w.trace).steps(),
        billed: w.ledger.ledger().iter().map(|b| b.quantity).sum(),
    }
}
