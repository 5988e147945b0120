//! `awsmp-local`: run awsmp on one machine, with no AWS account.

use anyhow::Result;
use awsmp_loadtest::local::{self, Paths, UpOptions};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(version, about = "The awsmp local stack: emulators, the Marketplace simulator, and the local runner")]
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
    },
    /// Stop exactly the processes `up` started.
    Down {
        /// Also delete local data, logs and the demo catalog.
        #[arg(long)]
        wipe: bool,
    },
    /// Say what runs where.
    Status,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let paths = Paths::from_env();
    match cli.command {
        Command::Up { catalog, ephemeral } => {
            let env = local::up(&paths, &UpOptions { catalog, ephemeral }).await?;
            for line in local::status(&paths)? {
                println!("{line}");
            }
            println!("{} variables written to {}", env.vars.len(), paths.env_file().display());
        }
        Command::Down { wipe } => {
            let stopped = local::down(&paths, wipe)?;
            println!("stopped: {}", if stopped.is_empty() { "nothing was running".into() } else { stopped.join(", ") });
        }
        Command::Status => {
            for line in local::status(&paths)? {
                println!("{line}");
            }
        }
    }
    Ok(())
}
