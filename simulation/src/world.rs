//! The simulated deployment: one stream, its event source mapping, the real producer, the
//! real consumer handler and the real pipeline handlers, every port behind a fault wrapper
//! (`testkit/src/ports.rs`), on one virtual clock.

use crate::esm::{EventSourceMapping, MappingConfig};
use crate::faults::{EmptyTables, FaultPlan, Rates};
use crate::lifecycle::Lifecycle;
use crate::ports::{
    AggregatedFinalized, ConsumerRows, Ctx, Faulty, FaultyAggregated, FaultyMetering, FaultyUsage,
    FaultyWatermarks,
};
use crate::queue::SimQueue;
use crate::stream::SimStream;
use crate::trace::Trace;
use awsmp_aws::emf::MetricsSink;
use awsmp_aws::watermark::MemoryWatermarkStore;
use awsmp_consumer::adapters::memory::{MemoryDedupStore, MemoryRejectedEventStore};
use awsmp_consumer::{Consumer, Settings};
use awsmp_contract::clock::FixedClock;
use awsmp_pipeline::adapters::memory::{
    MemoryAggregatedStore, MemoryMeteringApi, MemoryUsageStore,
};
use awsmp_pipeline::config::Config;
use awsmp_pipeline::handlers::Services;
use awsmp_producer::{Event, Producer, ShardMapSource};
use awsmp_testkit::interleave::Interleaver;
use chrono::{DateTime, Duration, Utc};
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Lock a mutex; a poisoned lock only means a panic elsewhere, which the panic reports.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hours a Marketplace outage lasts: past a short (3 h) billable window.
pub const OUTAGE_HOURS: i64 = 4;

/// What one schedule simulates, all drawn from its seed.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The seed.
    pub seed: u64,
    /// Virtual start instant (some schedules start just before a month or a year ends).
    pub start: DateTime<Utc>,
    /// Initial open shards.
    pub shards: usize,
    /// The consumer's event source mapping.
    pub mapping: MappingConfig,
    /// Per-call fault rates.
    pub rates: Rates,
    /// Licenses (each with one buyer account).
    pub licenses: usize,
    /// Dimensions each license meters (`simulation/src/names.rs`): two, five in the scale
    /// class.
    pub dimensions: usize,
    /// Billable window hours; a short window makes records reach expiry within the schedule.
    pub window_hours: u32,
    /// Active steps (then the fault-free drain).
    pub steps: usize,
    /// Start as a fresh deployment: no shard has a watermark yet. Otherwise (the default) the
    /// deployment has been running: every initial shard has applied the stream up to the
    /// start, as its heartbeats make it do within a minute.
    pub fresh_deployment: bool,
    /// A Marketplace outage (a short window only): from this instant, for four hours, every
    /// `BatchMeterUsage` call is applied and its answer lost, so attempts stay unresolved
    /// while windows close.
    pub outage_from: Option<DateTime<Utc>>,
    /// The poison-batch class (`simulation/src/poison.rs`): when its batch reaches the stream.
    pub poison_from: Option<DateTime<Utc>>,
    /// The poison events on a Kinesis partition key of their own (`simulation/src/poison.rs`).
    pub poison_own_lane: bool,
    /// Untrusted modules meter through meter-ingest (`simulation/src/ingest.rs`).
    pub ingest: bool,
    /// Per thousand port calls made while faults are on, how many see the virtual clock move
    /// first (`testkit/src/faults.rs`): time passing inside an invocation.
    pub clock_moves: u32,
    /// The window-close race class (`simulation/src/race.rs`): usage whose hour leaves the
    /// billable window minutes into the schedule, and expiry racing submitter runs.
    pub race: bool,
    /// In the race class, the month's grace instead of the window: the schedule starts
    /// minutes before 06:00 UTC on the 1st, with a 24 h window, and the backlog is stamped in
    /// the previous month's last hour, which the grace's end closes.
    pub race_grace: bool,
    /// The scale class (`simulation/src/scale.rs`): bursts of usage over many groups.
    pub scale: bool,
    /// The submitter's per-run cap of ordinary records, when set lower than the default.
    pub submitter_cap: Option<usize>,
    /// Ranges a dedup lane keeps with their owner, when set lower than the default.
    pub lane_owned_ranges: Option<usize>,
    /// The lock-edge class (`simulation/src/lock_edge.rs`): usage recorded seconds before an
    /// hour ends, the discoverer run on that hour seconds after, before the consumer read it.
    pub lock_edge: bool,
    /// The consumer crash-point class (`simulation/src/crash_point.rs`): consumer invocations
    /// crashing at a seeded call, the pipeline running before their batch's retry.
    pub crash_point: bool,
}

