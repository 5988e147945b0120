//! `meterctl` on the local stack after an all-faults load run: its ledger explains every unit
//! of every group-hour and agrees with the simulator's own ledger; a record changed behind the
//! pipeline's back is reported as unexplained with a non-zero exit; `status` answers for the
//! deprovisioned license in one command; `redrive` refuses what AWS accepted.
//!
//! The stack is the test's own (a temporary state dir), as in `loadtest_conservation.rs`.

use crate::common::{Stack, bin, env_for};
use anyhow::{Context, Result};
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_loadtest::ledger_check;
use awsmp_local_stack::local::LocalEnv;
use std::collections::BTreeMap;
use std::process::{Command, Output};

/// `meterctl` with exactly the stack's env file as its environment.
fn meterctl(env: &LocalEnv, now: &str, args: &[&str]) -> Result<Output> {
    let mut cmd = Command::new(bin("meterctl"));
    cmd.env_clear();
    cmd.envs(&env.vars);
    cmd.args(["--json", "--now", now]).args(args);
    Ok(cmd.output()?)
}

fn json(out: &Output) -> Result<serde_json::Value> {
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "no JSON on stdout; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn line_key(l: &serde_json::Value) -> String {
    let g = &l["group"];
    format!(
        "{}|{}|{}|{}",
        g["licenseArn"].as_str().unwrap_or_default(),
        g["customerAWSAccountId"].as_str().unwrap_or_default(),
        g["dimension"].as_str().unwrap_or_default(),
        g["hourBucket"].as_str().unwrap_or_default()
    )
}

