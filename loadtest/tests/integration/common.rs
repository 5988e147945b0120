//! What the load test's tests share: a stack of each test's own ([`Stack`]), and running
//! `awsmp-loadtest ... --json` as a test does: the verdict read from stdout, an error naming
//! stderr when there is none, and the conservation assertion with what broke it.

use anyhow::Result;
use serde_json::Value;
use std::path::PathBuf;
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

pub(crate) fn bin(name: &str) -> PathBuf {
    awsmp_local_stack::local::sibling_binary(name).unwrap()
}

/// A stack of the test's own (a temporary state dir), stopped even when the test fails.
pub(crate) struct Stack(pub(crate) tempfile::TempDir);

impl Stack {
    /// Start a stack of the test's own (`awsmp-local up --ephemeral`). A start that fails is an
    /// error carrying everything `up` printed, so a CI log shows which service did not start.
    pub(crate) fn up() -> Result<Self> {
        let stack = Self(tempfile::tempdir()?);
        let out = local(&stack, &["up", "--ephemeral"]).output()?;
        anyhow::ensure!(
            out.status.success(),
            "awsmp-local up: {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(stack)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = local(self, &["down", "--wipe"]).status();
    }
}

pub(crate) fn local(stack: &Stack, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("awsmp-local"));
    cmd.args(args);
    env_for(&mut cmd, stack);
    cmd
}

/// Only this stack's settings: never the suite stack's endpoints from the environment.
pub(crate) fn env_for(cmd: &mut Command, stack: &Stack) {
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS") {
            cmd.env_remove(k);
        }
    }
    cmd.env("AWSMP_LOCAL_DIR", stack.0.path());
    if let Some(tools) = std::env::var_os("AWSMP_LOCAL_TOOLS_DIR") {
        cmd.env("AWSMP_LOCAL_TOOLS_DIR", tools);
    }
}
