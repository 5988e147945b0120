//! `meterctl`: the operator CLI (docs/meterctl.md). `status`, `ledger`, `redrive` and `verify`
//! over the stage configuration of the Lambdas (`Config::from_env`), the DynamoDB tables and
//! CloudTrail's event history (`AWS_ENDPOINT_URL_CLOUDTRAIL` points it at the local simulator).

use anyhow::{Context, Result, bail};
use awsmp_aws::watermark::DynamoDbWatermarkStore;
use awsmp_aws::watermark::WatermarkStore;
use awsmp_contract::keys::HourBucket;
use awsmp_meterctl::cloudtrail::CloudTrailMeteringTrail;
use awsmp_meterctl::ledger::{EXIT_CLEAN, EXIT_UNEXPLAINED, Ledger};
use awsmp_meterctl::read::{OpsTables, Query, sources};
use awsmp_meterctl::sources::HourSources;
use awsmp_meterctl::status::{Moment, status};
use awsmp_meterctl::subscription::{SubscriptionState, SubscriptionView};
use awsmp_meterctl::{redrive, render, verify};
use awsmp_pipeline::config::Config;
use chrono::{DateTime, Duration, Utc};
use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

/// Exit status when meterctl itself failed (configuration, a store or CloudTrail unreachable).
const EXIT_TOOL_ERROR: u8 = 2;
/// Exit status of a refused re-drive.
const EXIT_REFUSED: u8 = 4;

#[derive(Parser)]
#[command(
    name = "meterctl",
    about = "Status, ledger, re-drive and verification of awsmp metering"
)]
struct Cli {
    /// One JSON document on stdout instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Judge by this instant (RFC 3339) instead of the clock: a local stack on a set clock.
    #[arg(long, global = true)]
    now: Option<DateTime<Utc>>,
    /// The consumer's rejected-events store (its refusals count as intended usage).
    #[arg(long, global = true, env = "AWSMP_REJECTED_EVENTS_TABLE")]
    rejected_events_table: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Rows, record, late and rejected usage of a license, group or group-hour, and what happens next.
    Status(Selection),
    /// Per group-hour: intended, aggregated, submitted, accepted by AWS, and every difference.
    Ledger(Range),
    /// Put a fixed group-hour back to pending (Error record or RejectedClientSide rows).
    Redrive(GroupHour),
    /// Recompute each group-hour from its sources and compare with what is stored.
    Verify(Range),
}

#[derive(Args)]
struct Range {
    /// First UTC hour, `YYYY-MM-DDTHH`.
    #[arg(long)]
    from: HourBucket,
    /// Last UTC hour, `YYYY-MM-DDTHH` (inclusive).
    #[arg(long)]
    to: HourBucket,
    /// Only these licenses (repeatable); default: every license with a record or a subscriber.
    #[arg(long = "license")]
    licenses: Vec<String>,
}

#[derive(Args)]
struct Selection {
    /// License ARN (legacy: product code).
    #[arg(long)]
    license: String,
    /// Buyer account (legacy: customer identifier).
    #[arg(long)]
    account: Option<String>,
    /// Dimension.
    #[arg(long)]
    dimension: Option<String>,
    /// One UTC hour; default: every hour of the billable window up to now.
    #[arg(long)]
    hour: Option<HourBucket>,
}

#[derive(Args)]
struct GroupHour {
    /// License ARN (legacy: product code).
    #[arg(long)]
    license: String,
    /// Buyer account (legacy: customer identifier).
    #[arg(long)]
    account: String,
    /// Dimension.
    #[arg(long)]
    dimension: String,
    /// UTC hour, `YYYY-MM-DDTHH`.
    #[arg(long)]
    hour: HourBucket,
    /// Say what would be done, change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Everything the commands use, built once.
struct Ctx {
    config: Config,
    tables: OpsTables,
    trail: CloudTrailMeteringTrail,
    now: DateTime<Utc>,
    json: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("meterctl: {e:#}");
            ExitCode::from(EXIT_TOOL_ERROR)
        }
    }
}

async fn run(cli: Cli) -> Result<u8> {
    let config = Config::from_env().context("reading the stage configuration")?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let tables = OpsTables {
        client: aws_sdk_dynamodb::Client::new(&sdk),
        usage: config.usage_table.clone(),
        aggregated: config.aggregated_table.clone(),
        rejected: cli.rejected_events_table.filter(|t| !t.is_empty()),
        subscribers: config.subscribers_table.clone(),
    };
    let ctx = Ctx {
        trail: CloudTrailMeteringTrail::new(aws_sdk_cloudtrail::Client::new(&sdk)),
        config,
        tables,
        now: cli.now.unwrap_or_else(Utc::now),
        json: cli.json,
    };
    match cli.command {
        Command::Status(s) => status_cmd(&ctx, &s).await,
        Command::Ledger(r) => ledger_cmd(&ctx, &r).await,
        Command::Redrive(g) => redrive_cmd(&ctx, &g).await,
        Command::Verify(r) => verify_cmd(&ctx, &r).await,
    }
}

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

async fn read(
    ctx: &Ctx,
    licenses: Vec<String>,
    from: HourBucket,
    to: HourBucket,
) -> Result<Vec<HourSources>> {
    if from > to {
        bail!("--from {from} is after --to {to}");
    }
    let q = Query {
        licenses,
        from,
        to,
        now: ctx.now,
    };
    Ok(sources(&ctx.tables, &ctx.trail, &q, &ctx.config.time).await?)
}

