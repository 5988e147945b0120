//! The `awsmp-loadtest` command line.

use crate::faults::Faults;
use crate::loadrun::{self, Overlap, RunSpec, Target};
use crate::produce::ProduceSpec;
use crate::workload::WorkloadSpec;
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    version,
    // A later `--duration` replaces an earlier one (`scripts/demo --duration 20`).
    args_override_self = true,
    about = "Drive awsmp at volume end to end and check that every unit is billed exactly once or accounted for"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The whole path: producer → Kinesis → consumer → usage table → pipeline → simulator,
    /// then the conservation check. Exits non-zero when conservation is violated.
    Run(Common),
    /// Only write events into an existing stream (default: the usage stream) and stop, leaving
    /// the stream and its records in place (load-tests the ingestion tier; `awsmp-local tick`
    /// consumes them afterwards).
    Produce(ProduceArgs),
    /// Print the capacity plan (docs/capacity.md) for 10 k to 10 M events/s, or for the
    /// figures given.
    Capacity(crate::capacity::CapacityArgs),
}

#[derive(Args, Clone, Debug)]
struct ProduceArgs {
    #[command(flatten)]
    common: Common,
    /// The existing stream to write into (default: `AWSMP_USAGE_STREAM` of the local stack's
    /// env file, or of the environment with `--target deployment`). It is left in place.
    #[arg(long)]
    stream: Option<String>,
}

#[derive(Args, Clone, Debug)]
struct Common {
    /// Total events to produce.
    #[arg(long, conflicts_with = "duration")]
    events: Option<u64>,
    /// Seconds to produce for.
    #[arg(long)]
    duration: Option<f64>,
    /// Target events per second, across producers.
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Number of groups (license × dimension), with Zipf-skewed popularity.
    #[arg(long, default_value_t = 300)]
    groups: usize,
    /// Dimensions per license.
    #[arg(long, default_value_t = 3)]
    dimensions: usize,
    /// Dimension names, comma-separated (default `dim0,dim1,…`; a deployment needs the
    /// product's real dimension keys). Overrides `--dimensions`.
    #[arg(long, value_delimiter = ',')]
    dimension_names: Vec<String>,
    /// Zipf exponent of group popularity.
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Share of groups whose events carry usage allocations (VMT).
    #[arg(long, default_value_t = 0.2)]
    allocation_share: f64,
    /// Concurrent producers.
    #[arg(long, default_value_t = 2)]
    producers: usize,
    /// Per-second collapse in the producer.
    #[arg(long)]
    collapse: bool,
    /// Seed: the same seed replays the same workload and fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fault classes: comma-separated, `all` or `none`.
    #[arg(long, default_value = "none")]
    faults: String,
    /// Print one JSON object on stdout (instead of the summary).
    #[arg(long)]
    json: bool,
    /// Write report.json and report.html here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Give up (and fail) if the run has not settled after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Run the stages one after another (produce and consume, then meter) instead of
    /// overlapping them as AWS does: for debugging.
    #[arg(long)]
    sequential: bool,
    /// Virtual seconds the pipeline's clock runs ahead of the stream while the consumer is
    /// still consuming, as if the consumer lagged by that much (with lag past an hour's end
    /// and its lock, hours close while their usage is still on the stream).
    #[arg(long, default_value_t = 0)]
    consumer_lag: u64,
    /// Put the run's first license into its deprovisioning flush window while it is still
    /// being consumed (the flush aggregates its current hour).
    #[arg(long)]
    deprovision: bool,
    /// Inject deliberately bad inputs (malformed JSON, a wrong `v`, a negative quantity, an
    /// unknown dimension, a tag AWS refuses, a re-used event id), each of which must end with
    /// its reason: `auto` (on when every fault class is), `on`, `off`. Local runs only.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    bad_inputs: String,
    /// The local event source mapping's `ParallelizationFactor` (1–10).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10))]
    parallelization_factor: u64,
    /// The local event source mapping's batching window, in milliseconds: how long it gathers
    /// a batch, as `MaximumBatchingWindowInSeconds` does (default: the deployment's
    /// `ConsumerBatchWindowSeconds`, 1 s). Rows are one per (group, second) of a batch, so a
    /// longer window carries more events a row; the latency goal is 2 s plus this window.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=300_000))]
    batching_window_ms: u64,
    /// `local` (default): the local stack, started if needed. `deployment`: a real deployment
    /// named by the environment (`AWSMP_USAGE_STREAM`, the `AWSMP_*_TABLE` names, region,
    /// credentials, optional `AWS_ENDPOINT_URL_<SERVICE>`), with `--licenses`.
    #[arg(long, default_value = "local", value_parser = ["local", "deployment"])]
    target: String,
    /// For `--target deployment`: a file of `licenseArn,customerAWSAccountId` lines — test
    /// licenses of the product to meter against.
    #[arg(long, required_if_eq("target", "deployment"))]
    licenses: Option<PathBuf>,
    /// `all`: spread the run's licenses round robin over every site of a multi-product,
    /// multi-region local stack, one share per site, each checked on its own (`run` only;
    /// docs/local-stack.md, "Many products, many regions").
    #[arg(long, value_parser = ["all"])]
    sites: Option<String>,
    /// How a local run runs the Lambdas: `in-process` (default) calls their handler functions
    /// in this process, as fast as the load test needs; `host` runs each Lambda as its built
    /// binary in its own process under the Lambda Runtime API (`awsmp-lambda-host`), the
    /// scheduled ones on the run's virtual clock through libfaketime (`scripts/demo`).
    #[arg(long, default_value = "in-process", value_parser = ["in-process", "host"])]
    lambdas: String,
    /// Under `--lambdas host`: the share of the run's events a module of its own sends through
    /// the `meter-ingest` binary (async invokes as its alias ARN), beside the producers; 0
    /// sends none (docs/local-stack.md, "The demo: every Lambda a process").
    #[arg(long, default_value_t = 0.02)]
    ingest_share: f64,
}