fn load_run(stack: &Stack) -> Result<serde_json::Value> {
    let mut cmd = Command::new(bin("awsmp-loadtest"));
    cmd.args([
        "run",
        "--events",
        "1500",
        "--rate",
        "1500",
        "--groups",
        "20",
        "--faults",
        "all",
        "--deprovision",
        "--json",
        "--seed",
        "11",
    ]);
    env_for(&mut cmd, stack);
    let out = cmd.output()?;
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "load run: no JSON; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
async fn after_an_all_faults_run_the_ledger_explains_everything_and_catches_a_changed_record()
-> Result<()> {
    let stack = Stack::up()?;

    // GIVEN an all-faults load run whose verdict (its table the run's ledger) conserved
    let run = load_run(&stack)?;
    assert_eq!(run["conserved"], true, "{}", run["violations"]);
    let env = LocalEnv::read(&stack.0.path().join("env"))?;
    assert!(
        env.get("AWS_ENDPOINT_URL_CLOUDTRAIL").is_ok(),
        "the env file names CloudTrail"
    );
    let (now, billed) = ledger_check::simulator(&env, None)
        .await?
        .context("the simulator's ledger")?;
    let now = now.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    assert!(!billed.is_empty());
    let mut hours: Vec<&str> = billed
        .keys()
        .map(|k| k.rsplit('|').next().unwrap())
        .collect();
    hours.sort();
    let (from, to) = (hours[0].to_owned(), hours[hours.len() - 1].to_owned());
    let licenses: std::collections::BTreeSet<&str> = billed
        .keys()
        .map(|k| k.split('|').next().unwrap())
        .collect();
    let mut args = vec!["ledger", "--from", &from, "--to", &to];
    for l in &licenses {
        args.extend(["--license", l]);
    }

    let args: Vec<&str> = args.iter().map(|a| &**a).collect();
    the_ledger_agrees_with_the_simulator(&env, &now, &args, &billed)?;
    a_changed_record_is_unexplained(&env, &now, &args, &billed, (&from, &to)).await?;
    status_of_the_deprovisioned_license(&env, &now).await
}

/// `meterctl ledger` through the unmodified CloudTrail client: nothing unexplained, and the
/// accepted column is the simulator's ledger.
fn the_ledger_agrees_with_the_simulator(
    env: &LocalEnv,
    now: &str,
    args: &[&str],
    billed: &BTreeMap<String, (u64, String)>,
) -> Result<()> {
    // WHEN meterctl reads the ledger through the unmodified CloudTrail client
    let out = meterctl(env, now, args)?;
    let ledger = json(&out)?;
    // THEN nothing is unexplained and every accepted line is the simulator's record
    assert_eq!(out.status.code(), Some(0), "{}", ledger["totals"]);
    assert_eq!(ledger["totals"]["unexplainedLines"], 0);
    let lines = ledger["lines"].as_array().context("lines")?;
    let accepted: BTreeMap<String, (u64, String)> = lines
        .iter()
        .filter(|l| l["accepted"].as_u64() > Some(0))
        .map(|l| {
            (
                line_key(l),
                (
                    l["accepted"].as_u64().unwrap(),
                    l["meteringRecordId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                ),
            )
        })
        .collect();
    assert_eq!(
        &accepted, billed,
        "meterctl's accepted column is the simulator's ledger"
    );

    Ok(())
}

/// A billed record changed behind the pipeline's back: unexplained, exit 1; `verify` finds
/// it; a re-drive of the billed hour is refused.
async fn a_changed_record_is_unexplained(
    env: &LocalEnv,
    now: &str,
    args: &[&str],
    billed: &BTreeMap<String, (u64, String)>,
    (from, to): (&str, &str),
) -> Result<()> {
    // WHEN a billed record is changed behind the pipeline's back
    let (victim, _) = billed.iter().next().unwrap();
    let parts: Vec<&str> = victim.split('|').collect();
    env.dynamodb()
        .await?
        .update_item()
        .table_name(env.get("AWSMP_AGGREGATED_USAGE_TABLE")?)
        .key("licenseArn", Av::S(parts[0].into()))
        .key(
            "account_dimension_hour",
            Av::S(format!("{}#{}#{}", parts[1], parts[2], parts[3])),
        )
        .update_expression("SET quantity = quantity + :five")
        .expression_attribute_values(":five", Av::N("5".into()))
        .send()
        .await?;
    let out = meterctl(env, now, args)?;
    let tampered = json(&out)?;
    // THEN that hour is unexplained and the exit is non-zero
    assert_eq!(out.status.code(), Some(1));
    let bad: Vec<String> = tampered["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["differences"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["explained"] == false)
        })
        .map(line_key)
        .collect();
    assert_eq!(bad, vec![victim.clone()]);
    let out = meterctl(
        env,
        now,
        &["verify", "--from", from, "--to", to, "--license", parts[0]],
    )?;
    assert_eq!(
        out.status.code(),
        Some(1),
        "verify finds the changed quantity; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // AND a re-drive of a billed hour is refused
    let out = meterctl(
        env,
        now,
        &[
            "redrive",
            "--license",
            parts[0],
            "--account",
            parts[1],
            "--dimension",
            parts[2],
            "--hour",
            parts[3],
        ],
    )?;
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(json(&out)?["refusal"]["refusal"], "acceptedByAws");

    Ok(())
}

/// The run deprovisioned its first license: one `status` call answers for it, with each
/// group-hour's record. Still in its flush window, the answer says so and what happens next;
/// once deprovision-cleanup has finalized it (`inactive`, flag and expiry removed), every
/// group-hour it had is on record.
async fn status_of_the_deprovisioned_license(env: &LocalEnv, now: &str) -> Result<()> {
    let subscribers = env
        .dynamodb()
        .await?
        .scan()
        .table_name(env.get("AWSMP_SUBSCRIBERS_TABLE")?)
        .send()
        .await?;
    let s = |i: &std::collections::HashMap<String, Av>, k: &str| {
        i.get(k).and_then(|v| v.as_s().ok()).cloned()
    };
    let pending = subscribers
        .items()
        .iter()
        .find(|i| i.contains_key("deprovisioningPendingFlag"));
    let item = pending
        .or_else(|| {
            subscribers
                .items()
                .iter()
                .find(|i| s(i, "subscriptionStatus").as_deref() == Some("inactive"))
        })
        .context("a deprovisioned license")?;
    let license = s(item, "licenseArn").context("licenseArn")?;
    let out = meterctl(env, now, &["status", "--license", &license])?;
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out)?;
    // THEN the one answer names where the license stands, with its times
    let entry = &v["subscription"][0];
    let state = entry["state"].as_str().context("subscription state")?;
    let summary = entry["summary"].as_str().context("summary")?;
    if pending.is_some() {
        assert!(
            ["inFlushWindow", "windowClosed"].contains(&state),
            "{entry}"
        );
        assert!(summary.contains("deprovision"), "{summary}");
    } else {
        assert_eq!(state, "inactive", "{entry}");
        assert!(
            summary.contains("is inactive") && summary.contains("finalized"),
            "{summary}"
        );
    }
    let hours = v["groupHours"].as_array().context("groupHours")?;
    assert!(!hours.is_empty());
    for h in hours {
        assert!(h["record"]["status"].is_string(), "{h}");
        if pending.is_some() {
            assert!(v["deprovisioning"].is_string(), "{v}");
            assert!(
                h["next"].as_str().unwrap().contains("deprovisioning"),
                "{h}"
            );
        }
    }
    Ok(())
}
