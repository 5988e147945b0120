//! The `awsmp-loadtest` command line.

use crate::faults::Faults;
use crate::loadrun::{self, RunSpec};
use crate::produce::ProduceSpec;
use crate::workload::WorkloadSpec;
use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    version,
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
    /// Only write events into the stream and stop (load-tests the ingestion tier).
    Produce(Common),
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
}

impl Common {
    fn spec(&self, produce_only: bool) -> Result<RunSpec> {
        anyhow::ensure!(
            self.events.is_some() || self.duration.is_some(),
            "give --events N or --duration S"
        );
        anyhow::ensure!(
            self.rate > 0.0 && self.producers > 0 && self.dimensions > 0,
            "--rate, --producers and --dimensions must be positive"
        );
        let dimensions = (0..self.dimensions).map(|i| format!("dim{i}")).collect();
        Ok(RunSpec {
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
                faults: Faults::parse(&self.faults)?,
            },
            produce_only,
            timeout: std::time::Duration::from_secs(self.timeout),
            progress: !self.quiet && !self.json,
            command_line: std::env::args().collect::<Vec<_>>().join(" "),
        })
    }
}

/// Entry point of the binary.
pub fn main() -> Result<()> {
    let cli = Cli::parse();
    crate::metrics_capture::install();
    let (common, produce_only) = match &cli.command {
        Command::Run(c) => (c, false),
        Command::Produce(c) => (c, true),
    };
    let spec = common.spec(produce_only)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(loadrun::run(&crate::local::Paths::from_env(), &spec))?;
    if let Some(dir) = &common.report {
        let html = report.write(dir)?;
        if !common.json {
            eprintln!("report: {}", html.display());
        }
    }
    if common.json {
        let mut v = serde_json::to_value(&report)?;
        v["conserved"] = report.conservation.conserved.into();
        v["violations"] = serde_json::to_value(&report.conservation.violations)?;
        println!("{v}");
    } else {
        print!("{}", report.summary());
    }
    if !report.conservation.conserved {
        std::process::exit(1);
    }
    Ok(())
}
