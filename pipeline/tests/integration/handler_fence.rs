//! The ingest-watermark fence of the discoverer over in-memory stores: an hour is not
//! aggregated until every shard's consumer has applied the stream past its end plus the
//! settle margin (docs/guarantees.md, "Ingest watermark").

use crate::handler_support;

use awsmp_aws::deprovisioning::Deprovisioning;
use awsmp_aws::watermark::WatermarkStore;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::time::deprovisioning_flush_buckets;
use awsmp_pipeline::handlers::discoverer::{DiscovererInput, discover};
use handler_support::*;

/// The usage stream the discoverer fences on.
const STREAM: &str = "usage";

const METER: DiscovererInput = DiscovererInput::Meter { hour_offset: 2 };

fn fenced_world(now: &str) -> World {
    World::with_config(
        now,
        config(&[
            ("AWSMP_INGEST_WATERMARK_TABLE", "ingest-watermarks"),
            ("AWSMP_USAGE_STREAM", STREAM),
        ]),
    )
}

fn enqueued(queue: &awsmp_pipeline::adapters::memory::MemoryQueue) -> Vec<GroupKey> {
    let mut groups: Vec<GroupKey> = queue
        .messages()
        .iter()
        .map(|m| GroupKey::from_work_message(m).expect("work message"))
        .collect();
    groups.sort();
    groups
}

#[tokio::test]
async fn usage_written_by_a_lagging_consumer_is_in_the_hour_when_it_is_aggregated() {
    // GIVEN rows of 10:00 pending, two shards, one of which the consumer has applied only up to
    // 10:59:30 (it lags: records that arrived before 11:00 are still unapplied)
    let w = fenced_world(NOW);
    w.put_rows(&work_group(), &[(5, 1)]);
    let marks = &w.mem.watermarks;
    marks
        .advance(STREAM, "shardId-0", at("2026-11-30T12:09:00Z"))
        .await
        .unwrap();
    marks
        .advance(STREAM, "shardId-1", at("2026-11-30T10:59:30Z"))
        .await
        .unwrap();

    // WHEN the discoverer runs for 10:00
    let out = discover(&w.svc, METER).await.unwrap();

    // THEN the hour is not enqueued: it stays pending
    assert_eq!(out.groups_enqueued, 0);
    assert!(w.mem.work_queue.messages().is_empty());
    // AND the watermark lag (now − the lowest watermark) is reported
    assert_eq!(
        w.metrics.total(metrics::INGEST_WATERMARK_LAG.name()),
        (at(NOW) - at("2026-11-30T10:59:30Z")).num_seconds() as f64
    );

    // WHEN the consumer catches up (its row for 10:59:59 is written) but not past the margin
    w.put_rows(&work_group(), &[(3599, 2)]);
    marks
        .advance(STREAM, "shardId-1", at("2026-11-30T11:01:00Z"))
        .await
        .unwrap();
    assert_eq!(discover(&w.svc, METER).await.unwrap().groups_enqueued, 0);

    // AND then past the hour's end plus the two-minute margin
    marks
        .advance(STREAM, "shardId-1", at("2026-11-30T11:02:00Z"))
        .await
        .unwrap();
    let out = discover(&w.svc, METER).await.unwrap();

    // THEN the group is enqueued, with both rows still pending for the aggregator
    assert_eq!(out.groups_enqueued, 1);
    assert_eq!(enqueued(&w.mem.work_queue), [work_group()]);
    let pending = w.mem.usage.rows().iter().filter(|r| is_pending(r)).count();
    assert_eq!(pending, 2);
}

#[tokio::test]
async fn a_drained_parent_shard_does_not_hold_the_fence() {
    let w = fenced_world(NOW);
    w.put_rows(&work_group(), &[(5, 1)]);
    let marks = &w.mem.watermarks;
    marks
        .advance(STREAM, "shardId-parent", at("2026-11-30T10:30:00Z"))
        .await
        .unwrap();
    marks
        .advance(STREAM, "shardId-child", at("2026-11-30T12:09:00Z"))
        .await
        .unwrap();
    assert_eq!(discover(&w.svc, METER).await.unwrap().groups_enqueued, 0);
    marks.mark_drained(STREAM, "shardId-parent").await.unwrap();
    assert_eq!(discover(&w.svc, METER).await.unwrap().groups_enqueued, 1);
}

#[tokio::test]
async fn no_shard_has_published_yet_so_nothing_is_aggregated_and_the_stall_alarm_fires() {
    let w = fenced_world(NOW);
    w.put_rows(&work_group(), &[(5, 1)]);
    assert_eq!(discover(&w.svc, METER).await.unwrap().groups_enqueued, 0);
    assert_eq!(
        w.metrics.total(metrics::INGEST_WATERMARK_STALLED.name()),
        1.0
    );
}