/// What a command runs.
enum Mode {
    /// The whole path, into a fresh stream.
    Run,
    /// Producing only, into `stream` (default: the usage stream).
    Produce { stream: Option<String> },
}

impl Common {
    fn spec(&self, mode: Mode) -> Result<RunSpec> {
        anyhow::ensure!(
            self.events.is_some() || self.duration.is_some(),
            "give --events N or --duration S"
        );
        anyhow::ensure!(
            self.rate > 0.0 && self.producers > 0 && self.dimensions > 0,
            "--rate, --producers and --dimensions must be positive"
        );
        let dimensions: Vec<String> = if self.dimension_names.is_empty() {
            (0..self.dimensions).map(|i| format!("dim{i}")).collect()
        } else {
            self.dimension_names.clone()
        };
        let target = match (self.target.as_str(), &self.licenses) {
            ("deployment", Some(file)) => Target::Deployment {
                licenses: read_licenses(file)?,
            },
            _ => Target::Local,
        };
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.ingest_share),
            "--ingest-share is a share: 0 to 1"
        );
        let faults = Faults::parse(&self.faults)?;
        let bad_inputs = match self.bad_inputs.as_str() {
            "on" => true,
            "off" => false,
            _ => faults.0.len() == crate::faults::FaultClass::ALL.len(),
        };
        Ok(RunSpec {
            target,
            produce: ProduceSpec {
                events: self.events,
                duration: self.duration,
                rate: self.rate,
                producers: self.producers,
                collapse: self.collapse,
                workload: WorkloadSpec {
                    groups: self.groups,
                    dimensions,
                    zipf_exponent: self.zipf,
                    allocation_share: self.allocation_share,
                    max_quantity: 100,
                    seed: self.seed,
                    tagging_seed: self.seed,
                },
                faults,
            },
            produce_only: matches!(mode, Mode::Produce { .. }),
            stream: match mode {
                Mode::Run => None,
                Mode::Produce { stream } => stream,
            },
            timeout: std::time::Duration::from_secs(self.timeout),
            overlap: Overlap {
                sequential: self.sequential,
                consumer_lag: chrono::Duration::seconds(self.consumer_lag as i64),
                deprovision: self.deprovision,
                parallelization_factor: self.parallelization_factor as usize,
                batching_window: std::time::Duration::from_millis(self.batching_window_ms),
            },
            bad_inputs,
            progress: !self.quiet && !self.json,
            command_line: std::env::args().collect::<Vec<_>>().join(" "),
            ingest_share: self.ingest_share,
            lambdas: match self.lambdas.as_str() {
                "host" => loadrun::Lambdas::Host,
                _ => loadrun::Lambdas::InProcess,
            },
        })
    }
}

