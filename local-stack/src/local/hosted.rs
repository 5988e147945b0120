//! The Lambdas as processes for the local runner: each function the built binary under
//! `awsmp-lambda-host`, behind a Runtime API of its own, with the environment its template gives
//! it (rendered for the local stack from `infra/functions.json`), kept alive across ticks as a
//! warm Lambda is. The runner's event source mappings and schedules invoke them with the events
//! AWS sends (docs/local-stack.md, "The demo: every Lambda a process").
//!
//! Time: the binaries read the wall clock, and no code path of theirs shifts it. On the local
//! stack the scheduled functions (the pipeline's and the lifecycle's) are started under
//! libfaketime (`LD_PRELOAD`), reading their clock's offset from a file the runner rewrites
//! before each tick; monotonic time stays real, so timers and timeouts are real. The consumer
//! and the heartbeat run beside the producers on the wall clock, as the in-process consumer
//! does.

use super::LocalEnv;
use anyhow::{Context, Result, bail};
use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use awsmp_lambda_host::local::{self as rendering, LocalFunction};
use awsmp_lambda_host::template::Manifest;
use awsmp_lambda_host::{Error as HostError, Function};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// EventBridge's scheduled event for `function` at `at`, as a rule without a constant input
/// sends it
/// (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-run-lambda-schedule.html>).
pub fn scheduled_event(function: &str, at: DateTime<Utc>) -> Value {
    serde_json::json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": rendering::LOCAL_ACCOUNT,
        "time": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": "us-east-1",
        "resources": [format!("arn:aws:events:us-east-1:{}:rule/awsmp-local-{function}", rendering::LOCAL_ACCOUNT)],
        "detail": {}
    })
}

/// The functions' manifest, generated from the templates (`infra/generate.py`).
const FUNCTIONS_JSON: &str = include_str!("../../../infra/functions.json");

/// Overrides where libfaketime is.
pub const LIBFAKETIME_VAR: &str = "AWSMP_LIBFAKETIME";

/// Where Debian's and Ubuntu's `libfaketime` package puts the library, per architecture.
const LIBFAKETIME_PATHS: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The functions that run on the virtual clock: the scheduled ones and those their queues feed.
pub const VIRTUAL_CLOCK: [&str; 7] = [
    "discoverer",
    "aggregator",
    "cleanup",
    "submitter",
    "expiry",
    "subscription",
    "deprovision-cleanup",
];

/// The functions on the wall clock, beside the producers: the ingest stack's, and register (its
/// registrations are the run's customers before it produces).
pub const WALL_CLOCK: [&str; 4] = [
    "kinesis-consumer",
    "stream-heartbeat",
    "meter-ingest",
    "register",
];

/// How the Lambdas of a local run are run, for the report.
pub const HOST_DESCRIPTION: &str = "lambda runtime: built binaries, one process each";
/// The in-process alternative, for the report.
pub const IN_PROCESS_DESCRIPTION: &str = "in-process handlers";

/// The libfaketime library: `$AWSMP_LIBFAKETIME`, else the package's path.
pub fn libfaketime() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(LIBFAKETIME_VAR) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("{LIBFAKETIME_VAR}={} is no file", p.display());
    }
    LIBFAKETIME_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "libfaketime is not installed (looked in {}): the Lambdas under the host get the \
                 run's virtual clock through it. Install it with `apt-get install faketime \
                 libfaketime` (scripts/demo does on first use), set {LIBFAKETIME_VAR}, or run \
                 the handlers in process (--lambdas in-process)",
                LIBFAKETIME_PATHS.join(", ")
            )
        })
}

/// A function's processes: one per concurrent invocation (Lambda's concurrency), each taking
/// one invocation at a time.
struct Pool {
    /// The unqualified function ARN and the environment its processes got.
    spec: awsmp_lambda_host::FunctionSpec,
    /// Invocations so far (each retry and each redelivery one).
    invocations: std::sync::atomic::AtomicU64,
    members: Vec<Function>,
    free: Mutex<Vec<usize>>,
    slots: tokio::sync::Semaphore,
}

