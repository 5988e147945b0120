//! `awsmp-local`: run awsmp on one machine, with no AWS account.

use anyhow::{Context, Result};
use awsmp_local_stack::local::LocalEnv;
use awsmp_local_stack::local::{self, Paths, UpOptions};
use awsmp_local_stack::runner::Runner;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    version,
    about = "The awsmp local stack: emulators, the Marketplace simulator, and the local runner"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install (first use), start and provision the local stack; write .awsmp-local/env.
    Up {
        /// Marketplace simulator catalog (default: a demo catalog in .awsmp-local/catalog.json).
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Keep emulator data in memory only.
        #[arg(long)]
        ephemeral: bool,
        /// Seed meter-ingest's mapping table from this mapping file (docs/meter-ingest.md);
        /// kept, so a later `up` seeds it again.
        #[arg(long)]
        ingest_mapping: Option<PathBuf>,
        /// Products and regions to hold (docs/local-stack.md, "Many products, many regions").
        #[command(flatten)]
        shape: ShapeArgs,
    },
    /// Stop exactly the processes `up` started.
    Down {
        /// Also delete every piece of the stack's state: data, logs, the demo catalog, the
        /// event source mapping's checkpoints and the load runs' files.
        #[arg(long)]
        wipe: bool,
    },
    /// Say what runs where.
    Status,
    /// Run every scheduled target once as of an instant, then drain the queues until quiet.
    Tick {
        /// The instant (RFC 3339); default now. The simulator's clock is set to it too.
        #[arg(long)]
        at: Option<DateTime<Utc>>,
    },
    /// Invoke one function with a JSON event, as `lambda invoke` would.
    Invoke {
        /// discoverer | aggregator | cleanup | submitter | expiry | meter-ingest
        function: String,
        /// meter-ingest: the invoked function ARN (a module's alias) the async invoke comes as.
        #[arg(long = "as")]
        invoked_as: Option<String>,
        /// The event, as JSON.
        #[arg(long)]
        event: String,
        /// The instant (RFC 3339); default now.
        #[arg(long)]
        at: Option<DateTime<Utc>>,
    },
    /// Deliver EventBridge events (a JSON event or an array of them, from FILE or `-` for
    /// stdin) to the subscription queue, then drain it through the subscription Lambda.
    Event {
        /// The file, or `-`.
        source: String,
    },
    /// Serve the register endpoint (the registration page and its form post) on 127.0.0.1;
    /// prints `listening on http://127.0.0.1:PORT/register` first.
    ServeRegister {
        /// Address to bind (loopback only; port 0 = any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// The product this endpoint registers for (default: the env file's AWSMP_PRODUCT_CODE).
        #[arg(long)]
        product_code: Option<String>,
        /// On a many-products, many-regions stack: the site to register for,
        /// `PRODUCT/REGION` (its simulator, tables and product code); default: the first site.
        #[arg(long, value_name = "PRODUCT/REGION")]
        site: Option<String>,
    },
    /// meter-ingest operations (docs/meter-ingest.md).
    Ingest {
        #[command(subcommand)]
        action: IngestAction,
    },
    /// Run the schedules continuously, on real or accelerated time.
    Run {
        /// Virtual start instant (RFC 3339); default now.
        #[arg(long)]
        start: Option<DateTime<Utc>>,
        /// Virtual seconds per real second (1 = real time).
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Virtual seconds between ticks (the 5-minute submit schedule by default).
        #[arg(long, default_value_t = 300)]
        every: u64,
        /// Stop after this many ticks (default: until interrupted).
        #[arg(long)]
        ticks: Option<u64>,
        /// Poll the usage stream inside each tick, before the schedules (the old order, for
        /// debugging), instead of on a task of its own beside them as AWS does.
        #[arg(long)]
        sequential: bool,
    },
}

