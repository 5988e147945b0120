//! Step 2: claim what the batch applies (docs/guarantees.md, "Dedup").
//!
//! 1. A record with refused items claims its record key (so a duplicated bad record is
//!    recorded once); a record whose key another record claimed is a duplicate.
//! 2. Every accepted event of the other records is checked by its id: a generated id against
//!    its lane's applied sequences (one read and one write per lane per batch), a
//!    caller-supplied id by a per-id claim. Duplicate events are dropped from their record.
//!
//! A claim that cannot be made is the batch's *cut*: that record and every later one is left
//! for the retry, because a row may only ever hold a prefix of its lane.

use std::collections::{BTreeMap, HashMap};

use awsmp_aws::emf::Metric;
use awsmp_contract::metrics;
use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::{Batch, Consumer};
use crate::domain::accepted::EventId;
use crate::domain::dedup::{LaneState, Verdict, id_claim_key, lane_key, owner_token};
use crate::error::{ConsumerError, ErrorChain, Result};
use crate::ports::{ClaimOutcome, DedupClaim, LaneItem};

/// Compare-and-set rounds on one lane before the batch is cut there (not a backoff: a round
/// that loses the race re-reads at once).
pub const MAX_LANE_CAS_ROUNDS: u32 = 8;

/// One accepted event: (slot, position in the slot's events).
type EventRef = (usize, usize);

/// The per-event claims of a batch.
#[derive(Default)]
struct EventClaims {
    /// Caller-supplied ids: the first event of each id claims it.
    ids: Vec<(EventRef, DedupClaim)>,
    /// Later events of an id already in the batch.
    in_batch_dups: Vec<EventRef>,
    /// Generated ids per lane, in batch order: (event, owner token, sequence).
    lanes: BTreeMap<String, Vec<(EventRef, String, u64)>>,
}

impl Consumer {
    /// Claim the batch's record keys and event ids, drop the duplicates, and return the cut:
    /// the index of the first record left for the retry (the batch's length when none is).
    pub(super) async fn claim_dedup_keys(&self, batch: &mut Batch<'_>) -> usize {
        let record_hits = self.claim_record_keys(batch).await;
        let cut = batch.failed.unwrap_or(batch.slots.len());
        let plan = self.event_claims(batch, cut);
        let mut dups: Vec<EventRef> = plan.in_batch_dups.clone();
        // Id claims and lane claims touch different items and neither decides the other, so
        // they run at once (each bounded by `Settings::concurrency`).
        let (ids, lanes) = futures::join!(
            self.claim_ids(plan.ids),
            self.claim_lanes(plan.lanes, batch.now)
        );
        let id_hits = apply_id_claims(batch, ids, &mut dups) + plan.in_batch_dups.len();
        let seq_hits = apply_lane_claims(batch, lanes, &mut dups);
        drop_events(batch, dups);
        let cut = batch.failed.unwrap_or(batch.slots.len());
        self.report_hits(batch, record_hits, id_hits as u64, seq_hits);
        cut
    }

    /// Claim every lane's sequences: per lane, its key, one verdict per claim (or the error)
    /// and the claiming events.
    async fn claim_lanes(
        &self,
        lanes: BTreeMap<String, Vec<(EventRef, String, u64)>>,
        now: DateTime<Utc>,
    ) -> Vec<LaneResult> {
        futures::stream::iter(lanes)
            .map(|(key, claims)| async move {
                let refs = claims.iter().map(|c| c.0).collect();
                let pairs = claims.into_iter().map(|(_, o, s)| (o, s)).collect();
                let verdicts = self.claim_lane(&key, pairs, now).await;
                (key, verdicts, refs)
            })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await
    }

    fn report_hits(&self, batch: &mut Batch<'_>, records: u64, ids: u64, seqs: u64) {
        batch.report.dedup_hits = records + ids + seqs;
        for (kind, n) in [
            (metrics::DEDUP_KIND_RECORD, records),
            (metrics::DEDUP_KIND_ID_CLAIM, ids),
            (metrics::DEDUP_KIND_SEQUENCE, seqs),
        ] {
            if n > 0 {
                self.metrics
                    .emit(Metric::counts(metrics::DEDUP_HIT, n).with(metrics::DEDUP_KIND, kind));
            }
        }
    }

    /// Claim the record keys of records with refused items; mark the duplicates. The hits
    /// before the cut.
    async fn claim_record_keys(&self, batch: &mut Batch<'_>) -> u64 {
        let (to_claim, in_batch_dups) = self.record_claims(batch);
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
        let cut = batch.failed.unwrap_or(batch.slots.len());
        batch.slots[..cut].iter().filter(|s| s.duplicate).count() as u64
    }

    /// The record claims to make (the first record of each key, among records with refused
    /// items), and the later records of a key already in the batch.
    fn record_claims(&self, batch: &Batch<'_>) -> (Vec<(usize, DedupClaim)>, Vec<usize>) {
        let mut first_of_key: HashMap<&str, usize> = HashMap::new();
        let mut to_claim = Vec::new();
        let mut in_batch_dups = Vec::new();
        for (i, s) in batch.slots.iter().enumerate() {
            let (Ok(rec), Some(d)) = (&s.record, &s.decoded) else {
                continue;
            };
            if d.refused.is_empty() {
                continue;
            }
            if first_of_key.contains_key(d.dedup_key.as_str()) {
                in_batch_dups.push(i);
                continue;
            }
            first_of_key.insert(&d.dedup_key, i);
            let claim =
                self.claim_for(&d.dedup_key, &rec.shard_id, &rec.sequence_number, batch.now);
            to_claim.push((i, claim));
        }
        (to_claim, in_batch_dups)
    }

