//! `awsmp-local up` is idempotent, `down` leaves no process and no listening port behind, and
//! `down --wipe` leaves no state behind: the next `up` + `tick` starts clean, and checkpoints
//! of a stream that no longer exists are reset with a warning, never a crash.

use anyhow::Result;
use awsmp_local_stack::local::procs::{ServiceState, is_alive, is_listening};
use std::path::{Path, PathBuf};
use std::process::Command;

fn local_bin() -> PathBuf {
    std::env::var_os("AWSMP_LOCAL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| awsmp_local_stack::local::sibling_binary("awsmp-local").unwrap())
}

fn run(dir: &Path, args: &[&str]) -> Result<String> {
    Ok(run_bin(local_bin(), dir, args)?.0)
}

/// Run `bin` on the stack in `dir` (and only that stack: no suite endpoints from the
/// environment); its stdout and stderr.
fn run_bin(bin: PathBuf, dir: &Path, args: &[&str]) -> Result<(String, String)> {
    let mut cmd = Command::new(&bin);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args).env("AWSMP_LOCAL_DIR", dir);
    // Reuse the emulators scripts/test installed, if any.
    if let Some(tools) = std::env::var_os("AWSMP_LOCAL_TOOLS_DIR") {
        cmd.env("AWSMP_LOCAL_TOOLS_DIR", tools);
    }
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} {args:?} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((
        String::from_utf8(out.stdout)?,
        String::from_utf8(out.stderr)?,
    ))
}

/// `awsmp-local tick`: its JSON report and stderr.
fn tick(dir: &Path) -> Result<(serde_json::Value, String)> {
    let (stdout, stderr) = run_bin(local_bin(), dir, &["tick"])?;
    Ok((serde_json::from_str(&stdout)?, stderr))
}

/// `awsmp-loadtest produce` into the stack's usage stream (the default stream).
fn produce(dir: &Path, events: &str) -> Result<serde_json::Value> {
    let bin = awsmp_local_stack::local::sibling_binary("awsmp-loadtest")?;
    let args = [
        "produce", "--events", events, "--rate", "2000", "--groups", "6", "--json",
    ];
    Ok(serde_json::from_str(&run_bin(bin, dir, &args)?.0)?)
}

fn services(dir: &Path) -> Result<Vec<ServiceState>> {
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("state.json"))?)?;
    Ok(serde_json::from_value(state["services"].clone())?)
}

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn up_twice_changes_nothing_and_down_leaves_nothing_behind() -> Result<()> {
    let dir = tempfile::tempdir()?;
    run(dir.path(), &["up", "--ephemeral"])?;
    let env1 = std::fs::read_to_string(dir.path().join("env"))?;
    let procs1 = services(dir.path())?;
    assert_eq!(procs1.len(), 4);
    for s in &procs1 {
        assert!(
            is_alive(s) && is_listening(s.port),
            "{} runs and listens",
            s.name
        );
    }
    for key in [
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL_KINESIS",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_MARKETPLACE_METERING",
        "AWSMP_SIM_ADMIN_URL",
        "AWSMP_USAGE_TABLE",
        "AWSMP_WORK_QUEUE_URL",
        "AWSMP_USAGE_STREAM",
    ] {
        assert!(
            env1.lines()
                .any(|l| l.starts_with(&format!("{key}=http://127.0.0.1:"))
                    || l.starts_with(&format!("{key}=awsmp-"))),
            "{key} in env:\n{env1}"
        );
    }

    run(dir.path(), &["up", "--ephemeral"])?;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("env"))?,
        env1,
        "second up rewrote nothing"
    );
    assert_eq!(services(dir.path())?, procs1, "second up started nothing");

    let status = run(dir.path(), &["status"])?;
    assert_eq!(status.matches("running").count(), 4, "{status}");

    run(dir.path(), &["down", "--wipe"])?;
    for s in &procs1 {
        assert!(!is_alive(s), "{} (pid {}) stopped", s.name, s.pid);
        assert!(!is_listening(s.port), "{} port {} closed", s.name, s.port);
        assert!(!Path::new(&format!("/proc/{}", s.pid)).exists() || !is_alive(s));
    }
    assert!(!dir.path().join("env").exists());
    assert!(!dir.path().join("state.json").exists());
    Ok(())
}

