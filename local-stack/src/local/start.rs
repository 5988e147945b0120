//! Starting the stack's processes: a free port for each, the command line of each emulator and
//! of the simulator, and the wait until every one accepts connections.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::procs::{self, Spawned};
use super::{Paths, SERVICES, State, sibling_binary, topology};

/// How long a started service may take to accept connections. Generous: on a loaded 2-core
/// machine a debug binary's first start can take tens of seconds, and the wait ends as soon as
/// the port answers.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The region a service name belongs to (`name@region`; a bare name is the events region's).
fn region_of(name: &str) -> &str {
    name.split_once('@')
        .map_or(topology::EVENTS_REGION, |(_, region)| region)
}

/// Start every service that is not running, and wait until all of them listen.
pub(super) async fn start_missing(
    paths: &Paths,
    state: &mut State,
    catalog: &Path,
    regions: &[String],
) -> Result<()> {
    // Pick every port first, holding each until all are chosen, so two services starting at
    // once can never be handed the same free port.
    let mut to_start = Vec::new();
    let mut held = Vec::new();
    let names = regions
        .iter()
        .flat_map(|r| SERVICES.map(|s| (topology::service_name(s, r), r.as_str())));
    for (name, region) in names {
        let existing = state.service(&name).cloned();
        if let Some(s) = &existing
            && procs::is_alive(s)
        {
            continue;
        }
        // Reuse a dead service's port so the env file stays valid for anyone holding it.
        let listener = match existing.as_ref().map(|s| s.port) {
            Some(p) => std::net::TcpListener::bind(("127.0.0.1", p))
                .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0")),
            None => std::net::TcpListener::bind("127.0.0.1:0"),
        }?;
        to_start.push((name, region, listener.local_addr()?.port()));
        held.push(listener);
    }
    drop(held);
    for (name, region, port) in to_start {
        let spawned = start_service(paths, (&name, region), port, catalog, state.ephemeral)?;
        state.services.retain(|s| s.name != name);
        state.services.push(spawned.state);
        state.save(paths)?;
    }
    state.save(paths)?;
    for i in 0..state.services.len() {
        if let Err(first) = procs::wait_listening(&state.services[i], START_TIMEOUT).await {
            // One fresh start: a process that never bound (a port taken between choosing and
            // binding it, or a start stalled on a loaded machine) gets a second chance before
            // `up` fails; the first failure is reported either way.
            eprintln!(
                "{first:#}\nstarting it again (on its own port if that is free, else a fresh one)"
            );
            restart_service(paths, state, i, catalog).await?;
        }
    }
    // Something else may have taken a port in the instant between choosing and binding it:
    // then our process has exited even though the port answers. Such a service starts again
    // (on a fresh port when its own is still held); a stack with a dead service is never
    // handed out.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..state.services.len() {
        let s = &state.services[i];
        if !procs::is_alive(s) {
            eprintln!(
                "{} exited after start (port {} taken?); see {}\nstarting it again (on its own port if that is free, else a fresh one)",
                s.name,
                s.port,
                s.log.display()
            );
            restart_service(paths, state, i, catalog).await?;
        }
    }
    Ok(())
}

/// Stop service `i` and start it again: on its own port when that is free again (a start that
/// only stalled, on a loaded machine: the env file already names that port, and a load run
/// checks that its services stay where the env file says), else on a port just handed out by
/// the kernel (something else holds it); fail unless it listens and stays up.
async fn restart_service(paths: &Paths, state: &mut State, i: usize, catalog: &Path) -> Result<()> {
    let failed = state.services[i].clone();
    procs::stop(&failed)?;
    let port = std::net::TcpListener::bind(("127.0.0.1", failed.port))
        .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))?
        .local_addr()?
        .port();
    let spawned = start_service(
        paths,
        (&failed.name, region_of(&failed.name)),
        port,
        catalog,
        state.ephemeral,
    )?;
    state.services[i] = spawned.state;
    state.save(paths)?;
    let s = &state.services[i];
    procs::wait_listening(s, START_TIMEOUT)
        .await
        .with_context(|| format!("{} failed to start twice", failed.name))?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    if !procs::is_alive(s) {
        bail!(
            "{} exited after its second start (port {}); see {}",
            s.name,
            s.port,
            s.log.display()
        );
    }
    Ok(())
}

fn start_service(
    paths: &Paths,
    (name, region): (&str, &str),
    port: u16,
    catalog: &Path,
    ephemeral: bool,
) -> Result<Spawned> {
    let tools = &paths.tools;
    // Emulator data on disk unless the stack is ephemeral.
    let data_dir = |service: &str| -> Result<Option<String>> {
        if ephemeral {
            return Ok(None);
        }
        let dir = paths.data().join(service);
        std::fs::create_dir_all(&dir)?;
        Ok(Some(dir.display().to_string()))
    };
    let (program, args): (PathBuf, Vec<String>) = match name.split('@').next().unwrap_or(name) {
        "kinesis" => {
            let script = tools.join("node").join("kinesalite-loopback.js");
            (
                "node".into(),
                kinesalite_args(&script, port, data_dir(name)?),
            )
        }
        "dynamodb" => {
            let script = tools
                .join("node")
                .join("node_modules")
                .join("dynalite")
                .join("cli.js");
            ("node".into(), dynalite_args(&script, port, data_dir(name)?))
        }
        "sqs" => (
            tools.join("venv").join("bin").join("moto_server"),
            vec![
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ],
        ),
        "marketplace-metering" => (
            sibling_binary("marketplace-sim")?,
            vec![
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--catalog".into(),
                catalog.display().to_string(),
                "--region".into(),
                region.into(),
            ],
        ),
        other => bail!("unknown service {other}"),
    };
    procs::spawn(
        name,
        port,
        &program,
        &args,
        &paths.logs().join(format!("{name}.log")),
    )
}

fn kinesalite_args(script: &Path, port: u16, data: Option<String>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        script.display().to_string(),
        "--port".into(),
        port.to_string(),
    ];
    // No artificial CREATING/DELETING delays: tests create streams of their own.
    for flag in ["--createStreamMs", "--deleteStreamMs", "--updateStreamMs"] {
        args.extend([flag.into(), "0".into()]);
    }
    args.extend(["--shardLimit".into(), "1000".into()]);
    if let Some(dir) = data {
        args.extend(["--path".into(), dir]);
    }
    args
}

fn dynalite_args(script: &Path, port: u16, data: Option<String>) -> Vec<String> {
    let mut args: Vec<String> = vec![script.display().to_string()];
    args.extend([
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
    ]);
    for flag in ["--createTableMs", "--deleteTableMs", "--updateTableMs"] {
        args.extend([flag.into(), "0".into()]);
    }
    if let Some(dir) = data {
        args.extend(["--path".into(), dir]);
    }
    args
}
