//! `marketplace-sim`: the AWS Marketplace Metering simulator as a process (see the
//! `awsmp-marketplace-sim` library). Prints `listening on http://127.0.0.1:PORT` as its first
//! stdout line.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use awsmp_marketplace_sim::{Catalog, Faults, SimConfig, spawn_on};
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

/// AWS Marketplace Metering Service simulator (awsJson1.1, BatchMeterUsage + ResolveCustomer).
#[derive(Debug, Parser)]
#[command(name = "marketplace-sim", version)]
struct Args {
    /// Loopback address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Catalog JSON (products, dimensions, licenses, tokens); empty catalog if omitted.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Region this instance plays.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Metering window in hours (overrides the catalog's windowHours).
    #[arg(long)]
    window_hours: Option<u32>,
    /// Answer every BatchMeterUsage with DisabledApiException.
    #[arg(long)]
    disabled: bool,
    /// Faults active from the start, same JSON as POST /_sim/faults.
    #[arg(long)]
    faults: Option<String>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("marketplace-sim: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() {
        bail!(
            "--listen {}: marketplace-sim only listens on loopback",
            args.listen
        );
    }
    let catalog = match &args.catalog {
        Some(path) => Catalog::from_file(path)?,
        None => Catalog::default(),
    };
    let mut config = SimConfig::new(catalog);
    config.region = args.region;
    config.window_hours = args.window_hours;
    config.disabled = args.disabled;
    if let Some(json) = &args.faults {
        config.faults = Faults::from_json(json)?;
    }
    // Listen for SIGTERM before announcing the address: a supervisor may signal right after.
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let sim = spawn_on(args.listen, config).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", sim.url()).and_then(|()| out.flush())?;
    drop(out);
    // SIGTERM (what `awsmp-local down` and supervisors send) or SIGINT.
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
    }
    sim.shutdown().await?;
    Ok(())
}
