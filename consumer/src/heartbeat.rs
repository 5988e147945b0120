//! The stream heartbeat: one [`HEARTBEAT_MARKER`] record into every open shard of the usage
//! stream, so an idle shard's watermark advances (docs/guarantees.md, "Ingest watermark").
//! Scheduled every [`HEARTBEAT_PERIOD_SECS`](awsmp_pipeline::contract::stream::HEARTBEAT_PERIOD_SECS)
//! seconds; the local runner calls [`beat`] before it polls the stream.

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::Shard;
use awsmp_pipeline::contract::stream::{HEARTBEAT_MARKER, HEARTBEAT_PARTITION_KEY};

use crate::error::{ConsumerError, Result};

/// The open shards (no ending sequence number) and the hash key that routes a record to each:
/// its starting hash key.
pub fn open_shard_hash_keys(shards: &[Shard]) -> Vec<(String, String)> {
    shards
        .iter()
        .filter(|s| {
            s.sequence_number_range()
                .is_some_and(|r| r.ending_sequence_number().is_none())
        })
        .filter_map(|s| {
            let start = s.hash_key_range()?.starting_hash_key();
            Some((s.shard_id().to_owned(), start.to_owned()))
        })
        .collect()
}

/// Put one marker into each open shard of `stream`; the shards that got one.
pub async fn beat(client: &Client, stream: &str) -> Result<Vec<String>> {
    let err = |operation| {
        move |e: Box<dyn std::error::Error + Send + Sync>| ConsumerError::Kinesis {
            operation,
            stream: stream.to_owned(),
            source: e,
        }
    };
    let mut shards = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let req = client.list_shards();
        let req = match &next {
            Some(token) => req.next_token(token),
            None => req.stream_name(stream),
        };
        let page = req.send().await.map_err(|e| err("ListShards")(e.into()))?;
        shards.extend(page.shards().iter().cloned());
        next = page.next_token().map(str::to_owned);
        if next.is_none() {
            break;
        }
    }
    let targets = open_shard_hash_keys(&shards);
    for (_, hash_key) in &targets {
        client
            .put_record()
            .stream_name(stream)
            .partition_key(HEARTBEAT_PARTITION_KEY)
            .explicit_hash_key(hash_key)
            .data(Blob::new(HEARTBEAT_MARKER))
            .send()
            .await
            .map_err(|e| err("PutRecord")(e.into()))?;
    }
    Ok(targets.into_iter().map(|(shard, _)| shard).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::types::{HashKeyRange, SequenceNumberRange};

    fn shard(id: &str, start: &str, closed: bool) -> Shard {
        let mut range = SequenceNumberRange::builder().starting_sequence_number("1");
        if closed {
            range = range.ending_sequence_number("9");
        }
        Shard::builder()
            .shard_id(id)
            .hash_key_range(
                HashKeyRange::builder()
                    .starting_hash_key(start)
                    .ending_hash_key("340282366920938463463374607431768211455")
                    .build()
                    .unwrap(),
            )
            .sequence_number_range(range.build().unwrap())
            .build()
            .unwrap()
    }

    #[test]
    fn only_open_shards_get_a_marker_routed_by_their_starting_hash_key() {
        let shards = [
            shard("shardId-000000000000", "0", true),
            shard("shardId-000000000001", "0", false),
            shard(
                "shardId-000000000002",
                "170141183460469231731687303715884105728",
                false,
            ),
        ];
        assert_eq!(
            open_shard_hash_keys(&shards),
            [
                ("shardId-000000000001".to_owned(), "0".to_owned()),
                (
                    "shardId-000000000002".to_owned(),
                    "170141183460469231731687303715884105728".to_owned()
                ),
            ]
        );
    }
}
