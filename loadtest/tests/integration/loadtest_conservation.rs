//! A CI-sized load run with every fault class on, over several seeds: the whole path
//! (producer → Kinesis → consumer → pipeline → simulator), its stages overlapping as in AWS,
//! must conserve every unit strictly: billed = produced for every group-hour of valid events.
//!
//! Each run gets a stack of its own (a temporary state dir), because a load run loads a
//! catalog of its own into the simulator.

use crate::common::{RunJson, Stack, bin, env_for, local, run_conserving, run_json};
use anyhow::Result;
use std::process::Command;

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn every_fault_class_on_conserves_exactly_over_two_seeds_run_one_after_the_other_on_one_stack()
-> Result<()> {
    every_fault_class_on_conserves_exactly(&[1, 2])
}

/// A third seed on a stack of its own, so it runs beside the two above (each run mostly waits
/// on the emulators).
#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn every_fault_class_on_conserves_exactly_with_a_third_seed() -> Result<()> {
    every_fault_class_on_conserves_exactly(&[3])
}

/// Load runs with every fault class on, one per seed, one after the other on one stack.
fn every_fault_class_on_conserves_exactly(seeds: &[u64]) -> Result<()> {
    let stack = Stack::up()?;
    // A shell that sourced the env file before the runs must still reach every service after
    // them (a run loads its own catalog: the simulator restarts, on the same port).
    let env_file = stack.0.path().join("env");
    let env_before = std::fs::read_to_string(&env_file)?;
    for &seed in seeds {
        let report = stack.0.path().join(format!("report-{seed}"));
        let mut cmd = Command::new(bin("awsmp-loadtest"));
        cmd.args([
            "run",
            "--events",
            "4000",
            "--rate",
            "2000",
            "--groups",
            "60",
            "--faults",
            "all",
            "--parallelization-factor",
            "2",
            "--json",
            "--seed",
        ])
        .arg(seed.to_string())
        .arg("--report")
        .arg(&report);
        env_for(&mut cmd, &stack);
        let RunJson { v, stdout, .. } = run_conserving(&mut cmd, &format!("seed {seed}"))?;
        assert_funnel_closed(&v, seed);
        assert!(
            stdout.trim_start().starts_with("{\"conserved\":")
                && stdout.find("\"funnel\"") < stdout.find("\"violations\""),
            "seed {seed}: the JSON leads with the verdict and the funnel"
        );
        assert!(
            v["settings"]["stages"]
                .as_str()
                .unwrap()
                .starts_with("overlapping"),
            "seed {seed}: the consumer and the pipeline ran concurrently"
        );
        assert!(
            v["settings"]["liveTicks"]
                .as_str()
                .unwrap()
                .parse::<u64>()?
                > 0,
            "seed {seed}: the pipeline ticked while the consumer consumed"
        );
        assert_accepted_billed_and_faulted(&v, seed);
        assert_bad_inputs_ended_as_declared(&v, seed);
        let html = std::fs::read_to_string(report.join("report.html"))?;
        assert!(
            html.contains("<svg") && html.contains("Conserved"),
            "seed {seed}: report written"
        );
    }
    assert_services_unmoved(&std::fs::read_to_string(&env_file)?, &env_before);
    Ok(())
}

