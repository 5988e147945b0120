//! `awsmp-local up` is idempotent and `down` leaves no process and no listening port behind.

use anyhow::Result;
use awsmp_loadtest::local::procs::{ServiceState, is_alive, is_listening};
use std::path::{Path, PathBuf};
use std::process::Command;

fn local_bin() -> PathBuf {
    std::env::var_os("AWSMP_LOCAL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| awsmp_loadtest::local::sibling_binary("awsmp-local").unwrap())
}

fn run(dir: &Path, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(local_bin());
    cmd.args(args).env("AWSMP_LOCAL_DIR", dir);
    // Reuse the emulators scripts/test installed, if any.
    if let Some(tools) = std::env::var_os("AWSMP_LOCAL_TOOLS_DIR") {
        cmd.env("AWSMP_LOCAL_TOOLS_DIR", tools);
    }
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "awsmp-local {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
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
