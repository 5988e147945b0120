//! Fresh Kinesis streams on the local stack, for the tests that drive the event source
//! mapping directly.

use anyhow::Result;
use aws_sdk_kinesis::types::StreamStatus;

/// Wait until `stream` is ACTIVE (after a create, a split or a merge).
pub async fn wait_active(kinesis: &aws_sdk_kinesis::Client, stream: &str) -> Result<()> {
    for _ in 0..100 {
        let s = kinesis
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await?;
        if s.stream_description_summary()
            .is_some_and(|d| d.stream_status() == &StreamStatus::Active)
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    anyhow::bail!("{stream} did not become ACTIVE")
}

/// A new stream of `shards` shards named `awsmp-<prefix>-<8 random hex>`, once it is ACTIVE.
pub async fn fresh_stream(
    kinesis: &aws_sdk_kinesis::Client,
    prefix: &str,
    shards: i32,
) -> Result<String> {
    let stream = format!(
        "awsmp-{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    kinesis
        .create_stream()
        .stream_name(&stream)
        .shard_count(shards)
        .send()
        .await?;
    wait_active(kinesis, &stream).await?;
    Ok(stream)
}