    fn claim_for(
        &self,
        key: &str,
        shard_id: &str,
        seq: &crate::domain::seq::SeqNum,
        now: DateTime<Utc>,
    ) -> DedupClaim {
        DedupClaim {
            key: key.to_owned(),
            shard_id: shard_id.to_owned(),
            sequence_number: seq.clone(),
            claimed_at: now,
            expires_at: now + self.settings.dedup_ttl,
        }
    }

    /// Sort every accepted event of the records before `cut` (not duplicates) by id form.
    fn event_claims(&self, batch: &Batch<'_>, cut: usize) -> EventClaims {
        let mut plan = EventClaims::default();
        let mut first_of_id: HashMap<&str, EventRef> = HashMap::new();
        for (i, s) in batch.slots.iter().enumerate().take(cut) {
            let (Ok(rec), Some(d), false) = (&s.record, &s.decoded, s.duplicate) else {
                continue;
            };
            let owner = owner_token(&rec.shard_id, &rec.sequence_number);
            for (j, (_, ev)) in d.events.iter().enumerate() {
                match &ev.event_id {
                    EventId::Generated(id) => {
                        let lane = plan.lanes.entry(lane_key(id)).or_default();
                        lane.push(((i, j), owner.clone(), id.seq));
                    }
                    EventId::Supplied(id) => {
                        let id: &str = id;
                        if first_of_id.contains_key(id) {
                            plan.in_batch_dups.push((i, j));
                            continue;
                        }
                        first_of_id.insert(id, (i, j));
                        let key = id_claim_key(id);
                        let claim =
                            self.claim_for(&key, &rec.shard_id, &rec.sequence_number, batch.now);
                        plan.ids.push(((i, j), claim));
                    }
                }
            }
        }
        plan
    }

    /// Make the per-id claims: each event with its outcome.
    async fn claim_ids(
        &self,
        ids: Vec<(EventRef, DedupClaim)>,
    ) -> Vec<(EventRef, Result<ClaimOutcome>)> {
        futures::stream::iter(ids)
            .map(|(r, c)| async move { (r, self.with_retry(|| self.dedup.claim(&c)).await) })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await
    }

    /// Claim `(owner, seq)` pairs on lane `key` by compare-and-set; one verdict each.
    async fn claim_lane(
        &self,
        key: &str,
        claims: Vec<(String, u64)>,
        now: DateTime<Utc>,
    ) -> Result<Vec<Verdict>> {
        for _ in 0..MAX_LANE_CAS_ROUNDS {
            let stored = self.with_retry(|| self.dedup.read_lane(key)).await?;
            let version = stored.as_ref().map(|l| l.version);
            let mut state = match stored {
                // An expired lane (past the dedup window) starts again.
                Some(l) if l.expires_at >= now => {
                    LaneState::decode(&l.state).map_err(|detail| ConsumerError::MalformedItem {
                        table: "dedup".into(),
                        detail,
                    })?
                }
                _ => LaneState::default(),
            };
            let verdicts = state.claim_keeping(&claims, self.settings.lane_owned_ranges);
            if !verdicts.contains(&Verdict::New) {
                return Ok(verdicts);
            }
            let item = LaneItem {
                key: key.to_owned(),
                version: version.map_or(1, |v| v + 1),
                state: state.encode(),
                expires_at: now + self.settings.dedup_ttl,
            };
            if self
                .with_retry(|| self.dedup.write_lane(&item, version))
                .await?
            {
                return Ok(verdicts);
            }
        }
        Err(ConsumerError::LaneContention {
            lane: key.to_owned(),
        })
    }
}

/// One lane's claim: its key, a verdict per claim (or the error) and the claiming events.
type LaneResult = (String, Result<Vec<Verdict>>, Vec<EventRef>);

/// Mark the failed id claims' records and push the duplicates onto `dups`. The number of
/// duplicates.
fn apply_id_claims(
    batch: &mut Batch<'_>,
    claims: Vec<(EventRef, Result<ClaimOutcome>)>,
    dups: &mut Vec<EventRef>,
) -> usize {
    let mut hits = 0;
    for (r, outcome) in claims {
        match outcome {
            Ok(ClaimOutcome::Duplicate)
                if !crate::mutants::active(crate::mutants::Mutant::DedupIgnoresEventIds) =>
            {
                hits += 1;
                dups.push(r);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %ErrorChain(&e), seq = %batch.slots[r.0].item_id, "event id claim failed; the batch resumes from this record");
                batch.fail_at(r.0);
            }
        }
    }
    hits
}

/// Mark the records of failed lanes and push the duplicates onto `dups`. The number of
/// duplicates.
fn apply_lane_claims(
    batch: &mut Batch<'_>,
    lanes: Vec<LaneResult>,
    dups: &mut Vec<EventRef>,
) -> u64 {
    let mut hits = 0;
    for (key, verdicts, refs) in lanes {
        match verdicts {
            Ok(v) => {
                for (r, v) in refs.into_iter().zip(v) {
                    if v == Verdict::Duplicate {
                        hits += 1;
                        dups.push(r);
                    }
                }
            }
            Err(e) => {
                let first = refs.iter().map(|r| r.0).min().unwrap_or(0);
                tracing::warn!(error = %ErrorChain(&e), lane = %key, "lane claim failed; the batch resumes from its first record");
                batch.fail_at(first);
            }
        }
    }
    hits
}

/// Drop the duplicate events from their records (a record left empty folds nothing).
fn drop_events(batch: &mut Batch<'_>, mut dups: Vec<EventRef>) {
    dups.sort_unstable();
    for (i, j) in dups.into_iter().rev() {
        if let Some(d) = batch.slots[i].decoded.as_mut() {
            d.events.remove(j);
        }
    }
}