#[tokio::test]
async fn a_stalled_shard_raises_the_alarm_metric_long_before_the_window_is_at_risk() {
    let w = fenced_world(NOW);
    let marks = &w.mem.watermarks;
    let stalled = || w.metrics.total(metrics::INGEST_WATERMARK_STALLED.name());
    // 10 minutes behind: normal, no alarm.
    marks
        .advance(STREAM, "shardId-0", at("2026-11-30T12:00:00Z"))
        .await
        .unwrap();
    discover(&w.svc, METER).await.unwrap();
    assert_eq!(stalled(), 0.0);
    // Exactly 15 minutes behind: at the bound, not past it: no alarm.
    w.clock.set(at("2026-11-30T12:15:00Z"));
    discover(&w.svc, METER).await.unwrap();
    assert_eq!(stalled(), 0.0);
    // A second more: the alarm metric fires.
    w.clock.set(at("2026-11-30T12:15:01Z"));
    discover(&w.svc, METER).await.unwrap();
    assert_eq!(stalled(), 1.0);
}

#[tokio::test]
async fn the_deprovisioning_flush_takes_the_current_hour_only_once_the_consumer_caught_up() {
    // GIVEN a license expiring at 12:55, with pending usage in the current hour (12:00), at
    // 12:36 — inside the flush's 20-minute lead — while a shard is applied only up to 12:30
    let w = fenced_world("2026-11-30T12:36:00Z");
    w.mem.deprovisioning.insert(Deprovisioning {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        expiry: at("2026-11-30T12:55:00Z"),
    });
    let current = group(DIMENSION, "2026-11-30T12");
    w.put_rows(&current, &[(6, 1)]);
    w.put_rows(&work_group(), &[(5, 1)]);
    let marks = &w.mem.watermarks;
    marks
        .advance(STREAM, "shardId-0", at("2026-11-30T12:30:00Z"))
        .await
        .unwrap();

    // WHEN the flush runs, THEN only the closed hour goes out: the current one is still being
    // written by the lagging consumer
    let out = discover(&w.svc, DiscovererInput::FlushDeprovisioning)
        .await
        .unwrap();
    assert_eq!(enqueued(&w.mem.deprovision_queue), [work_group()]);
    // AND the run reports every hour of the license it examined, the current one fenced
    let examined = deprovisioning_flush_buckets(
        at("2026-11-30T12:36:00Z"),
        at("2026-11-30T12:55:00Z"),
        &w.svc.config.time,
    )
    .len();
    assert!(examined > 1, "{examined}");
    assert_eq!((out.buckets, out.buckets_fenced), (examined, 1));

    // WHEN the shard is applied past the flush instant (expiry − 20 min) plus the margin,
    // THEN the current hour goes too
    marks
        .advance(STREAM, "shardId-0", at("2026-11-30T12:37:00Z"))
        .await
        .unwrap();
    let out = discover(&w.svc, DiscovererInput::FlushDeprovisioning)
        .await
        .unwrap();
    assert!(enqueued(&w.mem.deprovision_queue).contains(&current));
    assert_eq!((out.buckets, out.buckets_fenced), (examined, 0));
}

#[tokio::test]
async fn the_fence_waits_only_for_the_usage_streams_shards() {
    // GIVEN the usage stream's shard applied past the hour, and another stream metered into
    // the same table (a load run's) far behind
    let w = fenced_world(NOW);
    w.put_rows(&work_group(), &[(5, 1)]);
    let marks = &w.mem.watermarks;
    marks
        .advance(STREAM, "shardId-0", at("2026-11-30T12:09:00Z"))
        .await
        .unwrap();
    marks
        .advance("another-stream", "shardId-0", at("2026-11-30T09:00:00Z"))
        .await
        .unwrap();
    // WHEN the discoverer runs for 10:00, THEN the other stream does not hold the hour
    assert_eq!(discover(&w.svc, METER).await.unwrap().groups_enqueued, 1);
    // AND the lag is the usage stream's
    assert_eq!(
        w.metrics.total(metrics::INGEST_WATERMARK_LAG.name()),
        (at(NOW) - at("2026-11-30T12:09:00Z")).num_seconds() as f64
    );
}

#[tokio::test]
async fn a_watermark_table_without_the_usage_stream_is_a_configuration_error() {
    // GIVEN a fence configured without AWSMP_USAGE_STREAM
    let w = World::with_config(
        NOW,
        config(&[("AWSMP_INGEST_WATERMARK_TABLE", "ingest-watermarks")]),
    );
    w.put_rows(&work_group(), &[(5, 1)]);
    // WHEN the discoverer runs, THEN it fails loudly and enqueues nothing
    let err = discover(&w.svc, METER).await.unwrap_err();
    assert!(
        matches!(err, awsmp_pipeline::PipelineError::Config(ref m) if m.contains("AWSMP_USAGE_STREAM")),
        "{err}"
    );
    assert!(w.mem.work_queue.messages().is_empty());
}