/// The `--json` result: the verdict and the funnel first, then the whole report.
#[derive(serde::Serialize)]
struct JsonOut<'a> {
    conserved: bool,
    funnel: &'a crate::conservation::Funnel,
    violations: &'a [crate::conservation::Violation],
    #[serde(flatten)]
    report: &'a crate::report::RunReport,
}

impl<'a> JsonOut<'a> {
    fn of(report: &'a crate::report::RunReport) -> Self {
        Self {
            conserved: report.conservation.conserved,
            funnel: &report.conservation.funnel,
            violations: &report.conservation.violations,
            report,
        }
    }
}

/// Entry point of the binary.
pub fn main() -> Result<()> {
    let cli = Cli::parse();
    crate::metrics_capture::install();
    let (common, mode) = match &cli.command {
        Command::Capacity(a) => {
            print!("{}", a.markdown());
            return Ok(());
        }
        Command::Run(c) => (c, Mode::Run),
        Command::Produce(p) => (
            &p.common,
            Mode::Produce {
                stream: p.stream.clone(),
            },
        ),
    };
    let spec = common.spec(mode)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if common.sites.is_some() {
        anyhow::ensure!(
            matches!(cli.command, Command::Run(_)),
            "--sites is for `awsmp-loadtest run`"
        );
        return run_sites(common, &runtime, &spec);
    }
    let report = runtime.block_on(loadrun::run(
        &awsmp_local_stack::local::Paths::from_env(),
        &spec,
    ))?;
    if let Some(dir) = &common.report {
        let html = report.write(dir)?;
        if !common.json {
            eprintln!("report: {}", html.display());
        }
    }
    if common.json {
        println!("{}", serde_json::to_string(&JsonOut::of(&report))?);
    } else {
        print!("{}", report.summary());
    }
    if !report.conservation.conserved {
        std::process::exit(1);
    }
    Ok(())
}

/// `run --sites all`: every site's share, each site's report under `--report DIR/<product>/<region>`.
fn run_sites(common: &Common, runtime: &tokio::runtime::Runtime, spec: &RunSpec) -> Result<()> {
    let report = runtime.block_on(loadrun::run_sites(
        &awsmp_local_stack::local::Paths::from_env(),
        spec,
    ))?;
    if let Some(dir) = &common.report {
        for site in &report.sites {
            let html = site.report.write(&dir.join(&site.site))?;
            if !common.json {
                eprintln!("report of {}: {}", site.site, html.display());
            }
        }
    }
    if common.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.summary());
    }
    if !report.conserved {
        std::process::exit(1);
    }
    Ok(())
}

/// `licenseArn,customerAWSAccountId` per line; blank lines and `#` comments skipped.
fn read_licenses(path: &std::path::Path) -> Result<Vec<(String, String)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((license, account)) = line.split_once(',') else {
            anyhow::bail!(
                "{}:{n}: expected licenseArn,customerAWSAccountId",
                path.display()
            );
        };
        let (license, account) = (license.trim(), account.trim());
        anyhow::ensure!(
            awsmp_contract::ids::is_valid_license_arn(license),
            "{}:{n}: not a license ARN: {license}",
            path.display()
        );
        anyhow::ensure!(
            awsmp_contract::ids::is_valid_account_id(account),
            "{}:{n}: not an account id: {account}",
            path.display()
        );
        out.push((license.to_owned(), account.to_owned()));
    }
    anyhow::ensure!(!out.is_empty(), "{}: no licenses", path.display());
    Ok(out)
}
