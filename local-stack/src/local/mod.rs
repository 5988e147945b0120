//! `awsmp-local`: the local AWS stack.
//!
//! `up` installs the pinned emulators on first use (kinesalite and dynalite from an npm
//! lockfile, moto's SQS server from a pinned Python venv), starts them and the Marketplace
//! simulator on free 127.0.0.1 ports, creates every resource of `infra/resources.json`, and
//! writes `.awsmp-local/env`. `down` stops exactly the processes `up` started; `status` says
//! what runs where.

pub mod env;
pub mod hosted;
pub mod ingest;
pub mod lifecycle;
pub mod procs;
pub mod resources;
pub mod sites;
mod start;
pub mod topology;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use env::LocalEnv;
use procs::ServiceState;
use resources::Resources;

/// Region the local stack pretends to be.
pub const LOCAL_REGION: &str = "us-east-1";
/// Account id moto puts into local queue URLs and ARNs.
pub const LOCAL_ACCOUNT: &str = "123456789012";
/// Dummy credentials: the emulators accept any; the SDKs insist on having some.
pub const LOCAL_CREDENTIAL: &str = "awsmp-local";

const PACKAGE_JSON: &str = include_str!("../../../tools/node/package.json");
const PACKAGE_LOCK: &str = include_str!("../../../tools/node/package-lock.json");
const KINESALITE_LOOPBACK: &str = include_str!("../../../tools/node/kinesalite-loopback.js");
const REQUIREMENTS_LOCK: &str = include_str!("../../../tools/requirements.lock");

/// Where the local stack keeps its state.
#[derive(Debug, Clone)]
pub struct Paths {
    /// `.awsmp-local` (or `$AWSMP_LOCAL_DIR`).
    pub root: PathBuf,
    /// Installed emulators (`$AWSMP_LOCAL_TOOLS_DIR`, default `<root>/tools`); kept by `down --wipe`.
    pub tools: PathBuf,
}

impl Paths {
    /// From `$AWSMP_LOCAL_DIR` (default `./.awsmp-local`) and `$AWSMP_LOCAL_TOOLS_DIR`.
    pub fn from_env() -> Self {
        let root = std::env::var_os("AWSMP_LOCAL_DIR")
            .map_or_else(|| PathBuf::from(".awsmp-local"), PathBuf::from);
        let root = std::path::absolute(&root).unwrap_or(root);
        let tools = std::env::var_os("AWSMP_LOCAL_TOOLS_DIR")
            .map_or_else(|| root.join("tools"), PathBuf::from);
        let tools = std::path::absolute(&tools).unwrap_or(tools);
        Self { root, tools }
    }
    /// Emulator data (LevelDB files); deleted by `down --wipe`.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    /// Service logs.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// The shell-sourceable environment file.
    pub fn env_file(&self) -> PathBuf {
        self.root.join("env")
    }
    /// Running processes, by PID.
    pub fn state_file(&self) -> PathBuf {
        self.root.join("state.json")
    }
    /// The simulator catalog used when `up` is given none.
    pub fn default_catalog(&self) -> PathBuf {
        self.root.join("catalog.json")
    }
    /// Checkpoints of the usage stream's local event source mapping (`tick`, `run`).
    pub fn esm_checkpoints(&self) -> PathBuf {
        self.root.join("esm-checkpoints.json")
    }
    /// Load runs' catalogs and event source mapping checkpoints.
    pub fn loadtest(&self) -> PathBuf {
        self.root.join("loadtest")
    }
}

/// What `up` started.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// One entry per service.
    pub services: Vec<ServiceState>,
    /// Catalog the simulator was started with.
    pub catalog: Option<PathBuf>,
    /// Whether emulator data lives only in memory.
    #[serde(default)]
    pub ephemeral: bool,
}