/// Ground truth: what the callers recorded and what the run injected as bad on purpose.
#[derive(Debug, Default)]
pub struct Truth {
    /// Quantity of distinct recorded events, per (license, account, dimension).
    pub produced: BTreeMap<(String, String, String), u64>,
    /// Events recorded, to re-record some (a caller's retry keeps the id).
    pub recorded: Vec<Event>,
    /// Events handed back by the producer, re-recorded at the next produce step.
    pub handed_back: Vec<Event>,
    /// Quantity of injected late arrivals, per group: events whose record is stamped with an
    /// arrival time further back than the fence's settle margin allows.
    pub late: BTreeMap<(String, String, String), u64>,
    /// Poison records put into the stream, by partition key.
    pub poison: Vec<String>,
    /// Events recorded so far (event id counter).
    pub events: u64,
    /// The poison batch's records, by shard and sequence number (`simulation/src/poison.rs`).
    pub poisoned: std::collections::BTreeSet<(String, u128)>,
    /// Hours of edge inputs: usage injected in an hour that leaves the billable window (or the
    /// month's grace) as the schedule starts (`simulation/src/race.rs`); its units may end
    /// expired (`simulation/src/causes.rs`).
    pub edge_hours: std::collections::BTreeSet<awsmp_contract::keys::HourBucket>,
    /// The pipeline caught up with the edge inputs before the first race.
    pub edge_prepared: bool,
    /// Failed invocations of the stages an hour's billing waits on, in the order they ended:
    /// the only causes of a window exit besides an edge input (`simulation/src/causes.rs`).
    pub stage_failures: Vec<crate::causes::StageFailure>,
    /// Groups a clean submitter run read pending before their window closed
    /// (`simulation/src/causes.rs`, `note_clean_submit`).
    pub read_by_clean_submit: std::collections::BTreeSet<awsmp_contract::keys::GroupKey>,
}

/// Run the interleaver's nested steps on `world` (at each preemption point of a port call):
/// a task on the schedule's `LocalSet`, holding the world weakly.
fn drive_interleavings(world: &Arc<World>) {
    let weak = Arc::downgrade(world);
    tokio::task::spawn_local(world.interleaver.drive(move |site| {
        let world = weak.upgrade();
        async move {
            if let Some(w) = world {
                w.nested(site).await;
            }
        }
    }));
}

/// The simulated deployment.
pub struct World {
    /// What it simulates.
    pub setup: Setup,
    /// The virtual clock every component reads.
    pub clock: Arc<FixedClock>,
    /// The fault plan.
    pub faults: Arc<FaultPlan>,
    /// The stream.
    pub stream: Arc<SimStream>,
    /// The consumer's event source mapping.
    pub esm: Mutex<EventSourceMapping>,
    /// The real producer engine, writing to the stream.
    pub producer: Producer,
    /// The real consumer handler.
    pub consumer: Consumer,
    /// The pipeline handlers' services.
    pub svc: Services,
    /// BatchMeterUsage (faulty).
    pub metering: FaultyMetering,
    /// Raw usage table.
    pub usage: Arc<MemoryUsageStore>,
    /// Aggregated-usage table.
    pub aggregated: Arc<MemoryAggregatedStore>,
    /// The Marketplace ledger.
    pub ledger: Arc<MemoryMeteringApi>,
    /// Ingest watermarks.
    pub watermarks: Arc<MemoryWatermarkStore>,
    /// Rejected events.
    pub rejected: MemoryRejectedEventStore,
    /// Work queue.
    pub work: Arc<SimQueue>,
    /// Cleanup queue.
    pub cleanup: Arc<SimQueue>,
    /// Ground truth.
    pub truth: Mutex<Truth>,
    /// The trace.
    pub trace: Mutex<Trace>,
    /// The scheduler's choices.
    pub rng: Mutex<StdRng>,
    /// The work message an aggregator is handling (a twin may take it too).
    pub current_work: Mutex<Option<String>>,
    /// Interleavings run, by the port call they preempted.
    pub interleavings: Mutex<BTreeMap<String, u64>>,
    /// The interleaver every port wrapper shares.
    pub interleaver: Arc<Interleaver>,
    /// Outcomes of the SQS invocation running now, for its trace line.
    pub outcomes: Mutex<Vec<String>>,
    /// The license lifecycle's stages (`simulation/src/lifecycle.rs`).
    pub lifecycle: Lifecycle,
    /// meter-ingest (`simulation/src/ingest.rs`).
    pub ingest: crate::ingest::Ingest,
}

/// The stream as the producer's shard-map source.
struct StreamShards(Arc<SimStream>);

