//! Where the producer learns a stream's open shards: the [`ShardMapSource`] port, a ListShards
//! adapter ([`KinesisShardMapSource`]) and a settable in-memory source ([`StaticShardMapSource`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::types::Shard;

use crate::partition::{ShardMap, ShardRange};

/// Why the shard map could not be learned.
#[derive(Debug, thiserror::Error)]
pub enum ShardMapError {
    /// ListShards failed; the SDK error is the source.
    #[error("ListShards failed")]
    Call(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The listing does not describe a usable map (bad hash keys, overlaps).
    #[error("unusable shard listing: {0}")]
    Invalid(String),
}

/// The capability of listing a stream's open shards.
pub trait ShardMapSource: Send + Sync + 'static {
    /// The current open shards.
    fn shard_map(&self) -> impl Future<Output = Result<ShardMap, ShardMapError>> + Send;
}

/// ListShards over `aws-sdk-kinesis`, following `NextToken`.
#[derive(Debug, Clone)]
pub struct KinesisShardMapSource {
    client: Client,
    stream_name: String,
}

impl KinesisShardMapSource {
    /// Lists the shards of `stream_name` through `client`.
    pub fn new(client: Client, stream_name: impl Into<String>) -> Self {
        KinesisShardMapSource {
            client,
            stream_name: stream_name.into(),
        }
    }
}

impl ShardMapSource for KinesisShardMapSource {
    async fn shard_map(&self) -> Result<ShardMap, ShardMapError> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            // ListShards refuses StreamName together with NextToken.
            let req = match &token {
                Some(t) => self.client.list_shards().next_token(t),
                None => self.client.list_shards().stream_name(&self.stream_name),
            };
            let out = req
                .send()
                .await
                .map_err(|e| ShardMapError::Call(Box::new(e)))?;
            all.extend_from_slice(out.shards());
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => break,
            }
        }
        shard_map_from_listing(&all)
    }
}

/// Builds the map from a ListShards listing, keeping open shards only (a closed shard has an
/// ending sequence number; after a reshard its parent is still listed).
pub fn shard_map_from_listing(shards: &[Shard]) -> Result<ShardMap, ShardMapError> {
    let parse = |s: &str, id: &str| {
        s.parse::<u128>()
            .map_err(|_| ShardMapError::Invalid(format!("shard {id}: hash key {s:?}")))
    };
    let mut open = Vec::new();
    for s in shards {
        let closed = s
            .sequence_number_range()
            .and_then(|r| r.ending_sequence_number())
            .is_some();
        if closed {
            continue;
        }
        let range = s.hash_key_range().ok_or_else(|| {
            ShardMapError::Invalid(format!("shard {} has no hash range", s.shard_id()))
        })?;
        open.push(ShardRange {
            shard_id: s.shard_id().to_owned(),
            starting_hash_key: parse(range.starting_hash_key(), s.shard_id())?,
            ending_hash_key: parse(range.ending_hash_key(), s.shard_id())?,
        });
    }
    if open.is_empty() {
        return Err(ShardMapError::Invalid("no open shard".into()));
    }
    ShardMap::new(open).map_err(ShardMapError::Invalid)
}

/// A shard map held in memory; [`StaticShardMapSource::set`] simulates a reshard.
#[derive(Debug, Clone)]
pub struct StaticShardMapSource {
    map: Arc<Mutex<ShardMap>>,
    lookups: Arc<AtomicU64>,
}

impl StaticShardMapSource {
    /// A source answering `map`.
    pub fn new(map: ShardMap) -> Self {
        StaticShardMapSource {
            map: Arc::new(Mutex::new(map)),
            lookups: Arc::default(),
        }
    }

    /// Replaces the map.
    pub fn set(&self, map: ShardMap) {
        *self.map.lock().expect("shard map") = map;
    }

    /// How many times the map was asked for.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }
}

impl ShardMapSource for StaticShardMapSource {
    async fn shard_map(&self) -> Result<ShardMap, ShardMapError> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        Ok(self.map.lock().expect("shard map").clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::types::{HashKeyRange, SequenceNumberRange};

    fn shard(id: &str, start: u128, end: u128, closed: bool) -> Shard {
        let mut seq = SequenceNumberRange::builder().starting_sequence_number("1");
        if closed {
            seq = seq.ending_sequence_number("9");
        }
        Shard::builder()
            .shard_id(id)
            .hash_key_range(
                HashKeyRange::builder()
                    .starting_hash_key(start.to_string())
                    .ending_hash_key(end.to_string())
                    .build()
                    .unwrap(),
            )
            .sequence_number_range(seq.build().unwrap())
            .build()
            .unwrap()
    }

    #[test]
    fn closed_parents_are_left_out_after_a_split() {
        let half = u128::MAX / 2;
        let listing = [
            shard("shardId-0", 0, u128::MAX, true),
            shard("shardId-1", 0, half, false),
            shard("shardId-2", half + 1, u128::MAX, false),
        ];
        let m = shard_map_from_listing(&listing).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m.shards()[m.shard_index(7).unwrap()].shard_id, "shardId-1");
        assert_eq!(
            m.shards()[m.shard_index(u128::MAX).unwrap()].shard_id,
            "shardId-2"
        );
    }

    #[test]
    fn unusable_listings_are_errors() {
        assert!(shard_map_from_listing(&[]).is_err());
        assert!(shard_map_from_listing(&[shard("a", 0, 10, true)]).is_err());
        assert!(
            shard_map_from_listing(&[shard("a", 0, 10, false), shard("b", 5, 20, false)]).is_err()
        );
    }
}