/// `up --products N --regions R1,R2`.
#[derive(clap::Args)]
struct ShapeArgs {
    /// How many products (the catalog's first N; the demo catalog grows to N).
    #[arg(long)]
    products: Option<usize>,
    /// Metering regions, comma-separated; must include us-east-1 (the events stack's).
    #[arg(long, value_delimiter = ',')]
    regions: Option<Vec<String>>,
}

impl ShapeArgs {
    /// `None` when neither flag is given: the running stack's shape.
    fn shape(&self) -> Result<Option<local::topology::Shape>> {
        if self.products.is_none() && self.regions.is_none() {
            return Ok(None);
        }
        let regions = self.regions.clone().unwrap_or_default();
        local::topology::Shape::new(self.products.unwrap_or(1), &regions).map(Some)
    }
}

#[derive(Subcommand)]
enum IngestAction {
    /// Release every held event onto the usage stream, checked against the mapping as it is now.
    Release {
        /// The instant (RFC 3339); default now.
        #[arg(long)]
        at: Option<DateTime<Utc>>,
    },
    /// The deploy guard: fail unless ARN is qualified, allowlisted and has a mapping entry.
    CheckAlias {
        /// The module's invoked function ARN (alias or version).
        #[arg(long)]
        arn: String,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    // Warnings (e.g. a reset checkpoint) on stderr; stdout keeps the JSON reports.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let paths = Paths::from_env();
    match cli.command {
        Command::Up {
            catalog,
            ephemeral,
            ingest_mapping,
            shape,
        } => up(&paths, (catalog, shape.shape()?), ephemeral, ingest_mapping).await?,
        Command::Down { wipe } => {
            let stopped = local::down(&paths, wipe)?;
            println!(
                "stopped: {}",
                if stopped.is_empty() {
                    "nothing was running".into()
                } else {
                    stopped.join(", ")
                }
            );
        }
        Command::Status => {
            for line in local::status(&paths)? {
                println!("{line}");
            }
        }
        Command::Tick { at } => tick(&paths, at.unwrap_or_else(Utc::now)).await?,
        Command::Invoke {
            function,
            invoked_as,
            event,
            at,
        } if function == "meter-ingest" => {
            invoke_meter_ingest(&paths, invoked_as, &event, at).await?
        }
        Command::Ingest { action } => ingest(&paths, action).await?,
        Command::Invoke {
            function,
            event,
            at,
            ..
        } => invoke(&paths, &function, &event, at).await?,
        Command::Event { source } => event(&paths, &source).await?,
        Command::ServeRegister {
            listen,
            product_code,
            site,
        } => serve_register(&paths, listen, product_code, site.as_deref()).await?,
        Command::Run {
            start,
            speed,
            every,
            ticks,
            sequential,
        } => {
            let clock = RunClock {
                start: start.unwrap_or_else(Utc::now),
                speed,
                every,
                ticks,
            };
            run(&paths, clock, sequential).await?
        }
    }
    Ok(())
}

/// `awsmp-local tick`: one runner, or every site's of a multi-product, multi-region stack.
async fn tick(paths: &Paths, at: DateTime<Utc>) -> Result<()> {
    if let Some(sites) = sites(paths).await? {
        let report = sites.tick(at).await?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        for (_, runner) in sites.runners() {
            print_metrics(runner);
        }
        return Ok(());
    }
    let runner = runner(paths).await?;
    let report = runner.tick(at).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    print_metrics(&runner);
    Ok(())
}

/// Every site's runner, when the stack holds more than one (docs/local-stack.md).
async fn sites(paths: &Paths) -> Result<Option<local::sites::Sites>> {
    match local::topology::Topology::load(paths)? {
        Some(t) if t.is_multi() => Ok(Some(local::sites::Sites::open(&t).await?)),
        _ => Ok(None),
    }
}

/// `awsmp-local invoke F`: one handler with a JSON event, as `lambda invoke` would.
async fn invoke(
    paths: &Paths,
    function: &str,
    event: &str,
    at: Option<DateTime<Utc>>,
) -> Result<()> {
    let runner = runner(paths).await?;
    runner.set_time(at.unwrap_or_else(Utc::now)).await?;
    let out = runner
        .invoke(function, serde_json::from_str(event)?)
        .await?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    print_metrics(&runner);
    Ok(())
}

/// `awsmp-local serve-register`: the register Lambda on `listen`, as API Gateway would serve it.
async fn serve_register(
    paths: &Paths,
    listen: std::net::SocketAddr,
    product_code: Option<String>,
    site: Option<&str>,
) -> Result<()> {
    let env = match site {
        None => LocalEnv::read(&paths.env_file())?,
        Some(label) => {
            let topology = local::topology::Topology::load(paths)?.with_context(|| {
                format!("--site {label}: this stack has one site (awsmp-local up --products/--regions makes more)")
            })?;
            let mut env = LocalEnv::read(&topology.site(label)?.env_file)?;
            // Registration tokens are Marketplace's, not a region's: ResolveCustomer resolves
            // one in any region that serves it
            // (https://docs.aws.amazon.com/marketplace/latest/APIReference/API_marketplace-metering_ResolveCustomer.html).
            // Locally the events region's simulator issues them, so it answers for every site.
            let events = LocalEnv::read(&paths.env_file())?;
            let metering = "AWS_ENDPOINT_URL_MARKETPLACE_METERING";
            env.vars
                .insert(metering.into(), events.get(metering)?.to_owned());
            env
        }
    };
    let register = local::lifecycle::LocalRegister::from_env(&env, product_code).await?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    local::lifecycle::serve_register(listener, register).await?;
    Ok(())
}

/// `awsmp-local event`: EventBridge's delivery of the events in `source` (a file, or `-`).
async fn event(paths: &Paths, source: &str) -> Result<()> {
    let text = if source == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(source)?
    };
    let events = local::lifecycle::events_from_json(&text)?;
    let runner = runner(paths).await?;
    let Some(l) = &runner.lifecycle else {
        anyhow::bail!("the stack has no subscription queue; run `awsmp-local up`");
    };
    let delivered = l.enqueue(&events).await?;
    let drained = runner.drain().await?;
    let report = serde_json::json!({"delivered": delivered, "drained": drained});
    println!("{}", serde_json::to_string_pretty(&report)?);
    print_metrics(&runner);
    Ok(())
}

