//! The demo's path (`scripts/demo`), CI-sized: a load run with every Lambda as its built binary
//! in its own process under the Lambda Runtime API (`--lambdas host`), every fault class on,
//! must conserve every unit strictly, say in its report that the binaries ran, and the binaries
//! must have run on the run's virtual clock (libfaketime): every aggregate they wrote is stamped
//! hours ahead of the real clock, after the hour it meters closed.
//!
//! It starts a stack of its own (a load run loads a catalog of its own into the simulator).

use crate::loadtest_conservation::{Stack, bin, env_for, local};
use anyhow::Result;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use std::process::Command;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "starts its own emulators and runs the built Lambda binaries under libfaketime; run by scripts/test"]
async fn every_lambda_a_process_on_the_virtual_clock_conserves_under_every_fault_class()
-> Result<()> {
    let stack = Stack(tempfile::tempdir()?);
    anyhow::ensure!(
        local(&stack, &["up", "--ephemeral"]).status()?.success(),
        "awsmp-local up"
    );
    let report = stack.0.path().join("report");
    let mut cmd = Command::new(bin("awsmp-loadtest"));
    cmd.args([
        "run",
        "--lambdas",
        "host",
        "--events",
        "2000",
        "--rate",
        "1000",
        "--groups",
        "30",
        "--faults",
        "all",
        "--seed",
        "3",
        "--json",
        "--report",
    ])
    .arg(&report);
    env_for(&mut cmd, &stack);
    let out = cmd.output()?;
    let stdout = String::from_utf8(out.stdout)?;
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| {
        anyhow::anyhow!(
            "no JSON on stdout ({e}); stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    assert_eq!(
        v["conserved"], true,
        "{}\nfunnel: {}",
        v["violations"], v["funnel"]
    );
    assert!(out.status.success(), "exit {:?}", out.status);
    assert_eq!(
        v["lambdas"], "lambda runtime: built binaries, one process each",
        "the report says the binaries ran"
    );
    let processes = v["settings"]["lambdaProcesses"]
        .as_str()
        .unwrap_or_default();
    for f in [
        "kinesis-consumer",
        "stream-heartbeat",
        "discoverer",
        "aggregator",
        "cleanup",
        "submitter",
        "expiry",
        "subscription",
        "deprovision-cleanup",
    ] {
        assert!(processes.contains(f), "{f} ran as a process: {processes}");
    }
    assert!(
        v["settings"]["faultsUnderHost"].is_string(),
        "the report says how each fault class ran under the host"
    );
    let faults = v["faults"].as_object().expect("faults");
    assert!(
        faults.keys().any(|k| k.starts_with("marketplace:")) && faults.contains_key("badInputs"),
        "faults were injected: {faults:?}"
    );
    let html = std::fs::read_to_string(report.join("report.html"))?;
    assert!(html.contains("lambda runtime: built binaries, one process each"));
    assert_aggregates_stamped_on_the_virtual_clock(&stack).await
}

/// Every aggregate the aggregator's process wrote carries its clock's instant (`createdAt`):
/// the virtual one, hours ahead of the real clock, and after its hour ended.
async fn assert_aggregates_stamped_on_the_virtual_clock(stack: &Stack) -> Result<()> {
    let local = awsmp_loadtest::local::LocalEnv::read(&stack.0.path().join("env"))?;
    let ddb = local.dynamodb().await?;
    let items = ddb
        .scan()
        .table_name(local.get("AWSMP_AGGREGATED_USAGE_TABLE")?)
        .send()
        .await?
        .items
        .unwrap_or_default();
    assert!(!items.is_empty(), "the run aggregated");
    let now = Utc::now();
    for item in &items {
        let s = |k: &str| {
            item.get(k)
                .and_then(|v| AttributeValue::as_s(v).ok())
                .cloned()
        };
        let created = s("createdAt").expect("createdAt");
        let created: DateTime<Utc> = DateTime::parse_from_rfc3339(&created)?.into();
        let hour = s("hourBucket").expect("hourBucket");
        let hour_end =
            DateTime::parse_from_rfc3339(&format!("{hour}:00:00Z"))? + chrono::Duration::hours(1);
        assert!(
            created > now && created > hour_end,
            "aggregate of {hour} stamped {created}, the real clock now {now}: {item:?}"
        );
    }
    Ok(())
}
