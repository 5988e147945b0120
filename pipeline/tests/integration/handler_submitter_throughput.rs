//! The submitter reports each run's throughput: its `BatchMeterUsage` calls and the records it
//! finalized (the ingest-throughput and pipeline-health dashboards chart them).

use crate::handler_support;

use awsmp_contract::metrics;
use awsmp_pipeline::handlers::submitter::submit;
use handler_support::*;

#[tokio::test]
async fn a_run_reports_its_calls_and_finalized_records() {
    // GIVEN two pending aggregated records of the hour two back
    let w = World::at(NOW);
    w.put_aggregated(&group("api_calls", HOUR), 4);
    w.put_aggregated(&group("storage_gb", HOUR), 6);
    // WHEN the submitter runs
    let out = submit(&w.svc, w.mem.metering.as_ref()).await.unwrap();
    // THEN one call billed both, and the run says so
    assert_eq!(out.calls, 1);
    assert_eq!(
        w.metrics.total(metrics::BATCH_METER_USAGE_CALLS.name()),
        1.0
    );
    assert_eq!(
        w.metrics.total(metrics::USAGE_RECORDS_FINALIZED.name()),
        2.0
    );
}

#[tokio::test]
async fn an_idle_run_reports_zeros() {
    let w = World::at(NOW);
    submit(&w.svc, w.mem.metering.as_ref()).await.unwrap();
    assert_eq!(
        w.metrics
            .points(metrics::BATCH_METER_USAGE_CALLS.name())
            .len(),
        1
    );
    assert_eq!(
        w.metrics.total(metrics::USAGE_RECORDS_FINALIZED.name()),
        0.0
    );
}