async fn up(
    paths: &Paths,
    (catalog, shape): (Option<PathBuf>, Option<local::topology::Shape>),
    ephemeral: bool,
    ingest_mapping: Option<PathBuf>,
) -> Result<()> {
    let options = UpOptions {
        catalog,
        ephemeral: ephemeral.then_some(true),
        shape,
    };
    let mut env = local::up(paths, &options).await?;
    if let Some(n) = local::ingest::seed_mapping(paths, &mut env, ingest_mapping.as_deref()).await?
    {
        println!("meter-ingest mapping: {n} modules seeded");
    }
    for line in local::status(paths)? {
        println!("{line}");
    }
    println!(
        "{} variables written to {}",
        env.vars.len(),
        paths.env_file().display()
    );
    Ok(())
}

/// `invoke meter-ingest --as ARN`: one async invoke as that ARN (docs/meter-ingest.md).
async fn invoke_meter_ingest(
    paths: &Paths,
    invoked_as: Option<String>,
    event: &str,
    at: Option<DateTime<Utc>>,
) -> Result<()> {
    let env = LocalEnv::read(&paths.env_file())?;
    let invoked_as = invoked_as.context("meter-ingest needs --as INVOKED_ARN")?;
    let out = local::ingest::invoke(&env, &invoked_as, serde_json::from_str(event)?, at).await?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// `ingest release | check-alias`.
async fn ingest(paths: &Paths, action: IngestAction) -> Result<()> {
    let env = LocalEnv::read(&paths.env_file())?;
    let out = match action {
        IngestAction::Release { at } => local::ingest::release(&env, at).await?,
        IngestAction::CheckAlias { arn } => local::ingest::check_alias(&env, &arn).await?,
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// The schedule of `awsmp-local run`.
struct RunClock {
    /// Virtual start instant.
    start: DateTime<Utc>,
    /// Virtual seconds per real second.
    speed: f64,
    /// Virtual seconds between ticks.
    every: u64,
    /// Stop after this many ticks.
    ticks: Option<u64>,
}

/// Real time between polls of the stream while it is caught up.
const STREAM_POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// Tick every `every` virtual seconds, `speed` virtual seconds per real second; the consumer
/// polls the stream on its own concurrently (unless `sequential`: then inside each tick).
async fn run(paths: &Paths, clock: RunClock, sequential: bool) -> Result<()> {
    anyhow::ensure!(
        clock.speed > 0.0 && clock.every > 0,
        "--speed and --every must be positive"
    );
    if let Some(sites) = sites(paths).await? {
        // Every site's tick polls its stream first.
        tick_on_schedule(&clock, async |at| {
            Ok(serde_json::to_string(&sites.tick(at).await?)?)
        })
        .await?;
        for (_, runner) in sites.runners() {
            print_metrics(runner);
        }
        return Ok(());
    }
    let mut runner = runner(paths).await?;
    runner.tick_consumes = sequential;
    let done = std::sync::atomic::AtomicBool::new(false);
    let ticking = async {
        let out = tick_on_schedule(&clock, async |at| {
            Ok(serde_json::to_string(&runner.tick(at).await?)?)
        })
        .await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        out
    };
    let consuming = async {
        while !sequential && !done.load(std::sync::atomic::Ordering::SeqCst) {
            let report = runner.consume_stream().await?;
            if report.is_none_or(|r| r.records_delivered == 0) {
                tokio::time::sleep(STREAM_POLL_EVERY).await;
            }
        }
        anyhow::Ok(())
    };
    let (ticked, consumed) = tokio::join!(ticking, consuming);
    ticked?;
    consumed?;
    print_metrics(&runner);
    Ok(())
}

/// The ticks of `clock`, until its count or an interrupt; each prints its report's line.
async fn tick_on_schedule(
    clock: &RunClock,
    tick: impl AsyncFn(DateTime<Utc>) -> Result<String>,
) -> Result<()> {
    let origin = std::time::Instant::now();
    let mut n = 0;
    loop {
        let virtual_now = clock.start
            + chrono::Duration::milliseconds(
                (origin.elapsed().as_secs_f64() * clock.speed * 1000.0) as i64,
            );
        println!("{}", tick(virtual_now).await?);
        n += 1;
        if clock.ticks.is_some_and(|t| n >= t) {
            return Ok(());
        }
        let due = std::time::Duration::from_secs_f64(clock.every as f64 * n as f64 / clock.speed);
        if let Some(wait) = due.checked_sub(origin.elapsed()) {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    }
}

async fn runner(paths: &Paths) -> Result<Runner> {
    let env = LocalEnv::read(&paths.env_file())?;
    Runner::new(env, &BTreeMap::new())
        .await?
        .with_stream_consumer(paths.esm_checkpoints())
        .await
}

/// Totals of the business metrics the handlers emitted (the EMF lines CloudWatch would ingest).
fn print_metrics(runner: &Runner) {
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    for line in runner.metrics.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if let Some(name) = v["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"].as_str() {
            let dims: Vec<String> = v["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d.as_str())
                .filter(|d| *d != "Service")
                .map(|d| format!("{d}={}", v[d].as_str().unwrap_or("")))
                .collect();
            let key = if dims.is_empty() {
                name.to_owned()
            } else {
                format!("{name}[{}]", dims.join(","))
            };
            *totals.entry(key).or_default() += v[name].as_f64().unwrap_or(0.0);
        }
    }
    for (k, v) in totals {
        eprintln!("metric {k} = {v}");
    }
}
