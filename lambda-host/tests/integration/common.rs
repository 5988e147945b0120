//! What every test here shares: the manifest, the local stack's variables, the built binaries,
//! and a function started under the host with its rendered environment.

use awsmp_lambda_host::local::{self, LocalFunction};
use awsmp_lambda_host::template::Manifest;
use awsmp_lambda_host::{Function, FunctionSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why the tests that run binaries on the stack are ignored by default.
pub const NEEDS_STACK: &str =
    "needs the built binaries and the local stack (awsmp-local up); run by scripts/test";

/// The workspace's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `infra/functions.json`.
pub fn manifest() -> Manifest {
    Manifest::load(&workspace().join("infra/functions.json")).expect("infra/functions.json")
}

/// Where the built binaries are: `AWSMP_BIN_DIR` (scripts/test exports it), else the profile
/// directory this test binary was built into (`<target>/debug`, the parent of its `deps`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AWSMP_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("<target>/debug/deps/integration-…")
        .to_owned()
}

/// The running local stack's variables: its env file (`$AWSMP_LOCAL_DIR/env`, else
/// `.awsmp-local/env`), else what the test's environment carries (scripts/test sources it).
pub fn stack_env() -> BTreeMap<String, String> {
    let dir = std::env::var_os("AWSMP_LOCAL_DIR")
        .map_or_else(|| workspace().join(".awsmp-local"), PathBuf::from);
    if let Ok(vars) = local::read_env_file(&dir.join("env")) {
        return vars;
    }
    std::env::vars()
        .filter(|(k, _)| k.starts_with("AWS"))
        .collect()
}

/// Every function rendered for the running stack.
pub fn rendered() -> BTreeMap<String, LocalFunction> {
    local::render(&manifest(), &stack_env())
        .expect("the manifest renders for the local stack")
        .into_iter()
        .map(|f| (f.binary.clone(), f))
        .collect()
}

/// Clients for the stack's services.
pub fn clients_env() -> awsmp_local_stack::local::LocalEnv {
    awsmp_local_stack::local::LocalEnv { vars: stack_env() }
}

/// Start `binary` under the host with its rendered environment.
pub async fn start(binary: &str) -> Function {
    let f = rendered()
        .remove(binary)
        .unwrap_or_else(|| panic!("{binary} is not a function of the templates"));
    start_spec(f.spec(&bin_dir())).await
}

/// Start a function from its spec; a failed init fails the test with the host's error.
pub async fn start_spec(spec: FunctionSpec) -> Function {
    match Function::start(spec).await {
        Ok(f) => f,
        Err(e) => panic!("{e}"),
    }
}

/// A fresh license of the local account, so tests sharing the stack never share rows.
pub fn fresh_license() -> String {
    format!(
        "arn:aws:license-manager::{}:license:l-{}",
        local::LOCAL_ACCOUNT,
        uuid_hex()
    )
}

/// 32 random hex digits.
pub fn uuid_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A sample event of `infra/events/`.
pub fn sample(name: &str) -> serde_json::Value {
    let path = workspace().join("infra/events").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).expect("sample")).expect("sample JSON")
}

/// Start `binary` with its rendered environment, `overrides` replacing variables the template
/// gives it (a test's own stream, so tests sharing the stack never read each other's records).
pub async fn start_with(binary: &str, overrides: &[(&str, &str)]) -> Function {
    let f = rendered()
        .remove(binary)
        .unwrap_or_else(|| panic!("{binary} is not a function of the templates"));
    let mut spec = f.spec(&bin_dir());
    for (k, v) in overrides {
        assert!(
            spec.env.contains_key(*k),
            "{binary}: the template gives no {k}"
        );
        spec.env.insert((*k).to_owned(), (*v).to_owned());
    }
    start_spec(spec).await
}

/// A stream of the test's own with `shards` shards, once it is active.
pub async fn own_stream(shards: i32) -> String {
    let kinesis = clients_env().kinesis().await.unwrap();
    let name = format!("lambda-host-{}", &uuid_hex()[..12]);
    kinesis
        .create_stream()
        .stream_name(&name)
        .shard_count(shards)
        .send()
        .await
        .unwrap();
    for _ in 0..100 {
        let s = kinesis
            .describe_stream_summary()
            .stream_name(&name)
            .send()
            .await
            .unwrap();
        let active = s
            .stream_description_summary()
            .is_some_and(|d| d.stream_status() == &aws_sdk_kinesis::types::StreamStatus::Active);
        if active {
            return name;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("stream {name} never became active");
}

/// Delete a stream made by [`own_stream`].
pub async fn delete_stream(name: &str) {
    let kinesis = clients_env().kinesis().await.unwrap();
    let _ = kinesis.delete_stream().stream_name(name).send().await;
}

/// A queue of the test's own; its URL.
pub async fn own_queue() -> String {
    let sqs = clients_env().sqs().await.unwrap();
    let name = format!("lambda-host-{}", &uuid_hex()[..12]);
    let q = sqs.create_queue().queue_name(&name).send().await.unwrap();
    q.queue_url().unwrap().to_owned()
}

/// Every message on a queue of [`own_queue`] (received once), then the queue deleted.
pub async fn drain_queue(url: &str) -> Vec<String> {
    let sqs = clients_env().sqs().await.unwrap();
    let mut bodies = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if got.messages().is_empty() {
            break;
        }
        bodies.extend(
            got.messages()
                .iter()
                .filter_map(|m| m.body().map(str::to_owned)),
        );
    }
    let _ = sqs.delete_queue().queue_url(url).send().await;
    bodies
}
