//! The load run's conservation table is the `meterctl ledger` of the run: the same library
//! (`awsmp_meterctl`) that proves a production hour from CloudTrail proves the run from
//! the simulator's CloudTrail. Every unexplained ledger line, and every group-hour where the
//! accepted column disagrees with the simulator's own ledger, is a violation (docs/meterctl.md).

use crate::conservation::{TableRow, Verdict, Violation};
use anyhow::{Context, Result};
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_local_stack::local::LocalEnv;
use awsmp_meterctl::cloudtrail::CloudTrailMeteringTrail;
use awsmp_meterctl::ledger::{Ledger, LedgerLine};
use awsmp_meterctl::read::{OpsTables, Query, sources};
use awsmp_pipeline::config::Config;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};

fn key(g: &GroupKey) -> String {
    format!(
        "{}|{}|{}|{}",
        g.license_arn, g.customer_aws_account_id, g.dimension, g.hour
    )
}

/// The simulator's clock (the run's pipeline instant) and its billed records of `licenses`
/// (every license with `None`): group-hour `license|customer|dimension|hour` → (quantity,
/// MeteringRecordId). `None` off the local stack.
pub async fn simulator(
    env: &LocalEnv,
    licenses: Option<&BTreeSet<String>>,
) -> Result<Option<(DateTime<Utc>, BTreeMap<String, (u64, String)>)>> {
    let Some(admin) = env.vars.get("AWSMP_SIM_ADMIN_URL") else {
        return Ok(None);
    };
    let http = reqwest::Client::new();
    let clock: serde_json::Value = http
        .get(format!("{admin}/_sim/clock"))
        .send()
        .await?
        .json()
        .await?;
    let now = clock["now"]
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .context("the simulator's clock")?;
    let ledger: serde_json::Value = http
        .get(format!("{admin}/_sim/ledger"))
        .send()
        .await?
        .json()
        .await?;
    let mut billed = BTreeMap::new();
    for r in ledger["records"]
        .as_array()
        .context("the ledger's records")?
    {
        let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
        if licenses.is_some_and(|l| !l.contains(&s("licenseArn"))) {
            continue;
        }
        let k = format!(
            "{}|{}|{}|{}",
            s("licenseArn"),
            s("customerAWSAccountId"),
            s("dimension"),
            s("hour")
        );
        billed.insert(
            k,
            (r["quantity"].as_u64().unwrap_or(0), s("meteringRecordId")),
        );
    }
    Ok(Some((now, billed)))
}

/// The run's ledger, from its tables and the (simulator's) CloudTrail.
pub async fn run_ledger(
    env: &LocalEnv,
    licenses: &BTreeSet<String>,
    started_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Ledger> {
    let config =
        Config::from_lookup(|k| env.vars.get(k).cloned().or_else(|| std::env::var(k).ok()))
            .context("pipeline configuration")?;
    let sdk = env.sdk_config().await;
    let mut ct = aws_sdk_cloudtrail::config::Builder::from(&sdk);
    ct.set_endpoint_url(
        env.vars
            .get("AWS_ENDPOINT_URL_CLOUDTRAIL")
            .filter(|v| !v.is_empty())
            .cloned(),
    );
    let trail = CloudTrailMeteringTrail::new(aws_sdk_cloudtrail::Client::from_conf(ct.build()));
    let tables = OpsTables {
        client: env.dynamodb().await?,
        usage: config.usage_table.clone(),
        aggregated: config.aggregated_table.clone(),
        rejected: env.vars.get("AWSMP_REJECTED_EVENTS_TABLE").cloned(),
        subscribers: config.subscribers_table.clone(),
    };
    let q = Query {
        licenses: licenses.iter().cloned().collect(),
        from: HourBucket::containing(started_at),
        to: HourBucket::containing(now.max(started_at)),
        now,
    };
    let sources = sources(&tables, &trail, &q, &config.time).await?;
    Ok(Ledger::build(&sources, now))
}

fn line_violations(l: &LedgerLine) -> Option<Violation> {
    l.unexplained().then(|| Violation {
        stage: "ledger",
        key: key(&l.group),
        expected: l.intended,
        found: l.accepted,
        detail: l
            .differences
            .iter()
            .filter(|d| !d.explained)
            .map(|d| format!("{} units: {}", d.units, d.detail))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// Compare the ledger's accepted column with the simulator's ledger.
fn disagreements(ledger: &Ledger, billed: &BTreeMap<String, (u64, String)>) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for l in &ledger.lines {
        let k = key(&l.group);
        let sim = billed.get(&k);
        seen.insert(k.clone());
        let ours = (l.accepted > 0)
            .then(|| (l.accepted, l.metering_record_id.clone().unwrap_or_default()));
        if ours.as_ref() != sim {
            out.push(Violation {
                stage: "ledger",
                key: k,
                expected: sim.map_or(0, |s| s.0),
                found: l.accepted,
                detail: format!("CloudTrail shows {ours:?}, the simulator's ledger {sim:?}"),
            });
        }
    }
    for (k, (q, id)) in billed {
        if !seen.contains(k) {
            out.push(Violation {
                stage: "ledger",
                key: k.clone(),
                expected: *q,
                found: 0,
                detail: format!("billed by the simulator ({id}) but absent from the ledger"),
            });
        }
    }
    out
}

/// Build the run's ledger, make it the verdict's table, and add its violations.
pub async fn check_run(
    env: &LocalEnv,
    licenses: &BTreeSet<String>,
    started_at: DateTime<Utc>,
    verdict: &mut Verdict,
) -> Result<()> {
    let sim = simulator(env, Some(licenses)).await?;
    let now = sim.as_ref().map_or_else(Utc::now, |(now, _)| *now);
    let ledger = run_ledger(env, licenses, started_at, now).await?;
    verdict
        .violations
        .extend(ledger.lines.iter().filter_map(line_violations));
    if let Some((_, billed)) = &sim {
        verdict.violations.extend(disagreements(&ledger, billed));
    }
    verdict.table = ledger
        .lines
        .iter()
        .map(|l| TableRow {
            group_hour: key(&l.group),
            accepted: l.intended,
            billed: l.accepted,
            terminal: l.differences.iter().filter(|d| d.units > 0).fold(
                BTreeMap::new(),
                |mut by_reason, d| {
                    *by_reason.entry(d.reason.clone()).or_default() += d.units;
                    by_reason
                },
            ),
        })
        .collect();
    verdict.conserved = verdict.violations.is_empty();
    Ok(())
}