impl State {
    fn load(paths: &Paths) -> Result<Option<Self>> {
        match std::fs::read_to_string(paths.state_file()) {
            Ok(s) => Ok(Some(
                serde_json::from_str(&s).context("reading state.json")?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
    fn save(&self, paths: &Paths) -> Result<()> {
        write_if_changed(&paths.state_file(), &serde_json::to_string_pretty(self)?).map(drop)
    }
    fn service(&self, name: &str) -> Option<&ServiceState> {
        self.services.iter().find(|s| s.name == name)
    }
}

/// The process id of the stack's running `service` (one of [`SERVICES`]), if it runs.
pub fn service_pid(paths: &Paths, service: &str) -> Option<u32> {
    let state = State::load(paths).ok()??;
    state
        .service(service)
        .filter(|s| procs::is_alive(s))
        .map(|s| s.pid)
}

/// Options for [`up`].
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// Simulator catalog; default: a demo catalog written to `.awsmp-local/catalog.json`.
    pub catalog: Option<PathBuf>,
    /// Keep emulator data in memory only (faster; nothing to wipe). `None`: keep the running
    /// stack's mode (a new stack persists its data).
    pub ephemeral: Option<bool>,
    /// Products and regions (docs/local-stack.md, "Many products, many regions"). `None`: the
    /// running stack's shape, else one product in one region.
    pub shape: Option<topology::Shape>,
}

/// The services, in start order.
pub const SERVICES: [&str; 4] = ["dynamodb", "kinesis", "sqs", "marketplace-metering"];

/// Start (or confirm) the local stack and write the env file. Idempotent: with everything
/// already running it changes nothing.
pub async fn up(paths: &Paths, opts: &UpOptions) -> Result<LocalEnv> {
    for dir in [&paths.root, &paths.tools, &paths.logs()] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    install_emulators(&paths.tools)?;
    let mut state = State::load(paths)?.unwrap_or_default();
    let shape = topology::resolve_shape(paths, opts.shape.as_ref(), &mut state)?;
    let mut opts = opts.clone();
    if opts.catalog.is_none() {
        opts.catalog = topology::grown_demo_catalog(paths, state.catalog.as_deref(), &shape)?;
    }
    let opts = &opts;
    let catalog = resolve_catalog(paths, opts, &mut state)?;
    let running = state.services.iter().any(procs::is_alive);
    let ephemeral = opts.ephemeral.unwrap_or(running && state.ephemeral);
    if running && state.ephemeral != ephemeral {
        bail!(
            "the running stack was started with ephemeral={}; run `awsmp-local down` first",
            state.ephemeral
        );
    }
    state.ephemeral = ephemeral;
    start::start_missing(paths, &mut state, &catalog, &shape.regions).await?;

    let mut env = LocalEnv::for_services(&state)?;
    env.vars
        .insert("AWSMP_CATALOG".into(), catalog.display().to_string());
    // dynalite has no TTL, and the age-out sweep checks every bucket back to the raw TTL
    // (365 days by default, 8,760 GSI queries a tick): the local stack uses a 7-day TTL.
    env.vars
        .insert("AWSMP_USAGE_TABLE_TTL_DAYS".into(), "7".into());
    if shape.is_single() {
        if let Some(code) = first_product_code(&catalog)? {
            env.vars.insert("AWSMP_PRODUCT_CODE".into(), code);
        }
        create_resources(&mut env).await?;
        topology::remove_topology(paths)?;
    } else {
        let products = topology::product_codes(&catalog, shape.products)?;
        let plan = topology::plan(paths, &shape, &products);
        env = topology::provision(paths, &state, &plan, &env).await?;
    }
    write_if_changed(&paths.env_file(), &env.render())?;
    Ok(env)
}

/// The simulator's catalog: the one asked for, else the running stack's, else the demo
/// catalog. A different catalog than the running one stops the simulator; it restarts on the
/// same port, so an env file sourced before (a shell running `meterctl`) still reaches it.
fn resolve_catalog(paths: &Paths, opts: &UpOptions, state: &mut State) -> Result<PathBuf> {
    let catalog = match (&opts.catalog, &state.catalog) {
        (Some(c), _) => std::path::absolute(c)?,
        (None, Some(c)) => c.clone(),
        (None, None) => {
            let path = paths.default_catalog();
            if !path.exists() {
                write_if_changed(&path, &serde_json::to_string_pretty(&demo_catalog())?)?;
            }
            path
        }
    };
    if state.catalog.as_ref().is_some_and(|c| c != &catalog) {
        // A different catalog needs fresh simulators (one per region).
        let is_sim = |s: &ServiceState| s.name.split('@').next() == Some("marketplace-metering");
        // Their entries stay: `start_missing` restarts a stopped service on its old port.
        for sim in state.services.iter().filter(|s| is_sim(s)) {
            procs::stop(sim)?;
        }
    }
    state.catalog = Some(catalog.clone());
    Ok(catalog)
}

/// Stop exactly the processes `up` started and wait until their ports are closed.
/// With `wipe`, also delete every piece of the stack's state: emulator data, logs, the
/// default catalog, the event source mapping's checkpoints (they name sequence numbers of
/// streams that no longer exist) and the load runs' catalogs and checkpoints. The installed
/// emulators stay.
pub fn down(paths: &Paths, wipe: bool) -> Result<Vec<String>> {
    let mut stopped = Vec::new();
    if let Some(state) = State::load(paths)? {
        for s in state.services.iter().rev() {
            if procs::stop(s)? {
                stopped.push(s.name.clone());
            }
        }
        std::fs::remove_file(paths.state_file()).ok();
    }
    topology::remove_topology(paths)?;
    std::fs::remove_file(paths.env_file()).ok();
    if wipe {
        wipe_state(paths)?;
    }
    Ok(stopped)
}

fn wipe_state(paths: &Paths) -> Result<()> {
    for dir in [
        paths.data(),
        paths.logs(),
        paths.loadtest(),
        topology::sites_dir(paths),
    ] {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    let checkpoints = paths.esm_checkpoints();
    for file in [
        paths.default_catalog(),
        checkpoints.with_extension("tmp"),
        checkpoints,
        ingest::saved_mapping(paths),
    ] {
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", file.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// One line per service: name, pid, endpoint, whether it runs.
pub fn status(paths: &Paths) -> Result<Vec<String>> {
    let Some(state) = State::load(paths)? else {
        return Ok(vec!["not running (no state; run `awsmp-local up`)".into()]);
    };
    Ok(state
        .services
        .iter()
        .map(|s| {
            let alive = procs::is_alive(s);
            format!(
                "{:<22} pid {:<8} http://127.0.0.1:{:<6} {}",
                s.name,
                s.pid,
                s.port,
                if alive { "running" } else { "NOT RUNNING" }
            )
        })
        .collect())
}

/// A binary built next to the running one (`target/debug/marketplace-sim`).
pub fn sibling_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("current exe has no directory")?;
    // Test binaries live one level down, in target/debug/deps.
    for candidate in [
        dir.join(name),
        dir.parent().map(|p| p.join(name)).unwrap_or_default(),
    ] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "{name} not found next to {} (build it: cargo build --workspace --bins)",
        exe.display()
    )
}

fn install_emulators(tools: &Path) -> Result<()> {
    let node_dir = tools.join("node");
    std::fs::create_dir_all(&node_dir)?;
    let lock_changed = write_if_changed(&node_dir.join("package.json"), PACKAGE_JSON)?
        | write_if_changed(&node_dir.join("package-lock.json"), PACKAGE_LOCK)?;
    write_if_changed(
        &node_dir.join("kinesalite-loopback.js"),
        KINESALITE_LOOPBACK,
    )?;
    let installed = ["kinesalite", "dynalite"]
        .iter()
        .all(|p| node_dir.join("node_modules").join(p).is_dir());
    if lock_changed || !installed {
        eprintln!(
            "awsmp-local: installing kinesalite and dynalite (npm ci, pinned by package-lock.json)"
        );
        run(std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&node_dir))?;
    }

    let venv = tools.join("venv");
    let marker = venv.join("awsmp-requirements.lock");
    let current = std::fs::read_to_string(&marker).unwrap_or_default();
    if current != REQUIREMENTS_LOCK || !venv.join("bin").join("moto_server").is_file() {
        eprintln!("awsmp-local: installing moto server (Python venv, pinned by requirements.lock)");
        run(std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv))?;
        let req = tools.join("requirements.lock");
        std::fs::write(&req, REQUIREMENTS_LOCK)?;
        run(std::process::Command::new(venv.join("bin").join("pip"))
            // No byte-compiling of every module at install (about half of pip's CPU here):
            // Python compiles what it imports, once, on first use.
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",
                "-r",
            ])
            .arg(&req))?;
        std::fs::write(&marker, REQUIREMENTS_LOCK)?;
    }
    Ok(())
}

