//! The command line of `awsmp-simulate` (and `scripts/simulate`).

use crate::sweep::sweep;
use clap::Parser;
use std::process::ExitCode;

/// Schedules of the default sweep (what `scripts/test` runs).
pub const DEFAULT_SCHEDULES: u64 = 1000;

/// Run seeded schedules of the whole billing path and check the invariants after each.
#[derive(Debug, Parser)]
#[command(name = "awsmp-simulate")]
pub struct Args {
    /// Schedules to run (seeds `--first-seed` onwards).
    #[arg(long, default_value_t = DEFAULT_SCHEDULES)]
    pub schedules: u64,
    /// First seed of the sweep.
    #[arg(long, default_value_t = 0)]
    pub first_seed: u64,
    /// Run exactly this seed's schedule.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the schedule's trace (with `--seed`).
    #[arg(long)]
    pub trace: bool,
    /// Name the deliberately broken variants (needs the `mutants` feature).
    #[arg(long)]
    pub list_mutants: bool,
    /// Run the sweep against one broken variant (needs the `mutants` feature).
    #[arg(long)]
    pub mutant: Option<String>,
    /// Let half the schedules deprovision a license while usage flows (the default; kept as
    /// an alias for replay lines printed before it was).
    #[arg(long, conflicts_with = "no_deprovision")]
    pub deprovision: bool,
    /// Deprovision no license (docs/simulation.md, invariant 5).
    #[arg(long)]
    pub no_deprovision: bool,
    /// Put every schedule into the window-close race class (one in ten otherwise).
    #[arg(long)]
    pub race: bool,
}

/// Parse the arguments and run.
pub fn main() -> ExitCode {
    let args = Args::parse();
    if args.list_mutants {
        for m in awsmp_aws::mutants::Mutant::ALL {
            println!("{}", m.name());
        }
        return ExitCode::SUCCESS;
    }
    if let Some(name) = &args.mutant {
        if let Err(e) = crate::mutant::activate(name) {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
        println!("mutant {name} active");
    }
    crate::lifecycle::set_deprovision(!args.no_deprovision);
    crate::schedule::force_race(args.race);
    let flags = format!(
        "{}{}",
        if args.no_deprovision {
            " --no-deprovision"
        } else {
            ""
        },
        if args.race { " --race" } else { "" }
    );
    let replay = |seed: u64| match &args.mutant {
        Some(m) => format!("scripts/simulate{flags} --mutant {m} --seed {seed} --trace"),
        None => format!("scripts/simulate{flags} --seed {seed} --trace"),
    };
    if let Some(seed) = args.seed {
        println!("seed {seed}");
        let report = crate::run(seed, args.trace);
        for line in &report.trace {
            println!("{line}");
        }
        println!("limits reached: {:?}", report.explored.limits);
        for v in &report.violations {
            println!("violation: {v}");
        }
        println!("1 schedules, {} violations", report.violations.len());
        return if report.violations.is_empty() {
            ExitCode::SUCCESS
        } else {
            println!("replay: {}", replay(seed));
            ExitCode::FAILURE
        };
    }
    println!(
        "seeds {}..{}",
        args.first_seed,
        args.first_seed + args.schedules
    );
    let result = sweep(args.first_seed, args.schedules);
    let e = &result.explored;
    println!(
        "explored: {} steps, {} hours crossed, {} SQS redeliveries, {} units billed",
        e.steps, e.hours_crossed, e.redeliveries, e.billed
    );
    println!("  faults: {:?}", e.faults);
    println!("  interleavings: {:?}", e.interleavings);
    println!("  event source mapping: {:?}", e.mapping);
    println!("  limits reached (schedules): {:?}", e.limits);
    let violations: usize = result.failures.iter().map(|f| f.violations.len()).sum();
    for f in &result.failures {
        println!(
            "FAIL seed {}: {}",
            f.seed,
            f.violations.first().map_or("", String::as_str)
        );
        println!("  replay: {}", replay(f.seed));
    }
    println!("{} schedules, {violations} violations", result.schedules);
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