#[test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
fn down_wipe_leaves_no_state_and_stale_checkpoints_are_reset_with_a_warning() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let _stack = Wiped(dir.path().to_owned());
    let checkpoints = dir.path().join("esm-checkpoints.json");

    // GIVEN events produced into the usage stream and consumed by a tick (checkpoints written)
    run(dir.path(), &["up", "--ephemeral"])?;
    let produced = produce(dir.path(), "300")?;
    assert_eq!(produced["conserved"], true, "{}", produced["violations"]);
    assert!(
        produced["settings"]["stream"]
            .as_str()
            .unwrap()
            .contains("left in place"),
        "{}",
        produced["settings"]
    );
    let (first, _) = tick(dir.path())?;
    assert!(
        first["consumer"]["recordsDone"].as_u64().unwrap() > 0,
        "the tick consumed what produce left in the stream: {}",
        first["consumer"]
    );
    assert!(checkpoints.exists());

    // WHEN the stack restarts without a wipe (the ephemeral stream is created again)
    run(dir.path(), &["down"])?;
    run(dir.path(), &["up", "--ephemeral"])?;
    produce(dir.path(), "100")?;
    let (after_restart, stderr) = tick(dir.path())?;
    // THEN the old stream's checkpoints are reset with a warning and the new stream is read
    let resets = after_restart["consumer"]["checkpointsReset"]
        .as_array()
        .unwrap();
    assert_eq!(resets.len(), 1, "{resets:?}");
    assert!(resets[0].as_str().unwrap().contains("not on this stream"));
    assert!(
        stderr.contains("WARN") && stderr.contains("resetting"),
        "{stderr}"
    );
    assert!(after_restart["consumer"]["recordsDone"].as_u64().unwrap() > 0);

    // WHEN the stack is wiped and started again
    run(dir.path(), &["down", "--wipe"])?;
    assert!(!checkpoints.exists(), "down --wipe removes the checkpoints");
    assert!(
        !dir.path().join("loadtest").exists(),
        "and the load runs' state"
    );
    assert!(!dir.path().join("data").exists() && !dir.path().join("logs").exists());
    run(dir.path(), &["up", "--ephemeral"])?;
    // THEN a tick starts clean
    let (clean, _) = tick(dir.path())?;
    assert_eq!(clean["consumer"]["checkpointsReset"], serde_json::json!([]));

    // AND a checkpoint the stream refuses (a sequence number it never issued) is reset too
    let shard = clean["consumer"]["shards"].as_u64().unwrap();
    assert!(shard > 0);
    std::fs::write(
        &checkpoints,
        r#"{"shards": {"shardId-000000000000": "49000000000000000000000000000000000000000000000000000001"}}"#,
    )?;
    produce(dir.path(), "100")?;
    let (refused, stderr) = tick(dir.path())?;
    let resets = refused["consumer"]["checkpointsReset"].as_array().unwrap();
    assert_eq!(resets.len(), 1, "{resets:?}");
    assert!(
        resets[0]
            .as_str()
            .unwrap()
            .starts_with("shardId-000000000000: ")
    );
    assert!(stderr.contains("resetting"), "{stderr}");
    assert!(refused["consumer"]["recordsDone"].as_u64().unwrap() > 0);
    Ok(())
}

/// Stops the test's stack even when the test fails.
struct Wiped(PathBuf);

impl Drop for Wiped {
    fn drop(&mut self) {
        let _ = run(&self.0, &["down", "--wipe"]);
    }
}