fn run(cmd: &mut std::process::Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Write `contents` unless the file already holds exactly that. Returns whether it wrote.
fn write_if_changed(path: &Path, contents: &str) -> Result<bool> {
    if std::fs::read_to_string(path).is_ok_and(|c| c == contents) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)?;
    Ok(true)
}

async fn create_resources(env: &mut LocalEnv) -> Result<()> {
    let resources = Resources::load()?;
    let ddb = env.dynamodb().await?;
    let sqs = env.sqs().await?;
    let kinesis = env.kinesis().await?;
    for t in &resources.tables {
        resources::ensure_table(&ddb, t).await?;
        env.vars.insert(t.env.clone(), t.name.clone());
    }
    for q in &resources.queues {
        for (k, url) in resources::ensure_queue(&sqs, q).await? {
            env.vars.insert(k, url);
        }
    }
    for s in &resources.streams {
        resources::ensure_stream(&kinesis, s).await?;
        env.vars.insert(s.env.clone(), s.name.clone());
    }
    let s3 = env.s3().await?;
    for b in &resources.buckets {
        resources::ensure_bucket(&s3, b).await?;
        env.vars.insert(b.env.clone(), b.name.clone());
    }
    Ok(())
}

fn first_product_code(catalog: &Path) -> Result<Option<String>> {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(catalog)
            .with_context(|| format!("reading {}", catalog.display()))?,
    )
    .with_context(|| format!("parsing {}", catalog.display()))?;
    Ok(v["products"][0]["productCode"].as_str().map(str::to_owned))
}

