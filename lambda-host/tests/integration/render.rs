//! The environments rendered for the local stack from `infra/functions.json` (no stack needed:
//! the env file here is the one `awsmp-local up` writes, built from `infra/resources.json`).

use crate::common::{manifest, workspace};
use awsmp_lambda_host::local::{self, LocalFunction};
use serde_json::Value;
use std::collections::BTreeMap;

/// An env file as `awsmp-local up` writes it: every resource's variable (`env` of
/// `infra/resources.json`), queue URLs in moto's shape, the endpoints, the product code.
pub fn env_file() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(workspace().join("infra/resources.json")).unwrap();
    let defs: Value = serde_json::from_str(&text).unwrap();
    let url = |name: &str| format!("http://127.0.0.1:4566/{}/{name}", local::LOCAL_ACCOUNT);
    let mut env = BTreeMap::new();
    for kind in ["tables", "streams", "buckets"] {
        for r in defs[kind].as_array().unwrap() {
            env.insert(
                r["env"].as_str().unwrap().into(),
                r["name"].as_str().unwrap().into(),
            );
        }
    }
    for q in defs["queues"].as_array().unwrap() {
        env.insert(
            q["env"].as_str().unwrap().into(),
            url(q["name"].as_str().unwrap()),
        );
        if let Some(dlq) = q["dlq"].as_object() {
            env.insert(
                dlq["env"].as_str().unwrap().into(),
                url(dlq["name"].as_str().unwrap()),
            );
        }
    }
    for (k, v) in [
        ("AWSMP_PRODUCT_CODE", "awsmpdemo0product0code0001"),
        ("AWSMP_USAGE_TABLE_TTL_DAYS", "7"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
        ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:4566"),
    ] {
        env.insert(k.into(), v.into());
    }
    env
}

fn by_name(functions: Vec<LocalFunction>) -> BTreeMap<String, LocalFunction> {
    functions
        .into_iter()
        .map(|f| (f.binary.clone(), f))
        .collect()
}

#[test]
fn every_function_renders_with_the_stacks_names_and_the_overlay_apart() {
    let env = env_file();
    let fns = by_name(local::render(&manifest(), &env).unwrap());
    assert_eq!(fns.len(), 11, "{:?}", fns.keys());
    for f in fns.values() {
        // Every variable the env file also names (the code's names, infra/resources.json) has
        // the env file's value: cross-stack names and ARNs became the local names.
        for (k, v) in &f.environment {
            if let Some(local) = env.get(k).filter(|_| k.starts_with("AWSMP_")) {
                assert_eq!(v, local, "{}: {k}", f.binary);
            }
            assert!(!v.contains("${"), "{}: {k}={v}", f.binary);
        }
        // The overlay is the stack's endpoints and region, and nothing of the template's.
        assert!(
            f.overlay.keys().all(|k| k.starts_with("AWS_")),
            "{:?}",
            f.overlay
        );
        assert_eq!(
            f.env()["AWS_ENDPOINT_URL_DYNAMODB"],
            "http://127.0.0.1:8000"
        );
    }
    let discoverer = &fns["discoverer"].environment;
    assert_eq!(discoverer["AWSMP_SUBSCRIBERS_TABLE"], "awsmp-subscribers");
    assert_eq!(
        discoverer["AWSMP_INGEST_WATERMARK_TABLE"],
        "awsmp-ingest-watermarks"
    );
    assert_eq!(discoverer["AWSMP_USAGE_STREAM"], "awsmp-usage-events");
    assert_eq!(discoverer["AWSMP_USAGE_TABLE_TTL_DAYS"], "7");
    assert_eq!(
        discoverer["AWSMP_METRICS_NAMESPACE"],
        "awsmp/local/awsmpdemo0product0code0001"
    );
    assert_eq!(
        fns["kinesis-consumer"].environment["AWSMP_USAGE_TABLE"],
        "awsmp-usage"
    );
    assert_eq!(
        fns["subscription"].environment["AWSMP_SUBSCRIPTION_DLQ_URL"],
        env["AWSMP_SUBSCRIPTION_DLQ_URL"]
    );
    assert_eq!(
        fns["meter-ingest"].environment["AWSMP_ALLOWED_ACCOUNTS"],
        local::LOCAL_ACCOUNT
    );
    // Each of the discoverer's 31 schedule targets, with its constant input.
    assert_eq!(fns["discoverer"].schedules.len(), 31);
    assert!(
        fns["discoverer"]
            .schedules
            .iter()
            .all(|s| s.input.is_some())
    );
}

#[test]
fn a_variable_the_template_names_differently_from_the_code_fails() {
    let mut m = manifest();
    let (stack, _, _) = m.function("subscription").unwrap();
    let stack = stack.to_owned();
    let f = m
        .stacks
        .get_mut(&stack)
        .unwrap()
        .functions
        .iter_mut()
        .find(|f| f.binary == "subscription")
        .unwrap();
    let dlq = f.environment.remove("AWSMP_SUBSCRIPTION_DLQ_URL").unwrap();
    f.environment
        .insert("AWSMP_SUBSCRIPTION_DEAD_LETTER_URL".into(), dlq);
    let err = local::render(&m, &env_file()).unwrap_err().to_string();
    assert!(
        err.contains("AWSMP_SUBSCRIPTION_DEAD_LETTER_URL")
            && err.contains("the code reads it as AWSMP_SUBSCRIPTION_DLQ_URL"),
        "{err}"
    );
}

#[test]
fn a_queue_the_stack_lacks_is_named() {
    let mut env = env_file();
    env.remove("AWSMP_WORK_QUEUE_URL");
    let err = local::render(&manifest(), &env).unwrap_err().to_string();
    assert!(err.contains("awsmp-metering-work"), "{err}");
}
