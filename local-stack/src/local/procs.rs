//! Starting and stopping the local stack's processes, by PID, and nothing else.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A process `up` started.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServiceState {
    /// Service name (`dynamodb`, `kinesis`, `sqs`, `marketplace-metering`).
    pub name: String,
    /// Process id (also its process group id).
    pub pid: u32,
    /// The 127.0.0.1 port it listens on.
    pub port: u16,
    /// Its arguments, used to tell our process from an unrelated one that reused the PID.
    pub args: Vec<String>,
    /// Its log file.
    pub log: PathBuf,
}

/// A freshly started process.
#[derive(Debug)]
pub struct Spawned {
    /// What to record in the state file.
    pub state: ServiceState,
}

/// Start `program args…` in its own process group, detached from our stdio, logging to `log`.
pub fn spawn(
    name: &str,
    port: u16,
    program: &Path,
    args: &[String],
    log: &Path,
) -> Result<Spawned> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Own process group: survives this CLI exiting, and `down` can signal the whole group.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name}: {}", program.display()))?;
    Ok(Spawned {
        state: ServiceState {
            name: name.into(),
            pid: child.id(),
            port,
            args: args.to_vec(),
            log: log.to_path_buf(),
        },
    })
}

/// True when the recorded process still runs (and is the one we started).
pub fn is_alive(s: &ServiceState) -> bool {
    let proc_dir = PathBuf::from(format!("/proc/{}", s.pid));
    let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
        return false;
    };
    let running = std::fs::read_to_string(proc_dir.join("stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|state| state != 'Z' && state != 'X');
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    let ours = args.len() >= s.args.len()
        && args[args.len() - s.args.len()..]
            .iter()
            .zip(&s.args)
            .all(|(a, b)| *a == b.as_bytes());
    // Just spawned, the child shows this process's command line until its exec, and none
    // while the exec replaces its memory.
    let execing =
        cmdline.is_empty() || std::fs::read("/proc/self/cmdline").is_ok_and(|own| own == cmdline);
    running && (ours || execing)
}

/// Stop a service: SIGTERM to its process group, then SIGKILL if it lingers; wait until its
/// port is closed. Returns whether it was running.
pub fn stop(s: &ServiceState) -> Result<bool> {
    if !is_alive(s) {
        return Ok(false);
    }
    signal_group(s.pid, "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_alive(s) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if is_alive(s) {
        signal_group(s.pid, "KILL");
        let deadline = Instant::now() + Duration::from_secs(5);
        while is_alive(s) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_alive(s) {
            bail!("{} (pid {}) did not stop", s.name, s.pid);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_listening(s.port) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(true)
}

fn signal_group(pid: u32, signal: &str) {
    // `kill -SIG -- -PGID` reaches every process of the group; the CLI keeps this crate free of unsafe.
    let _ = Command::new("kill")
        .args([format!("-{signal}"), "--".into(), format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
}

/// What the kernel says a process is doing (`/proc/PID/stat` state, `/proc/PID/wchan`), for
/// the message of a start that timed out.
fn process_state(pid: u32) -> String {
    let read = |file: &str| std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok();
    let state = read("stat")
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into());
    let wchan = read("wchan").unwrap_or_else(|| "?".into());
    format!("process {pid} state {state}, waiting in {wchan:?}")
}

/// True when something accepts connections on 127.0.0.1:`port`.
pub fn is_listening(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Inodes of the sockets listening on `port` on any local address (`/proc/net/tcp` and
/// `tcp6`: `local_address` is `ADDR:PORT` in hex, `st` 0A is LISTEN). `None` when neither
/// table can be read.
fn listening_inodes(port: u16) -> Option<Vec<u64>> {
    let mut read_any = false;
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(st), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *st == "0A"
                && local_port == Some(port)
                && let Ok(inode) = inode.parse()
            {
                inodes.push(inode);
            }
        }
    }
    read_any.then_some(inodes)
}

/// The process group of `pid` (`/proc/PID/stat`'s fifth field).
fn process_group(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Whether the socket listening on the service's port is held by a process of its own group
/// (the service, or a child it forked to serve). Something else answers connections there too
/// when it took the port in the instant between `up` choosing it and the service binding it,
/// and then the service fails to bind and exits, seconds later for a Python emulator on a
/// loaded machine; a request sent meanwhile reaches the wrong server. True when `/proc` cannot
/// tell.
fn holds_listener(s: &ServiceState) -> bool {
    let Some(inodes) = listening_inodes(s.port) else {
        return true;
    };
    let sockets: Vec<PathBuf> = inodes
        .iter()
        .map(|i| PathBuf::from(format!("socket:[{i}]")))
        .collect();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process_group(*pid) == Some(s.pid))
        .any(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .any(|target| sockets.contains(&target))
            })
        })
}

/// Wait until the service itself accepts connections (not another process on its port); fail
/// early (with its log) if it died.
pub async fn wait_listening(s: &ServiceState, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut foreign = false;
    loop {
        if is_listening(s.port) {
            if holds_listener(s) {
                return Ok(());
            }
            foreign = true;
        }
        if !is_alive(s) || Instant::now() > deadline {
            let log = std::fs::read_to_string(&s.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "{} did not start listening on 127.0.0.1:{} ({}); log {}:\n{}",
                s.name,
                s.port,
                match (is_alive(s), foreign) {
                    (true, false) =>
                        format!("timed out after {timeout:?}; {}", process_state(s.pid)),
                    (true, true) => format!(
                        "timed out after {timeout:?}, another process listens on the port; {}",
                        process_state(s.pid)
                    ),
                    (false, false) => "process exited".to_owned(),
                    (false, true) =>
                        "process exited, another process listens on the port".to_owned(),
                },
                s.log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sleep 30` started as the service on `port`, logging into `dir`.
    fn sleeper(dir: &Path, port: u16) -> ServiceState {
        spawn(
            "sleeper",
            port,
            Path::new("sleep"),
            &["30".to_owned()],
            &dir.join("sleeper.log"),
        )
        .unwrap()
        .state
    }

    #[tokio::test]
    async fn a_start_that_never_listens_times_out_naming_the_process_state() {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let sleeper = sleeper(dir.path(), port);
        // On a loaded machine the child may still be exec'ing `sleep` (state R) when the
        // wait times out; wait until it sleeps so the state asserted below is the one named.
        let asleep = Instant::now() + Duration::from_secs(30);
        while !process_state(sleeper.pid).contains(" state S,") && Instant::now() < asleep {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let err = wait_listening(&sleeper, Duration::from_millis(300))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("timed out after 300ms"), "{err}");
        assert!(
            err.contains(&format!("process {} state S", sleeper.pid)),
            "{err}"
        );
        assert!(stop(&sleeper).unwrap(), "it was running");
        assert!(!is_alive(&sleeper));
    }

    #[tokio::test]
    async fn a_port_another_process_listens_on_is_not_the_service_listening() {
        let dir = tempfile::tempdir().unwrap();
        // The port taken between choosing and binding it: this test process listens there.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let sleeper = sleeper(dir.path(), port);
        let err = wait_listening(&sleeper, Duration::from_millis(500))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("another process listens on the port"), "{err}");
        // Once it is the service that listens, the wait ends (binding as servers do, with
        // SO_REUSEADDR: the wait's own probes of the port left connections in TIME_WAIT).
        drop(taken);
        stop(&sleeper).unwrap();
        let script = format!(
            "import socket, time\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', {port}))\ns.listen()\ntime.sleep(30)"
        );
        let server = spawn(
            "server",
            port,
            Path::new("python3"),
            &["-c".to_owned(), script],
            &dir.path().join("server.log"),
        )
        .unwrap()
        .state;
        wait_listening(&server, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(holds_listener(&server));
        stop(&server).unwrap();
    }

    #[tokio::test]
    async fn a_start_that_exits_is_reported_as_exited() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("false.log");
        let quitter = spawn("quitter", 9, Path::new("false"), &[], &log)
            .unwrap()
            .state;
        let err = wait_listening(&quitter, Duration::from_secs(30))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("process exited"), "{err}");
    }
}