/// Product code of the demo catalog.
pub const DEMO_PRODUCT_CODE: &str = "awsmpdemo0product0code0001";
/// Dimensions of the demo product.
pub const DEMO_DIMENSIONS: [&str; 3] = ["api_calls", "storage_gb_hours", "compute_minutes"];
/// Active demo licenses; license `i` belongs to account [`demo_account`]`(i)`.
pub const DEMO_LICENSES: usize = 200;

/// The deterministic license ARN of demo license `i`.
pub fn demo_license_arn(i: usize) -> String {
    format!(
        "arn:aws:license-manager::{LOCAL_ACCOUNT}:license:l-{:032x}",
        0xa11ce000_u64 + i as u64
    )
}

/// The buyer account of demo license `i`.
pub fn demo_account(i: usize) -> String {
    format!("{:012}", 210_000_000_000_u64 + i as u64)
}

/// The demo catalog: one product, three dimensions, [`DEMO_LICENSES`] active licenses, one
/// ended license (index `DEMO_LICENSES`), two legacy customers and two registration tokens.
pub fn demo_catalog() -> serde_json::Value {
    let mut licenses: Vec<serde_json::Value> = (0..DEMO_LICENSES)
        .map(|i| serde_json::json!({"licenseArn": demo_license_arn(i), "customerAWSAccountId": demo_account(i), "status": "active"}))
        .collect();
    licenses.push(serde_json::json!({
        "licenseArn": demo_license_arn(DEMO_LICENSES), "customerAWSAccountId": demo_account(DEMO_LICENSES), "status": "ended"
    }));
    serde_json::json!({
        "windowHours": 24,
        "requestsPerSecond": 10,
        "maxAllocationsPerRecord": 2500,
        "products": [{
            "productCode": DEMO_PRODUCT_CODE,
            "dimensions": DEMO_DIMENSIONS,
            "licenses": licenses,
            "legacyCustomers": [
                {"customerIdentifier": "legacy-customer-active", "status": "active"},
                {"customerIdentifier": "legacy-customer-ended", "status": "ended"}
            ],
            "registrationTokens": [
                {"token": "demo-token-valid", "licenseArn": demo_license_arn(0), "customerAWSAccountId": demo_account(0), "expiresAt": "2099-01-01T00:00:00Z"},
                {"token": "demo-token-expired", "licenseArn": demo_license_arn(1), "customerAWSAccountId": demo_account(1), "expiresAt": "2020-01-01T00:00:00Z"}
            ]
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_identifiers_have_marketplace_shapes() {
        for i in [0, 1, DEMO_LICENSES - 1, DEMO_LICENSES] {
            assert!(
                awsmp_contract::ids::is_valid_license_arn(&demo_license_arn(i)),
                "{}",
                demo_license_arn(i)
            );
            assert!(awsmp_contract::ids::is_valid_account_id(&demo_account(i)));
        }
        assert!(awsmp_contract::ids::is_valid_product_code(
            DEMO_PRODUCT_CODE
        ));
    }

    #[test]
    fn write_if_changed_reports_changes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        assert!(write_if_changed(&f, "a").unwrap());
        assert!(!write_if_changed(&f, "a").unwrap());
        assert!(write_if_changed(&f, "b").unwrap());
    }
}
