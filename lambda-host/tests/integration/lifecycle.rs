//! The events stack's functions, register, and the scheduled ones as processes on the local
//! stack: a Marketplace lifecycle event in an SQS batch with a malformed one beside it,
//! API Gateway proxy requests for register, and each scheduled function on EventBridge's
//! scheduled event.

use crate::common::{NEEDS_STACK, clients_env, drain_queue, own_queue, sample, start, start_with};
use crate::pipeline::{failed_ids, sqs_event};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn a_lifecycle_event_lands_in_the_subscribers_table_and_a_malformed_one_is_dead_lettered() {
    let _ = NEEDS_STACK;
    let env = clients_env();
    let body = sample("subscription.json")["Records"][0]["body"]
        .as_str()
        .unwrap()
        .to_owned();
    let license = format!("l-{}", crate::common::uuid_hex());
    let body = body.replace("l-0123456789abcdef0123456789abcdef", &license);
    let malformed = format!("{{not json {license}");
    let dlq = own_queue().await;
    let subscription = start_with("subscription", &[("AWSMP_SUBSCRIPTION_DLQ_URL", &dlq)]).await;
    let answer = subscription
        .invoke(
            &sqs_event("awsmp-subscription-events", &[body, malformed.clone()]),
            None,
        )
        .await
        .unwrap();
    subscription.stop().await;
    assert!(failed_ids(&answer).is_empty(), "{answer}");
    let rows = env
        .dynamodb()
        .await
        .unwrap()
        .scan()
        .table_name(env.get("AWSMP_SUBSCRIBERS_TABLE").unwrap())
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let ours: Vec<_> = rows
        .iter()
        .filter(|r| {
            r.get("licenseArn")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|l| l.contains(&license))
        })
        .collect();
    assert_eq!(ours.len(), 1, "{rows:?}");
    let dead = drain_queue(&dlq).await;
    assert_eq!(
        dead,
        vec![malformed],
        "the malformed message, dead-lettered"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn register_answers_api_gateway_proxy_requests() {
    let register = start("register").await;
    let post = register
        .invoke(&sample("register.json"), None)
        .await
        .unwrap();
    let mut get = sample("register.json");
    get["httpMethod"] = json!("GET");
    get["body"] = json!(null);
    let page = register.invoke(&get, None).await.unwrap();
    register.stop().await;
    // The sample's token is no token the simulator issued: the page says so, not a 5xx.
    let status = post["statusCode"].as_u64().unwrap();
    assert!((400..500).contains(&status), "{post}");
    assert_eq!(page["statusCode"], 200, "{page}");
    assert!(page["body"].as_str().unwrap().contains("<form"), "{page}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn each_scheduled_function_runs_on_its_scheduled_event() {
    let fns = crate::common::rendered();
    for (binary, sample_file) in [
        ("submitter", "submitter.json"),
        ("expiry", "expiry.json"),
        ("deprovision-cleanup", "deprovision-cleanup.json"),
    ] {
        // Each is the target of a schedule without a constant input: it gets the event.
        assert!(
            fns[binary].schedules.iter().all(|s| s.input.is_none()),
            "{binary}"
        );
        let f = start(binary).await;
        let answer = f.invoke(&sample(sample_file), None).await;
        f.stop().await;
        assert!(answer.is_ok(), "{binary}: {answer:?}");
    }
}