impl ShardMapSource for StreamShards {
    async fn shard_map(
        &self,
    ) -> Result<awsmp_producer::partition::ShardMap, awsmp_producer::shards::ShardMapError> {
        Ok(self.0.shard_map())
    }
}

fn pipeline_config(setup: &Setup) -> Config {
    let window = setup.window_hours.to_string();
    let cap = setup.submitter_cap.map(|c| c.to_string());
    Config::from_lookup(|k| {
        if k == "AWSMP_SUBMITTER_MAX_RECORDS_PER_RUN" {
            return cap.clone();
        }
        let v = match k {
            "AWSMP_PRODUCT_CODE" => "prod-sim",
            "AWSMP_USAGE_TABLE" => "usage",
            "AWSMP_AGGREGATED_USAGE_TABLE" => "aggregated-usage",
            "AWSMP_WORK_QUEUE_URL" => "work",
            "AWSMP_DEPROVISION_WORK_QUEUE_URL" => "deprovision-work",
            "AWSMP_CLEANUP_QUEUE_URL" => "cleanup",
            "AWSMP_INGEST_WATERMARK_TABLE" => "ingest-watermarks",
            "AWSMP_USAGE_STREAM" => crate::esm::STREAM_NAME,
            "AWSMP_BILLABLE_WINDOW_HOURS" => window.as_str(),
            _ => return None,
        };
        Some(v.to_owned())
    })
    .expect("the simulation's pipeline configuration is valid")
}

/// Visibility timeout of the pipeline's queues.
const QUEUE_VISIBILITY: Duration = Duration::minutes(5);

/// The real producer engine over `stream` (its sink and its shard-map source).
fn start_producer(stream: &Arc<SimStream>, seed: u64) -> Producer {
    Producer::builder("awsmp-usage")
        .producer_id("sim-producer")
        .jitter_seed(seed)
        .linger(std::time::Duration::from_millis(100))
        .start_with(stream.clone(), StreamShards(stream.clone()))
        .expect("the producer starts inside the runtime")
}

/// The real consumer over the shared tables and the faulty stores.
fn consumer_over(
    ctx: &Ctx,
    (time, owned): (awsmp_contract::time::TimeConfig, Option<usize>),
    (usage, aggregated): (&Arc<MemoryUsageStore>, &Arc<MemoryAggregatedStore>),
    rejected: &MemoryRejectedEventStore,
    marks: Arc<FaultyWatermarks>,
    clock: Arc<FixedClock>,
) -> Consumer {
    // A store call's retries without a pause (as many as the handler's policy allows): a
    // retry sleeps an unseeded full-jitter delay on Tokio's clock, and the consumer runs its id
    // and lane claims, and its refusals and row writes, side by side, so with a pause the
    // branch whose delay drew shorter ran its next call first, and a crash stopping the
    // invocation left a different set of calls counted (seed 23 of the default sweep replayed
    // as either of two traces).
    let mut store_retry = awsmp_consumer::handler::STORE_RETRY;
    store_retry.base = std::time::Duration::ZERO;
    store_retry.cap = std::time::Duration::ZERO;
    Consumer {
        settings: Settings {
            verify: awsmp_consumer::domain::verify::VerifyPolicy {
                time,
                ..Default::default()
            },
            // One call at a time within each branch.
            concurrency: 1,
            store_retry,
            lane_owned_ranges: owned.unwrap_or(awsmp_consumer::domain::dedup::MAX_OWNED_RANGES),
            ..Settings::default()
        },
        dedup: Arc::new(Faulty::new(MemoryDedupStore::new(), ctx)),
        rejected: Arc::new(Faulty::new(rejected.clone(), ctx)),
        rows: Arc::new(Faulty::new(
            ConsumerRows {
                table: usage.clone(),
            },
            ctx,
        )),
        finalized: Arc::new(Faulty::new(
            AggregatedFinalized {
                table: aggregated.clone(),
            },
            ctx,
        )),
        watermarks: Some(marks),
        archive: None,
        metrics: MetricsSink::capture("kinesis-consumer"),
        clock,
        names: awsmp_consumer::domain::intern::NameCache::new(),
    }
}

/// The pipeline handlers' services over the faulty tables and the queues.
fn services_over(
    ctx: &Ctx,
    config: Config,
    (usage, aggregated): (&Arc<MemoryUsageStore>, &Arc<MemoryAggregatedStore>),
    (work, cleanup, deprovision): (&Arc<SimQueue>, &Arc<SimQueue>, Arc<SimQueue>),
    marks: Arc<FaultyWatermarks>,
    clock: Arc<FixedClock>,
) -> Services {
    Services {
        usage: Some(Arc::new(FaultyUsage::new(usage.clone(), ctx))),
        aggregated: Arc::new(FaultyAggregated::new(aggregated.clone(), ctx)),
        deprovisioning: None,
        work_queue: Some(work.clone()),
        deprovision_queue: Some(deprovision),
        cleanup_queue: Some(cleanup.clone()),
        watermarks: Some(marks),
        metrics: MetricsSink::capture("pipeline"),
        clock,
        config,
    }
}

