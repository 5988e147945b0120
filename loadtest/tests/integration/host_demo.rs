//! The demo's path (`scripts/demo`), CI-sized: a load run with every Lambda as its built binary
//! in its own process under the Lambda Runtime API (`--lambdas host`), every fault class on,
//! must conserve every unit strictly, say in its report that the binaries ran, and the binaries
//! must have run on the run's virtual clock (libfaketime): every aggregate they wrote is stamped
//! hours ahead of the real clock, after the hour it meters closed.
//!
//! It starts a stack of its own (a load run loads a catalog of its own into the simulator).

use crate::common::run_conserving;
use crate::common::{Stack, bin, env_for};
use anyhow::Result;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use std::process::Command;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "starts its own emulators and runs the built Lambda binaries under libfaketime; run by scripts/test"]
async fn every_lambda_a_process_on_the_virtual_clock_conserves_under_every_fault_class()
-> Result<()> {
    let stack = Stack::up()?;
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
    let v = run_conserving(&mut cmd, "host run")?.v;
    assert_eq!(
        v["lambdas"], "lambda runtime: built binaries, one process each",
        "the report says the binaries ran"
    );
    assert_every_function_invoked(&v);
    assert_ingest_sent_and_counted(&v);
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
    let count = format!(
        "Functions under the host ({})",
        awsmp_contract::stages::all().len()
    );
    assert!(html.contains(&count) && html.contains("meter-ingest"));
    assert_customers_registered(&stack, &v).await?;
    assert_aggregates_stamped_on_the_virtual_clock(&stack).await
}

/// The report lists exactly the functions of `infra/stages.json`, each a process of the run and
/// invoked at least once.
fn assert_every_function_invoked(v: &serde_json::Value) {
    let listed: Vec<&str> = awsmp_contract::stages::all()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let functions = v["functions"].as_array().expect("functions");
    let mut names: Vec<&str> = functions
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    let mut expected = listed.clone();
    expected.sort_unstable();
    assert_eq!(names, expected, "the functions under the host");
    for f in functions {
        assert!(
            f["invocations"].as_u64().unwrap() > 0 && f["processes"].as_u64().unwrap() > 0,
            "{} ran and was invoked: {f}",
            f["name"]
        );
    }
    let processes = v["settings"]["lambdaProcesses"]
        .as_str()
        .unwrap_or_default();
    for f in listed {
        assert!(processes.contains(f), "{f} ran as a process: {processes}");
    }
}

/// Usage went through meter-ingest (async invokes as the module's alias, its first attempts
/// crashed now and then and retried), all of it accepted but the bad inputs sent on purpose,
/// and is part of what conservation counted as produced (and so, the run conserving, billed).
fn assert_ingest_sent_and_counted(v: &serde_json::Value) {
    let ingest = &v["ingest"];
    let units = ingest["units"].as_u64().expect("ingest units");
    assert!(
        units > 0 && ingest["invokes"].as_u64().unwrap() > 0,
        "{ingest}"
    );
    assert!(
        ingest["invokedArn"]
            .as_str()
            .unwrap()
            .contains(":function:meter-ingest:loadtest-"),
        "invoked as the module's alias: {ingest}"
    );
    // Only the two bad invokes sent on purpose were refused, each with its declared reason; the
    // malformed one's retries ran out and it went to the on-failure destination.
    assert_eq!(ingest["refusedUnits"], ingest["injectedUnits"], "{ingest}");
    let injected: u64 = ingest["injectedUnits"]
        .as_object()
        .unwrap()
        .values()
        .map(|q| q.as_u64().unwrap())
        .sum();
    assert_eq!(injected, 5, "{ingest}");
    assert_eq!(
        ingest["acceptedUnits"].as_u64().unwrap() + injected,
        units,
        "every other unit accepted: {ingest}"
    );
    assert_eq!(ingest["onFailure"], 1, "{ingest}");
    assert!(
        ingest["retries"].as_u64().unwrap() >= 2,
        "Lambda's two retries of the malformed invoke: {ingest}"
    );
    let funnel = &v["funnel"];
    assert!(
        funnel["produced"].as_u64().unwrap() > units,
        "the producers' units and meter-ingest's: {funnel}"
    );
    assert_eq!(funnel["produced"], funnel["billed"], "{funnel}");
}

/// The register binary wrote a subscribers row of every customer the run metered, through
/// the simulator's `ResolveCustomer` (its `registeredRegions`).
async fn assert_customers_registered(stack: &Stack, v: &serde_json::Value) -> Result<()> {
    let local = awsmp_local_stack::local::LocalEnv::read(&stack.0.path().join("env"))?;
    let rows = local
        .dynamodb()
        .await?
        .scan()
        .table_name(local.get("AWSMP_SUBSCRIBERS_TABLE")?)
        .send()
        .await?
        .items
        .unwrap_or_default();
    let registered: std::collections::BTreeSet<String> = rows
        .iter()
        .filter(|r| r.contains_key("registeredRegions"))
        .filter_map(|r| r.get("licenseArn")?.as_s().ok().cloned())
        .collect();
    let metered: std::collections::BTreeSet<String> = v["conservation"]["table"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            r["groupHour"]
                .as_str()?
                .split('|')
                .next()
                .map(str::to_owned)
        })
        .collect();
    assert!(!metered.is_empty());
    for l in &metered {
        assert!(registered.contains(l), "{l} metered but never registered");
    }
    Ok(())
}

/// Every aggregate the aggregator's process wrote carries its clock's instant (`createdAt`):
/// the virtual one, hours ahead of the real clock, and after its hour ended.
async fn assert_aggregates_stamped_on_the_virtual_clock(stack: &Stack) -> Result<()> {
    let local = awsmp_local_stack::local::LocalEnv::read(&stack.0.path().join("env"))?;
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
