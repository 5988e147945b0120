//! The deploy's sample events (`infra/events/*.json`, the shapes Lambda delivers to each
//! function) run through the pipeline handlers over in-memory stores, as each function's
//! binary runs them.

use crate::handler_support;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::SqsEvent;
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::handlers::aggregator::aggregate;
use awsmp_pipeline::handlers::cleanup::cleanup;
use awsmp_pipeline::handlers::discoverer::{DiscovererInput, discover};
use awsmp_pipeline::handlers::expiry::expire;
use awsmp_pipeline::handlers::handle_sqs_batch;
use handler_support::*;

fn sample(name: &str) -> String {
    let path = format!("{}/../infra/events/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn sqs_sample(name: &str) -> SqsEvent {
    serde_json::from_str(&sample(name)).expect("SQS event")
}

#[tokio::test]
async fn the_aggregator_sample_commits_its_group_and_enqueues_cleanup() {
    // GIVEN three pending rows of the sample's group
    let w = World::at(NOW);
    w.put_rows(&work_group(), &[(5, 5), (900, 4), (3599, 3)]);
    // WHEN the aggregator sample is delivered
    let svc = &w.svc;
    let response = handle_sqs_batch(
        "aggregator",
        sqs_sample("aggregator.json"),
        |body| async move { aggregate(svc, &body).await.map(drop) },
    )
    .await;
    // THEN no message failed, the group is committed with its sum, and cleanup is enqueued
    assert!(failed_ids(&response).is_empty());
    assert_eq!(w.aggregated(&work_group()).quantity, 12);
    assert_eq!(w.mem.cleanup_queue.messages().len(), 1);
}

#[tokio::test]
async fn the_cleanup_sample_finalizes_the_rows_it_names() {
    // GIVEN the rows the cleanup sample names, pending, with the quantities it folded
    let w = World::at(NOW);
    w.put_rows(&work_group(), &[(5, 5), (900, 4), (3599, 3)]);
    // WHEN the cleanup sample is delivered
    let svc = &w.svc;
    let response = handle_sqs_batch("cleanup", sqs_sample("cleanup.json"), |body| async move {
        cleanup(svc, &body).await.map(drop)
    })
    .await;
    // THEN every named row is no longer pending
    assert!(failed_ids(&response).is_empty());
    for second in [5, 900, 3599] {
        assert!(
            !is_pending(&w.row(&work_group(), second)),
            "second {second}"
        );
    }
}

#[tokio::test]
async fn the_discoverer_samples_are_valid_target_inputs_and_meter_enqueues() {
    // GIVEN a pending group in the hour before NOW's
    let w = World::at(NOW);
    w.put_rows(&group(DIMENSION, "2026-11-30T11"), &[(7, 2)]);
    // WHEN the three samples are parsed and the meter sample runs
    let meter: DiscovererInput = serde_json::from_str(&sample("discoverer-meter.json")).unwrap();
    for name in [
        "discoverer-ageout.json",
        "discoverer-flush-deprovisioning.json",
    ] {
        serde_json::from_str::<DiscovererInput>(&sample(name)).expect(name);
    }
    discover(&w.svc, meter).await.expect("meter run");
    // THEN the group is enqueued for aggregation
    assert_eq!(w.mem.work_queue.messages().len(), 1);
}

#[tokio::test]
async fn the_scheduled_samples_are_eventbridge_events_and_expiry_runs_on_one() {
    for name in ["submitter.json", "expiry.json"] {
        let event: EventBridgeEvent = serde_json::from_str(&sample(name)).expect(name);
        assert_eq!(event.detail_type, "Scheduled Event");
    }
    // GIVEN a pending aggregated record 25 hours back, WHEN expiry runs, THEN it expires
    let w = World::at(NOW);
    let stale = group(DIMENSION, "2026-11-29T11");
    w.put_aggregated(&stale, 3);
    let out = expire(&w.svc).await.expect("expiry run");
    assert_eq!(out.records_expired, 1);
    assert_eq!(
        w.aggregated(&stale).status,
        Some(AggregatedStatus::SubmissionExpired)
    );
}