/// The running functions and the virtual clock's file.
pub struct Hosted {
    pools: BTreeMap<String, Pool>,
    /// The discoverer's schedule targets' constant inputs, from the template.
    discoverer_inputs: Vec<Value>,
    /// libfaketime's offset file.
    clock_file: PathBuf,
    /// The stdout lines the functions wrote and nobody took yet (their EMF metrics among
    /// them), by function.
    stdout: Mutex<BTreeMap<String, Vec<String>>>,
}

/// What starts: the functions by name, and how many processes each.
#[derive(Debug, Clone)]
pub struct HostedSpec {
    /// Binary name → processes (the consumer's concurrency: shards × parallelization factor).
    pub functions: BTreeMap<String, usize>,
    /// Variables replacing the rendered ones, for every function whose template gives them
    /// (a load run's own stream as `AWSMP_USAGE_STREAM`).
    pub overrides: BTreeMap<String, String>,
    /// Where the binaries are.
    pub bin_dir: PathBuf,
    /// The directory of the clock's file (the stack's).
    pub state_dir: PathBuf,
}

impl HostedSpec {
    /// The functions of a load run on the local stack (the ones its ticks and its mappings
    /// invoke, and its front doors: `register` and `meter-ingest`), `consumers` processes of
    /// the consumer, binaries next to this one.
    pub fn load_run(state_dir: &Path, consumers: usize, stream: &str) -> Result<Self> {
        let mut functions: BTreeMap<String, usize> =
            VIRTUAL_CLOCK.iter().map(|f| ((*f).to_owned(), 1)).collect();
        functions.insert("kinesis-consumer".into(), consumers.max(1));
        for f in ["stream-heartbeat", "meter-ingest", "register"] {
            functions.insert(f.into(), 1);
        }
        Ok(Self {
            functions,
            overrides: BTreeMap::from([("AWSMP_USAGE_STREAM".to_owned(), stream.to_owned())]),
            bin_dir: bin_dir()?,
            state_dir: state_dir.to_owned(),
        })
    }
}

/// Where the built Lambda binaries are: `$AWSMP_BIN_DIR`, else next to this binary (a test
/// binary's: one level up).
pub fn bin_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("AWSMP_BIN_DIR") {
        return Ok(PathBuf::from(d));
    }
    let consumer = super::sibling_binary("kinesis-consumer")
        .context("the Lambda binaries (cargo build --workspace --bins)")?;
    Ok(consumer
        .parent()
        .context("the binary's directory")?
        .to_owned())
}

impl Hosted {
    /// Render every function of `spec` for the stack in `env` and start its processes.
    pub async fn start(env: &LocalEnv, spec: &HostedSpec) -> Result<Self> {
        let faketime = libfaketime()?;
        let manifest = Manifest::parse(FUNCTIONS_JSON).context("infra/functions.json")?;
        let rendered: BTreeMap<String, LocalFunction> = rendering::render(&manifest, &env.vars)
            .context("rendering the functions' environments for the local stack")?
            .into_iter()
            .map(|f| (f.binary.clone(), f))
            .collect();
        std::fs::create_dir_all(&spec.state_dir)?;
        let clock_file = spec.state_dir.join("faketime");
        write_offset(&clock_file, 0)?;
        let mut discoverer_inputs = Vec::new();
        let mut pools = BTreeMap::new();
        for (name, n) in &spec.functions {
            let f = rendered
                .get(name)
                .with_context(|| format!("{name} is no function of the templates here"))?;
            if name == "discoverer" {
                discoverer_inputs = f.schedules.iter().filter_map(|s| s.input.clone()).collect();
            }
            let mut fs = f.spec(&spec.bin_dir);
            for (k, v) in &spec.overrides {
                if let Some(slot) = fs.env.get_mut(k) {
                    slot.clone_from(v);
                }
            }
            if VIRTUAL_CLOCK.contains(&name.as_str()) {
                for (k, v) in faketime_env(&faketime, &clock_file) {
                    fs.env.insert(k.to_owned(), v);
                }
            }
            let mut members = Vec::new();
            for _ in 0..*n {
                members.push(Function::start(fs.clone()).await?);
            }
            pools.insert(
                name.clone(),
                Pool {
                    spec: fs,
                    invocations: std::sync::atomic::AtomicU64::new(0),
                    free: Mutex::new((0..members.len()).rev().collect()),
                    slots: tokio::sync::Semaphore::new(members.len()),
                    members,
                },
            );
        }
        Ok(Self {
            pools,
            discoverer_inputs,
            clock_file,
            stdout: Mutex::default(),
        })
    }