/// A load run loads a catalog of its own (and so a product code), but every service stays where
/// the env file written before it says.
fn assert_services_unmoved(after: &str, before: &str) {
    let services = |env: &str| -> Vec<String> {
        env.lines()
            .filter(|l| l.contains("=http://"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        services(after),
        services(before),
        "the load runs moved a service the env file names"
    );
    for line in before.lines() {
        if let Some((_, url)) = line.split_once("=http://") {
            let url = url.trim_matches(|c| c == '"' || c == '\'');
            let addr = url.split('/').next().unwrap_or(url);
            assert!(
                std::net::TcpStream::connect(addr).is_ok(),
                "{line}: unreachable after the load runs"
            );
        }
    }
}

/// Nothing rejected in the workload, every accepted unit billed once, and the faults happened.
fn assert_accepted_billed_and_faulted(v: &serde_json::Value, seed: u64) {
    let c = &v["conservation"];
    assert!(c["produced"].as_u64().unwrap() > 0);
    assert_eq!(
        c["produced"], c["accepted"],
        "seed {seed}: nothing rejected in this workload"
    );
    assert_eq!(
        c["accepted"], c["billed"],
        "seed {seed}: every accepted unit billed exactly once"
    );
    // The faults really happened.
    let faults = v["faults"].as_object().unwrap();
    for class in ["producer:responsesLost", "marketplace:throttled"] {
        assert!(
            faults.get(class).and_then(|n| n.as_u64()).unwrap_or(0) > 0,
            "seed {seed}: {class} injected: {faults:?}"
        );
    }
}

/// An all-faults run injects every kind of bad input, and each ended with its reason.
fn assert_bad_inputs_ended_as_declared(v: &serde_json::Value, seed: u64) {
    let injected = v["funnel"]["injected"].as_array().unwrap();
    let reasons: Vec<&str> = injected
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    for reason in [
        "consumer:InvalidJson",
        "consumer:UnknownVersion",
        "consumer:NegativeQuantity",
        "consumer:DedupHit",
        "pipeline:record:Error",
        "pipeline:row:RejectedClientSide:InvalidTagCharacters",
    ] {
        assert!(
            reasons.contains(&reason),
            "seed {seed}: {reason} injected: {injected:?}"
        );
    }
    for e in injected {
        assert!(e["injected"].as_u64().unwrap() > 0, "seed {seed}: {e}");
        assert_eq!(e["injected"], e["found"], "seed {seed}: {e}");
    }
}

/// The funnel loses nothing: produced = accepted = rows = aggregated =
/// billed, and no unit left it.
fn assert_funnel_closed(v: &serde_json::Value, seed: u64) {
    let f = &v["funnel"];
    for stage in ["accepted", "rows", "aggregated", "billed"] {
        assert_eq!(f["produced"], f[stage], "seed {seed}: {stage}: {f}");
    }
    assert_eq!(f["exits"], serde_json::json!([]), "seed {seed}: {f}");
}

/// Seconds from now until `lock_hours` after the end of the current hour, plus ten minutes:
/// a pipeline clock this far ahead sees the hour the run produces into as closed and locked.
fn lag_past_the_hour(lock_hours: i64) -> i64 {
    use chrono::{Timelike, Utc};
    let now = Utc::now();
    let into_hour = i64::from(now.minute()) * 60 + i64::from(now.second());
    3600 - into_hour + lock_hours * 3600 + 600
}

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn overlapping_stages_with_consumer_lag_across_an_hour_and_a_deprovisioning_flush_conserve()
-> Result<()> {
    let stack = Stack::up()?;
    // GIVEN a pipeline clock past the end (and lock) of the hour being produced, a license in
    // its deprovisioning flush window, two batches in flight per shard, and every fault on
    let lag = lag_past_the_hour(1).to_string();
    let mut cmd = Command::new(bin("awsmp-loadtest"));
    cmd.args([
        "run",
        "--events",
        "4000",
        "--rate",
        "1000",
        "--groups",
        "40",
        "--faults",
        "all",
        "--json",
        "--seed",
        "7",
        "--deprovision",
        "--parallelization-factor",
        "2",
    ])
    .args(["--consumer-lag", &lag]);
    env_for(&mut cmd, &stack);
    // WHEN the stages overlap
    let v = run_json(&mut cmd, "seed 7")?.v;
    // THEN every unit is billed exactly once all the same
    assert_eq!(
        v["conserved"], true,
        "{}\nfunnel: {}",
        v["violations"], v["funnel"]
    );
    assert_funnel_closed(&v, 7);
    // AND it was the ingest fence that held the closed hours while their usage was arriving
    let fenced: u64 = v["settings"]["liveBucketsFenced"]
        .as_str()
        .unwrap()
        .parse()?;
    assert!(fenced > 0, "the fence held hours back: {}", v["settings"]);
    Ok(())
}

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn sequential_stages_still_conserve() -> Result<()> {
    let stack = Stack::up()?;
    let mut cmd = Command::new(bin("awsmp-loadtest"));
    cmd.args([
        "run",
        "--events",
        "2000",
        "--rate",
        "2000",
        "--groups",
        "30",
        "--json",
        "--sequential",
    ]);
    env_for(&mut cmd, &stack);
    let v = run_json(&mut cmd, "sequential")?.v;
    assert_eq!(v["conserved"], true, "{}", v["violations"]);
    assert_eq!(v["settings"]["stages"], "sequential");
    assert_funnel_closed(&v, 1);
    Ok(())
}

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn produce_only_delivers_every_event() -> Result<()> {
    let stack = Stack::up()?;
    let mut cmd = Command::new(bin("awsmp-loadtest"));
    cmd.args([
        "produce",
        "--events",
        "5000",
        "--rate",
        "5000",
        "--faults",
        "throttling,partial-put-records,lost-responses",
        "--json",
    ]);
    env_for(&mut cmd, &stack);
    let RunJson { v, success, .. } = run_json(&mut cmd, "produce")?;
    assert!(success);
    assert_eq!(v["conserved"], true, "{}", v["violations"]);
    assert_eq!(v["mode"], "produce");
    assert_eq!(
        v["timeline"].as_array().unwrap().last().unwrap()["acked"],
        5000
    );
    Ok(())
}

/// Kills the background `awsmp-local run` even when the test fails.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn against_a_deployment_named_by_the_environment() -> Result<()> {
    // The local stack plays the deployment: `awsmp-local run` is its consumer and schedules
    // (on a clock 120× real time), and the load test only sees what the environment names.
    let stack = Stack::up()?;
    let env = awsmp_local_stack::local::LocalEnv::read(&stack.0.path().join("env"))?;
    let licenses = stack.0.path().join("licenses.csv");
    let lines: Vec<String> = (150..160)
        .map(|i| {
            format!(
                "{},{}",
                awsmp_local_stack::local::demo_license_arn(i),
                awsmp_local_stack::local::demo_account(i)
            )
        })
        .collect();
    std::fs::write(&licenses, lines.join("\n"))?;
    let mut deployment = local(&stack, &["run", "--speed", "120", "--every", "300"]);
    deployment
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _deployment = Background(deployment.spawn()?);

    let mut cmd = Command::new(bin("awsmp-loadtest"));
    cmd.args([
        "run",
        "--target",
        "deployment",
        "--dimension-names",
        "api_calls,storage_gb_hours",
        "--groups",
        "20",
    ])
    .args([
        "--events",
        "2000",
        "--rate",
        "1000",
        "--faults",
        "throttling,lost-responses",
        "--json",
        "--timeout",
        "300",
    ])
    .arg("--licenses")
    .arg(&licenses);
    env_for(&mut cmd, &stack);
    // A deployment is named by the environment, not by a state dir.
    cmd.env_remove("AWSMP_LOCAL_DIR").envs(&env.vars);
    let v = run_json(&mut cmd, "deployment")?.v;
    assert_eq!(v["conserved"], true, "{}", v["violations"]);
    let c = &v["conservation"];
    assert!(c["produced"].as_u64().unwrap() > 0);
    assert_eq!(
        c["produced"], c["billed"],
        "every unit billed through the deployment's own pipeline"
    );
    assert!(
        v["settings"]["target"]
            .as_str()
            .unwrap()
            .starts_with("deployment")
    );
    Ok(())
}

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn produce_into_a_named_stream_leaves_it_and_every_event_in_it() -> Result<()> {
    use awsmp_local_stack::kinesis_esm::{EsmOptions, KinesisEsm};
    let stack = Stack::up()?;
    let env = awsmp_local_stack::local::LocalEnv::read(&stack.0.path().join("env"))?;
    let rt = tokio::runtime::Runtime::new()?;
    let name = "awsmp-loadtest-named";
    // GIVEN an existing stream of someone else's
    rt.block_on(async {
        let kinesis = env.kinesis().await?;
        kinesis
            .create_stream()
            .stream_name(name)
            .shard_count(1)
            .send()
            .await?;
        anyhow::Ok(())
    })?;
    // WHEN the load test produces into it
    let mut cmd = Command::new(bin("awsmp-loadtest"));
    cmd.args(["produce", "--events", "1500", "--rate", "3000", "--json"])
        .args(["--stream", name]);
    env_for(&mut cmd, &stack);
    let RunJson { v, success, .. } = run_json(&mut cmd, "produce")?;
    assert!(success);
    assert_eq!(v["conserved"], true, "{}", v["violations"]);
    assert!(v["settings"]["stream"].as_str().unwrap().starts_with(name));
    // THEN the stream is still there, holding every event produced
    let events = rt.block_on(async {
        let checkpoints = stack.0.path().join("named-esm.json");
        let mut esm = KinesisEsm::new(
            env.kinesis().await?,
            name,
            EsmOptions::default(),
            checkpoints,
        )
        .await?;
        let mut events = 0;
        esm.drain(|e: aws_lambda_events::kinesis::KinesisEvent| {
            for r in &e.records {
                // Events, not user records: a v2 aggregate also carries its group table.
                events += awsmp_contract::wire::decode_events(&r.kinesis.data.0)
                    .map_or(0, |u| u.iter().filter(|u| u.event.is_ok()).count());
            }
            async {
                Ok::<_, std::convert::Infallible>(
                    aws_lambda_events::event::streams::KinesisEventResponse::default(),
                )
            }
        })
        .await?;
        anyhow::Ok(events)
    })?;
    assert_eq!(events, 1500, "every event is in the named stream");
    Ok(())
}
