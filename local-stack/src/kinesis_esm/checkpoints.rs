//! The mapping's checkpoints (last sequence number done, per shard), persisted in a JSON file
//! together with the identity of the stream they were recorded on (its ARN and creation
//! time). A file recorded on another stream — the stream was deleted and created again under
//! the same name, e.g. by `awsmp-local down` + `up` — is reset with a warning rather than
//! handed to Kinesis, which would refuse its sequence numbers.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Which stream checkpoints belong to: the ARN repeats when a stream is created again under
/// the same name, the creation time does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamIdentity {
    /// The stream's ARN.
    pub stream_arn: String,
    /// `StreamCreationTimestamp`, epoch milliseconds.
    pub created_millis: i64,
}

/// Checkpoints of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Checkpoints {
    /// The stream they were recorded on (absent in files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stream: Option<StreamIdentity>,
    /// Shard id → last sequence number done.
    pub(super) shards: BTreeMap<String, String>,
}

impl Checkpoints {
    /// Checkpoints of `stream` as read from `bytes` (a file's contents, `None` when there is
    /// no file), and why they were reset, if they were: the file was unreadable, or recorded
    /// on another stream. A file without a stream identity keeps its shards (each is checked
    /// against the stream when it is used) and adopts `stream`.
    pub(super) fn for_stream(
        bytes: Option<&[u8]>,
        stream: &StreamIdentity,
    ) -> (Self, Option<String>) {
        let fresh = Self {
            stream: Some(stream.clone()),
            shards: BTreeMap::new(),
        };
        let Some(bytes) = bytes else {
            return (fresh, None);
        };
        match serde_json::from_slice::<Self>(bytes) {
            Err(e) => (fresh, Some(format!("unreadable checkpoint file ({e})"))),
            Ok(read) => match &read.stream {
                Some(recorded) if recorded != stream => {
                    let why = format!(
                        "checkpoints recorded on {} created at {} ms, not on this stream (created at {} ms)",
                        recorded.stream_arn, recorded.created_millis, stream.created_millis
                    );
                    (fresh, Some(why))
                }
                _ => (
                    Self {
                        stream: Some(stream.clone()),
                        shards: read.shards,
                    },
                    None,
                ),
            },
        }
    }

    /// Read the file at `path`, if there is one.
    pub(super) fn read_file(path: &Path) -> Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).context(format!("reading {}", path.display())),
        }
    }

    /// Persist to `path` (atomically: a killed tick never leaves a torn checkpoint file).
    pub(super) fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(created_millis: i64) -> StreamIdentity {
        StreamIdentity {
            stream_arn: "arn:aws:kinesis:us-east-1:000000000000:stream/s".into(),
            created_millis,
        }
    }

    fn file(stream: Option<StreamIdentity>) -> Vec<u8> {
        let cps = Checkpoints {
            stream,
            shards: BTreeMap::from([("shardId-000000000000".into(), "4960".into())]),
        };
        serde_json::to_vec(&cps).unwrap()
    }

    #[test]
    fn checkpoints_of_the_same_stream_are_kept() {
        let (cps, reset) = Checkpoints::for_stream(Some(&file(Some(stream(1)))), &stream(1));
        assert_eq!(reset, None);
        assert_eq!(cps.shards.len(), 1);
    }

    #[test]
    fn checkpoints_of_a_stream_created_again_under_the_same_name_are_reset() {
        let (cps, reset) = Checkpoints::for_stream(Some(&file(Some(stream(1)))), &stream(2));
        assert!(reset.unwrap().contains("not on this stream"));
        assert!(cps.shards.is_empty());
        assert_eq!(cps.stream, Some(stream(2)));
    }

    #[test]
    fn an_unreadable_checkpoint_file_is_reset() {
        let (cps, reset) = Checkpoints::for_stream(Some(b"{\"shards\": 3"), &stream(1));
        assert!(reset.unwrap().contains("unreadable"));
        assert!(cps.shards.is_empty());
    }

    #[test]
    fn a_file_without_a_stream_keeps_its_shards_and_adopts_the_stream() {
        let (cps, reset) = Checkpoints::for_stream(Some(&file(None)), &stream(7));
        assert_eq!(reset, None);
        assert_eq!(cps.shards.len(), 1);
        assert_eq!(cps.stream, Some(stream(7)));
    }

    #[test]
    fn no_file_means_no_checkpoints() {
        let (cps, reset) = Checkpoints::for_stream(None, &stream(1));
        assert_eq!((cps.shards.len(), reset), (0, None));
    }
}