    /// Set the virtual clock of the scheduled functions to `at`: from now on they read `at`
    /// plus the real time passed since.
    pub fn set_time(&self, at: DateTime<Utc>) -> Result<()> {
        let offset = (at - Utc::now()).num_milliseconds() as f64 / 1000.0;
        write_offset(&self.clock_file, offset.round() as i64)
    }

    /// The discoverer's schedule targets' constant inputs (the template's).
    pub fn discoverer_inputs(&self) -> &[Value] {
        &self.discoverer_inputs
    }

    /// Whether `function` runs here.
    pub fn has(&self, function: &str) -> bool {
        self.pools.contains_key(function)
    }

    /// Invoke `function` with `event` on a free process of it.
    pub async fn invoke(&self, function: &str, event: &Value) -> Result<Value, HostError> {
        self.invoke_crashing(function, event, None).await
    }

    /// Invoke `function`; with `crash_after`, its process is killed that long into the
    /// invocation (a crash mid-batch: [`HostError::Crashed`] unless it answered first).
    pub async fn invoke_crashing(
        &self,
        function: &str,
        event: &Value,
        crash_after: Option<Duration>,
    ) -> Result<Value, HostError> {
        let invocation = Invocation {
            crash_after,
            ..Invocation::default()
        };
        self.invoke_with(function, event, &invocation).await
    }

    /// Invoke `function` with `event` as `invocation` says: as the ARN it names (an alias's),
    /// under its request id (a retry's), crashing its process that long into it.
    pub async fn invoke_with(
        &self,
        function: &str,
        event: &Value,
        invocation: &Invocation<'_>,
    ) -> Result<Value, HostError> {
        let Invocation {
            invoked_arn,
            request_id,
            crash_after,
        } = *invocation;
        let Some(pool) = self.pools.get(function) else {
            return Err(HostError::Template(format!("{function} is not started")));
        };
        let _permit = pool.slots.acquire().await.expect("never closed");
        pool.invocations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let i = pool
            .free
            .lock()
            .expect("free")
            .pop()
            .expect("a permit's slot");
        let member = &pool.members[i];
        let invocation = member.invoke_as(event, invoked_arn, request_id);
        tokio::pin!(invocation);
        let out = match crash_after {
            None => invocation.await,
            Some(after) => tokio::select! {
                out = &mut invocation => out,
                () = tokio::time::sleep(after) => {
                    member.crash();
                    invocation.await
                }
            },
        };
        self.stdout
            .lock()
            .expect("stdout")
            .entry(function.to_owned())
            .or_default()
            .extend(member.take_stdout());
        pool.free.lock().expect("free").push(i);
        out
    }

    /// An SQS batch to `function`, as Lambda's SQS event source mapping invokes it, delivered
    /// `deliveries` times (twice: a redelivery of the same messages, as when a delete does not
    /// land). Its answer's `batchItemFailures`, over every delivery; a function error, crash or
    /// timeout fails every message of the batch, as the mapping treats it (they reappear after
    /// the visibility timeout).
    pub async fn sqs_batch(
        &self,
        function: &str,
        event: &SqsEvent,
        deliveries: usize,
    ) -> Result<SqsBatchResponse> {
        let payload = serde_json::to_value(event)?;
        let mut failed = std::collections::BTreeSet::new();
        for _ in 0..deliveries {
            match self.invoke(function, &payload).await {
                Ok(Value::Null) => {}
                Ok(answer) => {
                    let r: SqsBatchResponse = serde_json::from_value(answer)
                        .with_context(|| format!("{function}'s batch response"))?;
                    failed.extend(r.batch_item_failures.into_iter().map(|f| f.item_identifier));
                }
                Err(e) => {
                    tracing::info!(error = %e, function, "the batch failed; its messages reappear");
                    failed.extend(event.records.iter().filter_map(|m| m.message_id.clone()));
                }
            }
        }
        let mut response = SqsBatchResponse::default();
        for id in failed {
            let mut f = BatchItemFailure::default();
            f.item_identifier = id;
            response.batch_item_failures.push(f);
        }
        Ok(response)
    }