async fn ledger_cmd(ctx: &Ctx, r: &Range) -> Result<u8> {
    let sources = read(ctx, r.licenses.clone(), r.from, r.to).await?;
    let ledger = Ledger::build(&sources, ctx.now);
    if ctx.json {
        print_json(&ledger)?;
    } else {
        print!("{}", render::ledger_table(&ledger));
    }
    Ok(u8::try_from(ledger.exit_code()).unwrap_or(1))
}

async fn verify_cmd(ctx: &Ctx, r: &Range) -> Result<u8> {
    let sources = read(ctx, r.licenses.clone(), r.from, r.to).await?;
    let mismatches: Vec<_> = sources.iter().flat_map(verify::verify).collect();
    if ctx.json {
        print_json(&serde_json::json!({"checked": sources.len(), "mismatches": mismatches}))?;
    } else {
        print!("{}", render::verify_table(&mismatches, sources.len()));
    }
    Ok(if mismatches.is_empty() {
        EXIT_CLEAN as u8
    } else {
        EXIT_UNEXPLAINED as u8
    })
}

/// The lowest ingest watermark over the shards that still hold the fence, if a fence is set.
async fn watermark(ctx: &Ctx) -> Result<Option<DateTime<Utc>>> {
    let (Some(table), Some(stream)) =
        (&ctx.config.ingest_watermark_table, &ctx.config.usage_stream)
    else {
        return Ok(None);
    };
    let store = DynamoDbWatermarkStore::new(ctx.tables.client.clone(), table);
    Ok(store
        .shards(stream)
        .await?
        .into_iter()
        .filter(|s| !s.drained)
        .map(|s| s.applied_through)
        .min())
}

async fn status_cmd(ctx: &Ctx, s: &Selection) -> Result<u8> {
    let (from, to) = match s.hour {
        Some(h) => (h, h),
        None => {
            let now = HourBucket::containing(ctx.now);
            let window = i64::from(ctx.config.time.billable_window_hours());
            (now.minus_hours(window), now)
        }
    };
    let mut sources = read(ctx, vec![s.license.clone()], from, to).await?;
    sources.retain(|h| {
        s.account
            .as_ref()
            .is_none_or(|a| *a == h.group.customer_aws_account_id)
            && s.dimension.as_ref().is_none_or(|d| *d == h.group.dimension)
    });
    // A consistent read of the license's subscriber entries, not the (eventually consistent,
    // sparse) deprovisioning index: it names a finalized license too.
    let subscriptions = ctx.tables.subscriptions(&s.license).await?;
    let deprovisioning = subscriptions
        .iter()
        .filter(|v| v.state(ctx.now) != SubscriptionState::Inactive)
        .find_map(SubscriptionView::deprovisioning);
    let moment = Moment {
        now: ctx.now,
        time: &ctx.config.time,
        watermark: watermark(ctx).await?,
        settle: Duration::seconds(i64::try_from(ctx.config.watermark_settle_secs).unwrap_or(0)),
        deprovisioning: deprovisioning.as_ref(),
    };
    let statuses: Vec<_> = sources.iter().map(|h| status(h, &moment)).collect();
    if ctx.json {
        let subscription: Vec<_> = subscriptions
            .iter()
            .map(|v| serde_json::json!({"entry": v, "state": v.state(ctx.now), "summary": v.describe(ctx.now)}))
            .collect();
        print_json(&serde_json::json!({
            "license": s.license,
            "subscription": subscription,
            "deprovisioning": deprovisioning.as_ref().map(|d| d.expiry),
            "groupHours": statuses,
        }))?;
    } else {
        if subscriptions.is_empty() && ctx.tables.subscribers.is_some() {
            println!("license {} has no subscriber entry", s.license);
        }
        for v in &subscriptions {
            println!("{}", v.describe(ctx.now));
        }
        print!("{}", render::status_text(&statuses));
    }
    Ok(EXIT_CLEAN as u8)
}

async fn redrive_cmd(ctx: &Ctx, g: &GroupHour) -> Result<u8> {
    let group = awsmp_contract::keys::GroupKey::new(&g.license, &g.account, &g.dimension, g.hour);
    let sources = read(ctx, vec![g.license.clone()], g.hour, g.hour).await?;
    let s = sources
        .into_iter()
        .find(|s| s.group == group)
        .unwrap_or_else(|| HourSources::new(group.clone()));
    let plan = match redrive::plan(&s, ctx.now, &ctx.config.time) {
        Ok(p) => p,
        Err(refusal) => {
            if ctx.json {
                print_json(&serde_json::json!({"redriven": false, "refusal": refusal}))?;
            } else {
                println!("refused: {refusal}");
            }
            return Ok(EXIT_REFUSED);
        }
    };
    let changed = if g.dry_run {
        0
    } else {
        match plan {
            redrive::Plan::Record => u32::from(
                redrive::reset_record(&ctx.tables.client, &ctx.tables.aggregated, &group, ctx.now)
                    .await?,
            ),
            redrive::Plan::Rows => {
                let usage = ctx
                    .tables
                    .usage
                    .as_deref()
                    .context("AWSMP_USAGE_TABLE is not set")?;
                redrive::reset_rows(&ctx.tables.client, usage, &group, ctx.now).await?
            }
        }
    };
    if ctx.json {
        print_json(&serde_json::json!({"redriven": !g.dry_run, "plan": plan, "changed": changed}))?;
    } else if g.dry_run {
        println!("would redrive {group}: {plan:?}");
    } else {
        println!("redrove {group}: {plan:?}, {changed} item(s) back to pending");
    }
    Ok(if g.dry_run || changed > 0 {
        EXIT_CLEAN as u8
    } else {
        EXIT_REFUSED
    })
}
