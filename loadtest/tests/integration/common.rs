//! Running `awsmp-loadtest ... --json` as a test does: the verdict read from stdout, an error
//! naming stderr when there is none, and the conservation assertion with what broke it.

use anyhow::Result;
use serde_json::Value;
use std::process::Command;

/// A finished `--json` run.
pub struct RunJson {
    /// The JSON on stdout.
    pub v: Value,
    /// Stdout as written.
    pub stdout: String,
    /// Whether it exited 0.
    pub success: bool,
}

/// Run `cmd` (an `awsmp-loadtest` command with `--json`) and read its JSON; `what` names the
/// run in errors (its seed, say). No JSON on stdout is an error carrying stderr.
pub fn run_json(cmd: &mut Command, what: &str) -> Result<RunJson> {
    let out = cmd.output()?;
    let stdout = String::from_utf8(out.stdout)?;
    let v: Value = serde_json::from_str(stdout.trim()).map_err(|e| {
        anyhow::anyhow!(
            "{what}: no JSON on stdout ({e}); stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok(RunJson {
        v,
        stdout,
        success: out.status.success(),
    })
}

/// Run `cmd` with [`run_json`] and assert that it conserved (the violations and the funnel in
/// the message) and exited 0.
pub fn run_conserving(cmd: &mut Command, what: &str) -> Result<RunJson> {
    let run = run_json(cmd, what)?;
    assert_eq!(
        run.v["conserved"], true,
        "{what}: {}\nfunnel: {}",
        run.v["violations"], run.v["funnel"]
    );
    assert!(run.success, "{what}: the run exited non-zero");
    Ok(run)
}
