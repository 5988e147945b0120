//! Cleanup: finalize the raw rows of an aggregated group, off the submit path.
//!
//! A message from a fresh aggregation carries the `Aggregated` status, its reason text and the
//! quantity folded from each row (`folded`, parallel to `keys`): a row is stamped `Aggregated`
//! only while it still holds that quantity; a row that grew after the fold gets the exact
//! difference recorded as late usage (`LateUsage` metric), once however often the message is
//! delivered (docs/guarantees.md, "Cleanup never stamps what was not billed"). A message of an
//! older version, without `folded`, is processed as before: stamped by key. A message without a
//! status only removes `meteringPending` (never restamps a possibly stale sum). Each key is one
//! idempotent `UpdateItem` (two more when the row grew), a bounded number at a time.

use super::deps::CleanupDeps;
use super::{STORE_RETRY, Services};
use crate::error::{PipelineError, Result};
use crate::ports::FoldedFinalize;
use awsmp_aws::emf::Metric;
use awsmp_aws::retry;
use awsmp_contract::keys::RowKey;
use awsmp_contract::limits::sqs::MAX_CLEANUP_KEYS_PER_MESSAGE;
use awsmp_contract::status::RawStatus;
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
    /// The quantity folded from each row of `keys` (same order); absent in messages of older
    /// versions and in status-less messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folded: Option<Vec<u64>>,
}

impl CleanupMessage {
    /// Messages of at most [`MAX_CLEANUP_KEYS_PER_MESSAGE`] keys each, without folded
    /// quantities (stamped by key).
    pub fn batches(
        status: Option<RawStatus>,
        reason: Option<&str>,
        keys: &[RowKey],
    ) -> Vec<String> {
        keys.chunks(MAX_CLEANUP_KEYS_PER_MESSAGE)
            .map(|chunk| Self::body(status, reason, chunk.to_vec(), None))
            .collect()
    }

    /// `Aggregated` messages of at most [`MAX_CLEANUP_KEYS_PER_MESSAGE`] rows each, every row
    /// with the quantity folded from it.
    pub fn folded_batches(reason: &str, rows: &[(RowKey, u64)]) -> Vec<String> {
        rows.chunks(MAX_CLEANUP_KEYS_PER_MESSAGE)
            .map(|chunk| {
                let (keys, folded) = chunk.iter().cloned().unzip();
                Self::body(
                    Some(RawStatus::Aggregated),
                    Some(reason),
                    keys,
                    Some(folded),
                )
            })
            .collect()
    }

    fn body(
        status: Option<RawStatus>,
        reason: Option<&str>,
        keys: Vec<RowKey>,
        folded: Option<Vec<u64>>,
    ) -> String {
        serde_json::to_string(&CleanupMessage {
            status: status.map(|s| s.as_str().to_owned()),
            reason: reason.map(str::to_owned),
            keys,
            folded,
        })
        .expect("cleanup message serializes")
    }
}

/// Process one cleanup message body, resolving cleanup's dependencies from `svc` (a process
/// resolves them once, at start, and calls [`cleanup_with`]). Returns how many rows were
/// finalized.
pub async fn cleanup(svc: &Services, body: &str) -> Result<usize> {
    cleanup_with(&CleanupDeps::from_services(svc)?, body).await
}

/// Process one cleanup message body. Returns how many rows were finalized.
pub async fn cleanup_with(svc: &CleanupDeps, body: &str) -> Result<usize> {
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
    if let Some(folded) = msg
        .folded
        .as_ref()
        .filter(|_| !awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::CleanupUnconditional))
    {
        return match (status, msg.reason.as_deref()) {
            (Some(RawStatus::Aggregated), Some(reason)) if folded.len() == msg.keys.len() => {
                cleanup_folded(svc, reason, &msg.keys, folded).await
            }
            _ => Err(PipelineError::BadMessage(
                "folded quantities need the Aggregated status and one quantity per key".into(),
            )),
        };
    }
    let usage = svc.usage.as_ref();
    let now = svc.clock.now();
    let stamp = status.zip(msg.reason.as_deref());
    let done: Vec<bool> = futures::stream::iter(&msg.keys)
        .map(|key| retry(&STORE_RETRY, move || usage.finalize_row(key, stamp, now)))
        .buffer_unordered(CLEANUP_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(done.into_iter().filter(|d| *d).count())
}

/// Stamp each row `Aggregated` only while it holds its folded quantity; record what it gained.
async fn cleanup_folded(
    svc: &CleanupDeps,
    reason: &str,
    keys: &[RowKey],
    folded: &[u64],
) -> Result<usize> {
    let usage = svc.usage.as_ref();
    let now = svc.clock.now();
    let done: Vec<(&RowKey, FoldedFinalize)> = futures::stream::iter(keys.iter().zip(folded))
        .map(|(key, &q)| async move {
            retry(&STORE_RETRY, || usage.finalize_folded(key, q, reason, now))
                .await
                .map(|outcome| (key, outcome))
        })
        .buffer_unordered(CLEANUP_CONCURRENCY)
        .try_collect()
        .await?;
    let mut finalized = 0;
    for (key, outcome) in done {
        match outcome {
            FoldedFinalize::Gone => {}
            FoldedFinalize::Stamped => finalized += 1,
            FoldedFinalize::Late {
                quantity,
                recorded_now,
            } => {
                finalized += 1;
                if recorded_now {
                    report_late(&svc.metrics, key, quantity);
                }
            }
        }
    }
    Ok(finalized)
}

/// A folded row held `quantity` more than was billed: log it and count it on `LateUsage`.
pub(crate) fn report_late(metrics: &awsmp_aws::emf::MetricsSink, key: &RowKey, quantity: u64) {
    tracing::error!(
        row = %key.sort_key,
        quantity,
        "usage added to a row after its group-hour was folded; recorded as late usage, not billed"
    );
    metrics.emit(Metric::counts(
        awsmp_contract::metrics::LATE_USAGE,
        quantity,
    ));
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
