//! Cleanup: finalize the raw rows of an aggregated group, off the submit path.
//!
//! A message from a fresh aggregation carries the `Aggregated` status and its reason text;
//! a message without a status only removes `meteringPending` (never restamps a possibly
//! stale sum). Each key is one idempotent `UpdateItem`, a bounded number at a time.

use super::{STORE_RETRY, Services};
use crate::contract::limits::MAX_CLEANUP_KEYS_PER_MESSAGE;
use crate::contract::status::RawStatus;
use crate::domain::keys::RowKey;
use crate::error::{PipelineError, Result};
use awsmp_retry::retry;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

/// Concurrent `UpdateItem`s per message: all rows of a group share one partition (~1,000 WCU/s),
/// and this times the queue's maximum concurrency stays well under it.
pub const CLEANUP_CONCURRENCY: usize = 8;

/// One cleanup message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CleanupMessage {
    /// Terminal status to stamp, or none to only remove `meteringPending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Reason text to stamp with the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The raw rows.
    pub keys: Vec<RowKey>,
}

impl CleanupMessage {
    /// Messages of at most [`MAX_CLEANUP_KEYS_PER_MESSAGE`] keys each.
    pub fn batches(
        status: Option<RawStatus>,
        reason: Option<&str>,
        keys: &[RowKey],
    ) -> Vec<String> {
        keys.chunks(MAX_CLEANUP_KEYS_PER_MESSAGE)
            .map(|chunk| {
                serde_json::to_string(&CleanupMessage {
                    status: status.map(|s| s.as_str().to_owned()),
                    reason: reason.map(str::to_owned),
                    keys: chunk.to_vec(),
                })
                .expect("cleanup message serializes")
            })
            .collect()
    }
}

/// Process one cleanup message body. Returns how many rows were finalized.
pub async fn cleanup(svc: &Services, body: &str) -> Result<usize> {
    let msg: CleanupMessage =
        serde_json::from_str(body).map_err(|source| PipelineError::UndecodableMessage {
            what: "cleanup message",
            source,
        })?;
    let status = msg
        .status
        .as_deref()
        .map(|s| s.parse::<RawStatus>().map_err(PipelineError::BadMessage))
        .transpose()?;
    if status.is_some() != msg.reason.is_some() {
        return Err(PipelineError::BadMessage(
            "cleanup status and reason go together".into(),
        ));
    }
    let usage = svc.usage()?;
    let now = svc.clock.now();
    let stamp = status.zip(msg.reason.as_deref());
    let done: Vec<bool> = futures::stream::iter(&msg.keys)
        .map(|key| retry(&STORE_RETRY, move || usage.finalize_row(key, stamp, now)))
        .buffer_unordered(CLEANUP_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(done.into_iter().filter(|d| *d).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_at_most_100_keys() {
        let keys: Vec<RowKey> = (0..250)
            .map(|i| RowKey {
                license_arn: "l".into(),
                sort_key: format!("a#d#{i}"),
            })
            .collect();
        let msgs = CleanupMessage::batches(Some(RawStatus::Aggregated), Some("r"), &keys);
        assert_eq!(msgs.len(), 3);
        let back: Vec<CleanupMessage> = msgs
            .iter()
            .map(|m| serde_json::from_str(m).unwrap())
            .collect();
        assert_eq!(
            back.iter().map(|m| m.keys.len()).collect::<Vec<_>>(),
            [100, 100, 50]
        );
        assert_eq!(
            back.into_iter().flat_map(|m| m.keys).collect::<Vec<_>>(),
            keys
        );
        let plain: CleanupMessage =
            serde_json::from_str(&CleanupMessage::batches(None, None, &keys[..1])[0]).unwrap();
        assert_eq!(plain.status, None);
    }
}