impl World {
    /// Build the deployment for `setup`. Must run inside the schedule's (paused, single
    /// threaded) Tokio runtime: the producer's engine is a task on it.
    pub fn new(setup: Setup) -> Arc<World> {
        let clock = Arc::new(FixedClock::new(setup.start));
        let faults = Arc::new(
            FaultPlan::new(setup.seed, setup.rates).on_clock(clock.clone(), setup.clock_moves),
        );
        let interleaver = Arc::new(Interleaver::default());
        let ctx = Ctx {
            faults: faults.clone(),
            interleaver: interleaver.clone(),
        };
        let stream = Arc::new(SimStream::new(setup.shards, clock.clone(), faults.clone()));
        let producer = start_producer(&stream, setup.seed);
        let usage = Arc::new(MemoryUsageStore::new("usage").with_page_size(25));
        let aggregated =
            Arc::new(MemoryAggregatedStore::new("aggregated-usage").with_page_size(10));
        let ledger = Arc::new(MemoryMeteringApi::default());
        let watermarks = Arc::new(MemoryWatermarkStore::new());
        let rejected = MemoryRejectedEventStore::new();
        let config = pipeline_config(&setup);
        let queue = |name| {
            let (c, f, i) = (clock.clone(), faults.clone(), interleaver.clone());
            Arc::new(SimQueue::new(name, QUEUE_VISIBILITY, c, f, i))
        };
        let (work, cleanup, deprovision) = (queue("work"), queue("cleanup"), queue("deprovision"));
        let lifecycle = Lifecycle::for_setup(&ctx, &setup, queue("subscription"), &deprovision);
        let faulty_marks = Arc::new(FaultyWatermarks::new(watermarks.clone(), &ctx));
        let consumer = consumer_over(
            &ctx,
            (config.time, setup.lane_owned_ranges),
            (&usage, &aggregated),
            &rejected,
            faulty_marks.clone(),
            clock.clone(),
        );
        let mut svc = services_over(
            &ctx,
            config,
            (&usage, &aggregated),
            (&work, &cleanup, deprovision),
            faulty_marks,
            clock.clone(),
        );
        svc.deprovisioning = Some(lifecycle.index());
        let ingest = crate::ingest::Ingest::for_setup(&ctx, &setup, &stream, &clock);
        let world = Arc::new(World {
            esm: Mutex::new(EventSourceMapping::new(setup.mapping)),
            rng: Mutex::new(StdRng::seed_from_u64(setup.seed)),
            metering: FaultyMetering {
                inner: ledger.clone(),
                ctx,
                outage: setup
                    .outage_from
                    .map(|from| (from, from + Duration::hours(OUTAGE_HOURS))),
                outage_5xx: crate::faults::hash(setup.seed, &["outage-5xx"]) % 2 == 1,
                clock: clock.clone(),
            },
            setup,
            clock,
            faults,
            stream,
            producer,
            consumer,
            svc,
            usage,
            aggregated,
            ledger,
            watermarks,
            rejected,
            work,
            cleanup,
            truth: Mutex::new(Truth::default()),
            trace: Mutex::new(Trace::default()),
            current_work: Mutex::new(None),
            interleavings: Mutex::new(BTreeMap::new()),
            outcomes: Mutex::new(Vec::new()),
            interleaver,
            lifecycle,
            ingest,
        });
        drive_interleavings(&world);
        world
    }

    /// In the fault-free drain a run is the only thing running (no interleaving, no other
    /// stage: rows become pending only in a consumer batch, records only in an aggregator
    /// run), so a table with nothing pending as it starts has nothing pending throughout:
    /// its index scans, a bucket per hour of the age-out and expiry lookbacks, read nothing
    /// and are answered so without reading ([`FaultPlan::empty_tables`]).
    pub(crate) fn declare_empty_tables(&self) {
        if !self.faults.enabled() {
            self.faults.set_empty_tables(EmptyTables {
                usage: !self.usage.any_pending(),
                aggregated: !self.aggregated.any_pending(),
            });
        }
    }

    /// Append a line to the trace, stamped with the virtual time.
    pub fn log(&self, line: impl AsRef<str>) {
        let now = awsmp_contract::clock::Clock::now(self.clock.as_ref());
        lock(&self.trace).push(now, line.as_ref());
    }
}
