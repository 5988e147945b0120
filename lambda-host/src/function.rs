//! One function: its built binary as its own process, started with `AWS_LAMBDA_RUNTIME_API`
//! pointing at its own Runtime API, and nothing of the host's environment but what it is given.

use crate::Error;
use crate::api::{Api, Invocation, Outcome, Status};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::{Notify, watch};

/// How long a function's init may take: Lambda's limit for the init phase, 10 seconds
/// (<https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html#runtimes-lifecycle-ib>).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines of a process's stderr kept for the error that reports its death.
const STDERR_LINES: usize = 40;

/// What to run.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// The function's name (`AWS_LAMBDA_FUNCTION_NAME`), e.g. `aggregator`.
    pub name: String,
    /// The built binary.
    pub binary: PathBuf,
    /// The environment its template gives it, plus whatever the host adds; the process gets
    /// only this and Lambda's own variables.
    pub env: BTreeMap<String, String>,
    /// The function's timeout (the template's `Timeout`).
    pub timeout: Duration,
    /// `MemorySize` in MB.
    pub memory_mb: u32,
    /// The unqualified function ARN; the invoked ARN when an invocation names none.
    pub arn: String,
}

struct Proc {
    exit: watch::Receiver<Option<ExitStatus>>,
    kill: Arc<Notify>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl Proc {
    fn exited(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    fn stderr(&self) -> String {
        let lines = self.stderr.lock().expect("stderr");
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    async fn kill(&mut self) {
        self.kill.notify_one();
        let _ = self.exit.wait_for(Option::is_some).await;
    }
}

/// A running function: its Runtime API and its process (restarted when it died).
pub struct Function {
    spec: FunctionSpec,
    api: Api,
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    proc: tokio::sync::Mutex<Option<Proc>>,
    /// The kill switch of the current process, reachable while an invocation holds `proc`.
    kill: Mutex<Option<Arc<Notify>>>,
    stdout: Arc<Mutex<Vec<String>>>,
}

impl Function {
    /// Serve its Runtime API and start its process; returns once the runtime polls for its
    /// first invocation, or with the init error it reported ([`Error::Init`]) or its exit
    /// ([`Error::InitExited`]).
    pub async fn start(spec: FunctionSpec) -> Result<Self, Error> {
        let (api, addr, server) = Api::serve().await.map_err(|source| Error::Io {
            function: spec.name.clone(),
            source,
        })?;
        let f = Self {
            spec,
            api,
            addr,
            server,
            proc: tokio::sync::Mutex::new(None),
            kill: Mutex::default(),
            stdout: Arc::default(),
        };
        let mut proc = f.proc.lock().await;
        *proc = Some(f.spawn().await?);
        drop(proc);
        Ok(f)
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// `host:port` of its Runtime API (its `AWS_LAMBDA_RUNTIME_API`).
    pub fn runtime_api(&self) -> SocketAddr {
        self.addr
    }

    /// Every stdout line the function's processes wrote since the last call (its EMF metrics
    /// among them).
    pub fn take_stdout(&self) -> Vec<String> {
        std::mem::take(&mut *self.stdout.lock().expect("stdout"))
    }

    /// Invoke it as Lambda would: `payload` is the event, `invoked_arn` the ARN the caller
    /// invoked (an alias's, for meter-ingest; the function's own when `None`). A function error
    /// is [`Error::Function`]; a process that dies mid-invocation is [`Error::Crashed`] and is
    /// started again on the next invocation; one that overruns its timeout is killed
    /// ([`Error::Timeout`]).
    pub async fn invoke(&self, payload: &Value, invoked_arn: Option<&str>) -> Result<Value, Error> {
        self.invoke_as(payload, invoked_arn, None).await
    }

    /// [`Function::invoke`] under `request_id` (a fresh one when `None`): Lambda's retries of an
    /// async invocation keep its request id, and so does a caller replaying them.
    pub async fn invoke_as(
        &self,
        payload: &Value,
        invoked_arn: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<Value, Error> {
        let mut guard = self.proc.lock().await;
        let needs_start = guard.as_ref().is_none_or(|p| p.exited().is_some());
        if needs_start {
            *guard = None;
            *guard = Some(self.spawn().await?);
        }
        let proc = guard.as_mut().expect("started");
        let deadline = SystemTime::now() + self.spec.timeout;
        let request_id = request_id.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        let rx = self.api.submit(Invocation {
            request_id: request_id.clone(),
            payload: serde_json::to_vec(payload).expect("a JSON value serializes"),
            deadline_ms: deadline
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            invoked_arn: invoked_arn.unwrap_or(&self.spec.arn).to_owned(),
            trace_id: format!("Root=1-{}", request_id.replace('-', "")),
        });
        let mut exit = proc.exit.clone();
        let outcome = tokio::select! {
            o = rx => o.ok(),
            _ = exit.wait_for(Option::is_some) => None,
            () = tokio::time::sleep(self.spec.timeout) => {
                proc.kill().await;
                return Err(Error::Timeout { function: self.spec.name.clone(), seconds: self.spec.timeout.as_secs() });
            }
        };
        match outcome {
            Some(Outcome::Response(body)) => {
                if body.is_empty() {
                    return Ok(Value::Null);
                }
                serde_json::from_slice(&body).map_err(|e| Error::Function {
                    function: self.spec.name.clone(),
                    error_type: "Runtime.InvalidResponse".into(),
                    error_message: e.to_string(),
                })
            }
            Some(Outcome::Error(d)) => Err(Error::Function {
                function: self.spec.name.clone(),
                error_type: d.error_type,
                error_message: d.error_message,
            }),
            None => {
                let status = proc
                    .exit
                    .borrow()
                    .map_or("unknown".into(), |s| s.to_string());
                Err(Error::Crashed {
                    function: self.spec.name.clone(),
                    status,
                    stderr: proc.stderr(),
                })
            }
        }
    }

    /// Kill its process as a crash would (`SIGKILL`), whatever it is doing: an invocation in
    /// flight ends in [`Error::Crashed`], and the next invocation starts a new process. The
    /// Runtime API stays. Returns at once, so it may be called mid-invocation.
    pub fn crash(&self) {
        if let Some(kill) = self.kill.lock().expect("kill").as_ref() {
            kill.notify_one();
        }
    }

    /// Stop its process and its Runtime API.
    pub async fn stop(&self) {
        if let Some(mut p) = self.proc.lock().await.take() {
            p.kill().await;
        }
        self.server.abort();
    }

    /// Start a process and wait for its init to end.
    async fn spawn(&self) -> Result<Proc, Error> {
        self.api.reset();
        let name = &self.spec.name;
        let mut cmd = tokio::process::Command::new(&self.spec.binary);
        cmd.env_clear()
            .envs(&self.spec.env)
            .envs(self.lambda_variables())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| Error::Io {
            function: format!("{name} ({})", self.spec.binary.display()),
            source,
        })?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(out) = child.stdout.take() {
            let sink = self.stdout.clone();
            tokio::spawn(read_lines(out, move |l| {
                sink.lock().expect("stdout").push(l);
            }));
        }
        if let Some(err) = child.stderr.take() {
            let sink = stderr.clone();
            tokio::spawn(read_lines(err, move |l| {
                let mut lines = sink.lock().expect("stderr");
                if lines.len() == STDERR_LINES {
                    lines.pop_front();
                }
                lines.push_back(l);
            }));
        }
        let (exit_tx, exit) = watch::channel(None);
        let kill = Arc::new(Notify::new());
        let kill_rx = kill.clone();
        *self.kill.lock().expect("kill") = Some(kill.clone());
        tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s.ok(),
                () = kill_rx.notified() => { let _ = child.kill().await; child.wait().await.ok() }
            };
            let _ = exit_tx.send(status.or_else(|| Some(ExitStatus::default())));
        });
        let mut proc = Proc { exit, kill, stderr };
        match self.await_init(&mut proc).await {
            Ok(()) => Ok(proc),
            Err(e) => {
                proc.kill().await;
                Err(e)
            }
        }
    }

    async fn await_init(&self, proc: &mut Proc) -> Result<(), Error> {
        let name = self.spec.name.clone();
        let mut status = self.api.status();
        let mut exit = proc.exit.clone();
        let ready = |s: &Status| s.polled || s.init_error.is_some();
        let reported = tokio::select! {
            s = status.wait_for(ready) => s.ok().map(|s| s.clone()),
            _ = exit.wait_for(Option::is_some) => None,
            () = tokio::time::sleep(INIT_TIMEOUT) => {
                return Err(Error::InitTimeout { function: name, seconds: INIT_TIMEOUT.as_secs() });
            }
        };
        // A runtime that reported its init error and exited: the report may land just after
        // the exit is seen.
        let reported = match reported {
            Some(s) => Some(s),
            None => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some(self.api.status().borrow().clone()).filter(ready)
            }
        };
        match reported {
            Some(Status {
                init_error: Some(d),
                ..
            }) => Err(Error::Init {
                function: name,
                error_type: d.error_type,
                error_message: d.error_message,
            }),
            Some(_) => Ok(()),
            None => Err(Error::InitExited {
                function: name,
                status: proc.exited().map_or("unknown".into(), |s| s.to_string()),
                stderr: proc.stderr(),
            }),
        }
    }

    /// The variables Lambda sets for every function
    /// (<https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime>).
    fn lambda_variables(&self) -> Vec<(&'static str, String)> {
        let name = &self.spec.name;
        vec![
            ("AWS_LAMBDA_RUNTIME_API", self.addr.to_string()),
            ("AWS_LAMBDA_FUNCTION_NAME", name.clone()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
            (
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
                self.spec.memory_mb.to_string(),
            ),
            ("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}")),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "local".into()),
            ("_HANDLER", "bootstrap".into()),
        ]
    }
}

async fn read_lines(from: impl AsyncRead + Unpin, mut each: impl FnMut(String)) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        each(line);
    }
}
