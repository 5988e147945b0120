//! The stream heartbeat: one [`HEARTBEAT_MARKER`] record into every open shard of the usage
//! stream, so an idle shard's watermark advances (docs/guarantees.md, "Ingest watermark").
//! Scheduled every [`HEARTBEAT_PERIOD_SECS`](awsmp_contract::stream::HEARTBEAT_PERIOD_SECS)
//! seconds; the local runner calls [`beat`] before it polls the stream.
//!
//! Both watermark steps compare Kinesis `ListShards` with the stream's own partition of the
//! watermark table (a `Query`, [`WatermarkStore::shards`]): nothing reads the whole table.
//!
//! With a watermark table the same schedule first registers every shard that has no watermark
//! yet, at the epoch ([`register_shards`]), so a shard whose records were never applied holds
//! the fence rather than being invisible to it; and it retires drained parents after a reshard
//! ([`retire_drained_parents`]):
//! Lambda processes a child shard only after its parents are done
//! (<https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>), so once a child has
//! published a watermark, each closed parent was read to its end and is marked `drained` — it
//! no longer holds the fence, and the child, already publishing, takes its place.

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::Shard;
use awsmp_contract::stream::{HEARTBEAT_MARKER, HEARTBEAT_PARTITION_KEY};

use crate::error::{ConsumerError, Result};
use awsmp_aws::watermark::WatermarkStore;
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

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

/// The closed shards (an ending sequence number) that are not yet `drained` but have a child
/// in `published` (shard ids with a watermark item): the child's first batch means Lambda
/// finished them. A merge's child finishes both its parents.
pub fn drained_parents<'a>(
    shards: &'a [Shard],
    published: &BTreeSet<&str>,
    drained: &BTreeSet<&str>,
) -> Vec<&'a str> {
    let taken_over: BTreeSet<&str> = shards
        .iter()
        .filter(|c| published.contains(c.shard_id()))
        .flat_map(|c| [c.parent_shard_id(), c.adjacent_parent_shard_id()])
        .flatten()
        .collect();
    shards
        .iter()
        .filter(|s| {
            s.sequence_number_range()
                .is_some_and(|r| r.ending_sequence_number().is_some())
        })
        .map(Shard::shard_id)
        .filter(|id| taken_over.contains(id) && !drained.contains(id))
        .collect()
}

/// Mark drained every closed shard of `stream` a child has taken over from
/// ([`drained_parents`]); returns their ids.
pub async fn retire_drained_parents(
    client: &Client,
    stream: &str,
    watermarks: &dyn WatermarkStore,
) -> Result<Vec<String>> {
    let shards = list_shards(client, stream).await?;
    let table = watermarks.shards(stream).await.map_err(store_err)?;
    // A registered shard (at the epoch, [`register_shards`]) has not published yet.
    let published: BTreeSet<&str> = table
        .iter()
        .filter(|w| w.applied_through > DateTime::<Utc>::UNIX_EPOCH)
        .map(|w| w.shard_id.as_str())
        .collect();
    let drained: BTreeSet<&str> = table
        .iter()
        .filter(|w| w.drained)
        .map(|w| w.shard_id.as_str())
        .collect();
    let mut retired = Vec::new();
    for parent in drained_parents(&shards, &published, &drained) {
        watermarks
            .mark_drained(stream, parent)
            .await
            .map_err(store_err)?;
        retired.push(parent.to_owned());
    }
    Ok(retired)
}

/// The shards of `stream` without a watermark item in `known` (shard ids that have one).
pub fn unregistered<'a>(shards: &'a [Shard], known: &BTreeSet<&str>) -> Vec<&'a str> {
    shards
        .iter()
        .map(Shard::shard_id)
        .filter(|id| !known.contains(id))
        .collect()
}

/// Give every shard of `stream` that has no watermark item one at the epoch, so the fence
/// covers it before its consumer first publishes: a shard whose records were never applied
/// holds the fence instead of being invisible to it. The write is the store's never-backwards
/// `advance`, so a watermark published meanwhile stays. Returns the shards registered.
pub async fn register_shards(
    client: &Client,
    stream: &str,
    watermarks: &dyn WatermarkStore,
) -> Result<Vec<String>> {
    let shards = list_shards(client, stream).await?;
    let table = watermarks.shards(stream).await.map_err(store_err)?;
    let known: BTreeSet<&str> = table.iter().map(|w| w.shard_id.as_str()).collect();
    let mut registered = Vec::new();
    for shard in unregistered(&shards, &known) {
        watermarks
            .advance(stream, shard, DateTime::<Utc>::UNIX_EPOCH)
            .await
            .map_err(store_err)?;
        registered.push(shard.to_owned());
    }
    Ok(registered)
}

