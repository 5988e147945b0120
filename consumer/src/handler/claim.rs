//! Step 2: claim each record's dedup key. The first record of a key in the batch claims it;
//! later ones in the batch, and records whose key another record claimed, are duplicates. A
//! claim that cannot be made is the batch's *cut*: that record and every later one is left for
//! the retry, because a row may only ever hold a prefix of its lane.

use std::collections::HashMap;

use awsmp_pipeline::contract::metrics;
use awsmp_pipeline::emf::Metric;
use futures::StreamExt;

use super::{Batch, Consumer};
use crate::error::{ErrorChain, Result};
use crate::ports::{ClaimOutcome, DedupClaim};

impl Consumer {
    /// Claim every decoded record's dedup key, mark the duplicates, and return the cut: the
    /// index of the first record left for the retry (the batch's length when none is).
    pub(super) async fn claim_dedup_keys(&self, batch: &mut Batch<'_>) -> usize {
        let (to_claim, in_batch_dups) = self.claims_to_make(batch);
        let claims: Vec<(usize, Result<ClaimOutcome>)> = futures::stream::iter(to_claim)
            .map(|(i, c)| async move { (i, self.with_retry(|| self.dedup.claim(&c)).await) })
            .buffered(self.settings.concurrency)
            .collect()
            .await;
        for (i, outcome) in claims {
            match outcome {
                Ok(ClaimOutcome::Duplicate) => batch.slots[i].duplicate = true,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %ErrorChain(&e), seq = %batch.slots[i].item_id, "dedup claim failed; the batch resumes from this record");
                    batch.fail_at(i);
                }
            }
        }
        for i in in_batch_dups {
            batch.slots[i].duplicate = true;
        }
        // Records from the cut on are left for the retry.
        let cut = batch.failed.unwrap_or(batch.slots.len());
        let hits = batch.slots[..cut].iter().filter(|s| s.duplicate).count() as u64;
        batch.report.dedup_hits = hits;
        if hits > 0 {
            self.metrics.emit(Metric::counts(metrics::DEDUP_HIT, hits));
        }
        cut
    }

    /// The claims to make (the first record of each key), and the later records of a key
    /// already in the batch.
    fn claims_to_make(&self, batch: &Batch<'_>) -> (Vec<(usize, DedupClaim)>, Vec<usize>) {
        let now = batch.now;
        let mut first_of_key: HashMap<&str, usize> = HashMap::new();
        let mut to_claim = Vec::new();
        let mut in_batch_dups = Vec::new();
        for (i, s) in batch.slots.iter().enumerate() {
            let (Ok(rec), Some(d)) = (&s.record, &s.decoded) else {
                continue;
            };
            if first_of_key.contains_key(d.dedup_key.as_str()) {
                in_batch_dups.push(i);
                continue;
            }
            first_of_key.insert(&d.dedup_key, i);
            to_claim.push((
                i,
                DedupClaim {
                    key: d.dedup_key.clone(),
                    shard_id: rec.shard_id.clone(),
                    sequence_number: rec.sequence_number.clone(),
                    claimed_at: now,
                    expires_at: now + self.settings.dedup_ttl,
                },
            ));
        }
        (to_claim, in_batch_dups)
    }
}
