//! What the integration tests of this crate and of the crates above it share: a seller's shape
//! on a stack of the test's own — two products in two regions (`awsmp-local up --ephemeral
//! --products 2 --regions us-east-1,eu-west-1` in a temporary directory), taken down and wiped
//! on drop.

use crate::local::topology::Topology;
use crate::local::{LocalEnv, Paths};
use anyhow::{Context, Result, ensure};
use std::process::Command;

/// The events region, where the first site of each product is.
pub const US: &str = "us-east-1";
/// The second region.
pub const EU: &str = "eu-west-1";

/// Two products in [`US`] and [`EU`].
pub struct MultiStack {
    /// The stack's state directory and the installed emulators.
    pub paths: Paths,
    _dir: tempfile::TempDir,
}

impl MultiStack {
    /// Start the stack (the emulators installed in `AWSMP_LOCAL_TOOLS_DIR`).
    pub fn up() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let tools = std::env::var("AWSMP_LOCAL_TOOLS_DIR")
            .context("AWSMP_LOCAL_TOOLS_DIR (scripts/test sets it)")?;
        let stack = Self {
            paths: Paths {
                root: dir.path().join("stack"),
                tools: tools.into(),
            },
            _dir: dir,
        };
        let out = stack
            .cmd("awsmp-local")?
            .args(["up", "--ephemeral", "--products", "2", "--regions"])
            .arg(format!("{US},{EU}"))
            .output()?;
        ensure!(
            out.status.success(),
            "up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(stack)
    }

    /// One of the workspace's binaries, with only this stack's settings (no `AWS*` variable
    /// of the calling shell).
    pub fn cmd(&self, name: &str) -> Result<Command> {
        let mut cmd = Command::new(crate::local::sibling_binary(name)?);
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS") {
                cmd.env_remove(k);
            }
        }
        cmd.env("AWSMP_LOCAL_DIR", &self.paths.root)
            .env("AWSMP_LOCAL_TOOLS_DIR", &self.paths.tools);
        Ok(cmd)
    }

    /// The stack's topology (`topology.json`).
    pub fn topology(&self) -> Result<Topology> {
        Topology::load(&self.paths)?.context("no topology.json")
    }

    /// The env file of one site.
    pub fn env(&self, product: &str, region: &str) -> Result<LocalEnv> {
        let t = self.topology()?;
        LocalEnv::read(&t.site(&format!("{product}/{region}"))?.env_file)
    }
}

impl Drop for MultiStack {
    fn drop(&mut self) {
        if let Ok(mut cmd) = self.cmd("awsmp-local") {
            let _ = cmd.args(["down", "--wipe"]).output();
        }
    }
}
