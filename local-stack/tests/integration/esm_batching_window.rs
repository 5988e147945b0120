//! The local event source mapping's batching window while it follows a stream, as Lambda's
//! poller does: once a poll has found records, the mapping keeps reading the shard until the
//! window passes, so records written a little apart go out in one invocation; with no window,
//! each poll's records go out at once.
//! (<https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>, "batching window").
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-local-stack --test integration esm_batching_window:: -- --include-ignored`

use crate::common;

use anyhow::{Context, Result};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_sdk_kinesis::primitives::Blob;
use awsmp_local_stack::kinesis_esm::{EsmOptions, KinesisEsm};
use awsmp_local_stack::local::LocalEnv;
use common::streams::fresh_stream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Records the writer puts, one every [`WRITE_EVERY`].
const RECORDS: usize = 12;
const WRITE_EVERY: Duration = Duration::from_millis(250);

/// Follow a fresh one-shard stream with `window` while [`RECORDS`] records are written
/// [`WRITE_EVERY`] apart; the sizes of the batches the function was invoked with.
async fn batches_while_writing(window: Duration) -> Result<Vec<usize>> {
    let env = LocalEnv::from_process();
    let kinesis = env.kinesis().await?;
    let stream = fresh_stream(&kinesis, "window", 1).await?;
    let dir = tempfile::tempdir()?;
    let options = EsmOptions {
        batching_window: window,
        ..EsmOptions::default()
    };
    let mut esm = KinesisEsm::new(
        kinesis.clone(),
        &stream,
        options,
        dir.path().join("esm.json"),
    )
    .await?;
    let done = AtomicBool::new(false);
    let sizes = Mutex::new(Vec::new());
    let writer = async {
        for i in 0..RECORDS {
            kinesis
                .put_record()
                .stream_name(&stream)
                .partition_key(format!("k{i}"))
                .data(Blob::new(format!("record {i}")))
                .send()
                .await
                .context("PutRecord")?;
            tokio::time::sleep(WRITE_EVERY).await;
        }
        done.store(true, Ordering::SeqCst);
        anyhow::Ok(())
    };
    let follow = esm.follow(
        |event: KinesisEvent| {
            sizes.lock().unwrap().push(event.records.len());
            async { Ok::<_, std::convert::Infallible>(KinesisEventResponse::default()) }
        },
        || done.load(Ordering::SeqCst),
    );
    let (written, report) = tokio::join!(writer, follow);
    written?;
    report?;
    kinesis
        .delete_stream()
        .stream_name(&stream)
        .send()
        .await
        .ok();
    let sizes = sizes.into_inner().unwrap();
    assert_eq!(
        sizes.iter().sum::<usize>(),
        RECORDS,
        "every record once: {sizes:?}"
    );
    Ok(sizes)
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn a_window_gathers_records_written_apart_into_one_batch() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    // GIVEN a window (8 s) longer than the writer takes (12 records over 3 s)
    // WHEN the mapping follows the stream while they are written
    let sizes = batches_while_writing(Duration::from_secs(8)).await?;
    // THEN they went out together: the first poll that found a record opened the window, and
    // the window outlasted the writes
    assert_eq!(sizes, vec![RECORDS], "one batch: {sizes:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn without_a_window_each_poll_delivers_at_once() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    // GIVEN no window; WHEN the mapping follows the stream while 12 records are written over
    // 3 s (a caught-up shard is polled every second)
    let sizes = batches_while_writing(Duration::ZERO).await?;
    // THEN the records went out over several polls
    assert!(sizes.len() >= 2, "several batches: {sizes:?}");
    Ok(())
}
