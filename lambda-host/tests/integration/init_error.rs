//! A binary whose configuration is missing or wrong fails at init with a named error, posted to
//! `/runtime/init/error` (the binaries' `awsmp_aws::lambda_init`), which the host reports
//! as `Error::Init`.

use crate::common::{NEEDS_STACK, bin_dir, manifest};
use crate::render::env_file;
use awsmp_lambda_host::{Error, Function, local};

async fn init_error(
    binary: &str,
    edit: impl FnOnce(&mut std::collections::BTreeMap<String, String>),
) -> (String, String) {
    let f = local::render(&manifest(), &env_file())
        .unwrap()
        .into_iter()
        .find(|f| f.binary == binary)
        .unwrap();
    let mut spec = f.spec(&bin_dir());
    edit(&mut spec.env);
    match Function::start(spec).await {
        Err(Error::Init {
            error_type,
            error_message,
            ..
        }) => (error_type, error_message),
        Err(e) => panic!("{binary}: not an init error: {e}"),
        Ok(_) => panic!("{binary}: started"),
    }
}

#[tokio::test]
#[ignore = "needs the built binaries (cargo build --workspace --bins); run by scripts/test"]
async fn meter_ingest_without_its_allowlist_fails_at_init_named() {
    let (kind, message) = init_error("meter-ingest", |env| {
        env.remove("AWSMP_ALLOWED_ACCOUNTS");
    })
    .await;
    assert_eq!(kind, "Awsmp.ConfigurationError");
    assert!(message.starts_with("meter-ingest: "), "{message}");
    assert!(message.contains("AWSMP_ALLOWED_ACCOUNTS"), "{message}");
}

#[tokio::test]
#[ignore = "needs the built binaries (cargo build --workspace --bins); run by scripts/test"]
async fn a_malformed_value_and_a_missing_queue_fail_at_init_named() {
    let (kind, message) = init_error("kinesis-consumer", |env| {
        env.insert("AWSMP_MAX_CLOCK_SKEW_SECONDS".into(), "a minute".into());
    })
    .await;
    assert_eq!(kind, "Awsmp.ConfigurationError");
    assert!(
        message.contains("AWSMP_MAX_CLOCK_SKEW_SECONDS"),
        "{message}"
    );
    let (kind, message) = init_error("aggregator", |env| {
        env.remove("AWSMP_CLEANUP_QUEUE_URL");
    })
    .await;
    assert_eq!(kind, "Awsmp.ConfigurationError");
    assert!(message.contains("AWSMP_CLEANUP_QUEUE_URL"), "{message}");
}

#[tokio::test]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn every_binary_starts_with_its_rendered_environment() {
    let _ = NEEDS_STACK;
    for f in crate::common::rendered().into_values() {
        let started = crate::common::start_spec(f.spec(&bin_dir())).await;
        started.stop().await;
    }
}