/// Every shard of `stream`, open and closed (`ListShards`, paged).
async fn list_shards(client: &Client, stream: &str) -> Result<Vec<Shard>> {
    let mut shards = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let req = client.list_shards();
        let req = match &next {
            Some(token) => req.next_token(token),
            None => req.stream_name(stream),
        };
        let page = req
            .send()
            .await
            .map_err(|e| kinesis_err(stream, "ListShards", e))?;
        shards.extend(page.shards().iter().cloned());
        next = page.next_token().map(str::to_owned);
        if next.is_none() {
            return Ok(shards);
        }
    }
}

fn store_err(e: awsmp_aws::error::StoreError) -> ConsumerError {
    ConsumerError::Store {
        store: "ingest watermark",
        retryable: e.is_retryable(),
        source: Box::new(e),
    }
}

fn kinesis_err(
    stream: &str,
    operation: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> ConsumerError {
    ConsumerError::Kinesis {
        operation,
        stream: stream.to_owned(),
        source: Box::new(e),
    }
}

/// One run of the `stream-heartbeat` schedule: with a watermark table, every shard without a
/// watermark registered ([`register_shards`]); a marker into every open shard ([`beat`]); then
/// drained parents retired ([`retire_drained_parents`]). Returns the markers put and the
/// parents retired.
pub async fn scheduled(
    client: &Client,
    stream: &str,
    watermarks: Option<&dyn WatermarkStore>,
) -> Result<(usize, usize)> {
    if let Some(w) = watermarks {
        register_shards(client, stream, w).await?;
    }
    let beats = beat(client, stream).await?.len();
    let retired = match watermarks {
        Some(w) => retire_drained_parents(client, stream, w).await?.len(),
        None => 0,
    };
    Ok((beats, retired))
}

/// Put one marker into each open shard of `stream`; the shards that got one.
pub async fn beat(client: &Client, stream: &str) -> Result<Vec<String>> {
    let shards = list_shards(client, stream).await?;
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
            .map_err(|e| kinesis_err(stream, "PutRecord", e))?;
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

    fn child(id: &str, parent: &str, adjacent: Option<&str>) -> Shard {
        let s = shard(id, "0", false);
        Shard::builder()
            .shard_id(s.shard_id())
            .set_hash_key_range(s.hash_key_range().cloned())
            .set_sequence_number_range(s.sequence_number_range().cloned())
            .parent_shard_id(parent)
            .set_adjacent_parent_shard_id(adjacent.map(str::to_owned))
            .build()
            .unwrap()
    }

    #[test]
    fn a_closed_parent_is_drained_once_a_child_has_published() {
        // GIVEN shard 0 split into 2 and 3, and shards 1 and 4 merged into 5
        let shards = [
            shard("shardId-000000000000", "0", true),
            shard("shardId-000000000001", "0", true),
            child("shardId-000000000002", "shardId-000000000000", None),
            child("shardId-000000000003", "shardId-000000000000", None),
            shard("shardId-000000000004", "0", true),
            child(
                "shardId-000000000005",
                "shardId-000000000001",
                Some("shardId-000000000004"),
            ),
        ];
        let none = BTreeSet::new();
        // WHEN no child has published, THEN no parent is drained
        let parents = BTreeSet::from(["shardId-000000000000", "shardId-000000000001"]);
        assert!(drained_parents(&shards, &parents, &none).is_empty());
        // WHEN one child of the split and the merge's child have published
        let published = BTreeSet::from(["shardId-000000000003", "shardId-000000000005"]);
        // THEN the split's parent and both of the merge's parents are drained
        assert_eq!(
            drained_parents(&shards, &published, &none),
            [
                "shardId-000000000000",
                "shardId-000000000001",
                "shardId-000000000004"
            ]
        );
        // AND a parent already drained is not marked again
        let drained = BTreeSet::from(["shardId-000000000000"]);
        assert_eq!(
            drained_parents(&shards, &published, &drained),
            ["shardId-000000000001", "shardId-000000000004"]
        );
    }

    #[test]
    fn every_shard_without_a_watermark_item_is_registered() {
        let shards = [
            shard("shardId-000000000000", "0", true),
            child("shardId-000000000001", "shardId-000000000000", None),
            child("shardId-000000000002", "shardId-000000000000", None),
        ];
        let known = BTreeSet::from(["shardId-000000000000", "shardId-000000000002"]);
        assert_eq!(unregistered(&shards, &known), ["shardId-000000000001"]);
        assert!(
            unregistered(
                &shards,
                &BTreeSet::from_iter(shards.iter().map(Shard::shard_id))
            )
            .is_empty()
        );
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