    /// The stdout lines `functions` wrote since the last call.
    pub fn take_stdout(&self, functions: &[&str]) -> Vec<String> {
        let mut all = self.stdout.lock().expect("stdout");
        functions
            .iter()
            .flat_map(|f| all.remove(*f).unwrap_or_default())
            .collect()
    }

    /// Invoke `function` and read its answer as `T`; a function error is an error.
    pub async fn call<T: serde::de::DeserializeOwned>(
        &self,
        function: &str,
        event: &Value,
    ) -> Result<T> {
        let answer = self.invoke(function, event).await?;
        serde_json::from_value(answer).with_context(|| format!("{function}'s answer"))
    }

    /// The unqualified ARN of `function` (its aliases' ARNs add `:alias`).
    pub fn function_arn(&self, function: &str) -> Option<&str> {
        self.pools.get(function).map(|p| p.spec.arn.as_str())
    }

    /// The value of `var` in the environment `function`'s processes got.
    pub fn env_var(&self, function: &str, var: &str) -> Option<&str> {
        self.pools
            .get(function)
            .and_then(|p| p.spec.env.get(var))
            .map(String::as_str)
    }

    /// Every function that ran here: its processes, its clock and how many invocations it had.
    pub fn functions(&self) -> Vec<FunctionRun> {
        self.pools
            .iter()
            .map(|(name, p)| FunctionRun {
                name: name.clone(),
                processes: p.members.len(),
                clock: clock_of(name).to_owned(),
                invocations: p.invocations.load(std::sync::atomic::Ordering::Relaxed),
            })
            .collect()
    }

    /// The functions and their processes, for the report: `name ×n` (clock) each.
    pub fn describe(&self) -> String {
        self.pools
            .iter()
            .map(|(name, p)| format!("{name} ×{} ({})", p.members.len(), clock_of(name)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Stop every process.
    pub async fn stop(&self) {
        for p in self.pools.values() {
            for f in &p.members {
                f.stop().await;
            }
        }
    }
}

/// Which clock `function` reads under the host.
fn clock_of(function: &str) -> &'static str {
    if VIRTUAL_CLOCK.contains(&function) {
        "virtual clock"
    } else {
        "wall clock"
    }
}

/// How one invocation is made ([`Hosted::invoke_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Invocation<'a> {
    /// The ARN invoked (an alias's for meter-ingest); the function's own when `None`.
    pub invoked_arn: Option<&'a str>,
    /// The request id (an async retry keeps its first attempt's); fresh when `None`.
    pub request_id: Option<&'a str>,
    /// Kill the process this long into the invocation (a crash).
    pub crash_after: Option<Duration>,
}

/// One function of a hosted run, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionRun {
    /// Its binary's name.
    pub name: String,
    /// Its processes (its concurrency).
    pub processes: usize,
    /// `virtual clock` (libfaketime) or `wall clock`.
    pub clock: String,
    /// Invocations it had, retries and redeliveries included.
    pub invocations: u64,
}

/// The variables that put a process on the file's clock: libfaketime preloaded, the offset read
/// from the file at every call (`FAKETIME_NO_CACHE`), monotonic clocks left real so the
/// runtime's timers and timeouts are (`FAKETIME_DONT_FAKE_MONOTONIC`).
pub fn faketime_env(library: &Path, clock_file: &Path) -> [(&'static str, String); 4] {
    [
        ("LD_PRELOAD", library.display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE", clock_file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
}

/// Write libfaketime's relative form (`+N`/`-N` seconds from the real time) by rename, so a
/// process never reads half a file. The relative form, not `@<timestamp>`: a process reading an
/// absolute start time takes it relative to when it first read the file, about a second off in our trials; an offset
/// is exact from the moment it is written.
fn write_offset(file: &Path, seconds: i64) -> Result<()> {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{seconds:+}\n"))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, file).with_context(|| format!("writing {}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_file_is_signed_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("faketime");
        write_offset(&f, 3600).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "+3600\n");
        write_offset(&f, -5).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "-5\n");
    }
}
