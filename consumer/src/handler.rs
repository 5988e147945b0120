//! The `kinesis-consumer` handler: one Kinesis batch in, usage rows out, partial batch failures
//! keyed by sequence number. The same function runs under `lambda_runtime` and under the local
//! event source mapping.
//!
//! Order of work for a batch, and why:
//! 1. Decode and verify every record (pure).
//! 2. Claim each record's dedup key. A claim that cannot be made is the batch's *cut*: that
//!    record and every later one is left for the retry, because a row may only ever hold a
//!    prefix of its lane.
//! 3. Record refused events (idempotent puts keyed by stream position).
//! 4. Fold the accepted events per (group, second); look up which group-hours are finalized.
//! 5. Per row: decide ([`resolve`]), record late / rejected parts, then one conditional write.
//! 6. Report the lowest failed record as the batch item failure: Lambda resumes there, and the
//!    rows' watermarks skip what this invocation already applied.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use awsmp_pipeline::contract::attrs::audit_timestamp;
use awsmp_pipeline::contract::{metrics, reasons};
use awsmp_pipeline::domain::bisect::backoff_full_jitter;
use awsmp_pipeline::domain::clock::Clock;
use awsmp_pipeline::domain::keys::GroupKey;
use awsmp_pipeline::emf::{Metric, MetricsSink};
use base64::Engine;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};

use crate::domain::fold::{BatchFold, RowContribution};
use crate::domain::record::{DecodedRecord, RefusedItem, StreamRecord, decode_record};
use crate::domain::row::{
    Decision, Observation, RecordMeta, Resolve, RowLimits, RowState, resolve, row_write,
};
use crate::domain::seq::SeqNum;
use crate::domain::verify::{Kind, VerifyPolicy};
use crate::error::{ConsumerError, Result};
use crate::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, RejectedEvent, RejectedEventStore,
    UsageRowWriter,
};

/// Rejected bytes up to this size are stored inline (base64); larger ones by reference only.
/// Our bound: keeps a rejected-events item far below DynamoDB's 400 KB item limit.
pub const MAX_INLINE_REJECTED_BYTES: usize = 8 * 1024;
/// Compare-and-set attempts on one row before the row is failed (and the batch retried).
pub const MAX_ROW_ATTEMPTS: u32 = 8;
/// Attempts for one store call on retryable errors.
pub const STORE_ATTEMPTS: u32 = 5;

/// Tunables of the handler (see [`crate::config::Config`] for their environment variables).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Event verification.
    pub verify: VerifyPolicy,
    /// How long a dedup claim lives.
    pub dedup_ttl: chrono::Duration,
    /// Usage-row TTL in days after the row's second (0 = no `ttl` attribute).
    pub usage_ttl_days: u32,
    /// Rejected-events TTL in days (0 = keep).
    pub rejected_ttl_days: u32,
    /// Concurrent store calls.
    pub concurrency: usize,
    /// Row limits.
    pub limits: RowLimits,
    /// First retry delay for a retryable store error (full jitter, doubling, capped at 2 s).
    pub backoff_base: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            verify: VerifyPolicy::default(),
            dedup_ttl: chrono::Duration::hours(48),
            usage_ttl_days: 365,
            rejected_ttl_days: 400,
            concurrency: 16,
            limits: RowLimits::default(),
            backoff_base: Duration::from_millis(25),
        }
    }
}

/// Everything the handler needs.
#[derive(Clone)]
pub struct Consumer {
    /// Tunables.
    pub settings: Settings,
    /// Dedup store.
    pub dedup: Arc<dyn DedupStore>,
    /// Rejected events and late usage.
    pub rejected: Arc<dyn RejectedEventStore>,
    /// The usage table.
    pub rows: Arc<dyn UsageRowWriter>,
    /// Finalized group-hours.
    pub finalized: Arc<dyn FinalizedGroups>,
    /// EMF metrics.
    pub metrics: MetricsSink,
    /// The clock (audit stamps, claim expiry).
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What one invocation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Stream records delivered.
    pub records: usize,
    /// Events accepted into the fold (excluding duplicates and records after a failure).
    pub events_accepted: u64,
    /// Quantity newly added to rows.
    pub quantity_written: u64,
    /// Events (or row parts) recorded as rejected, by reason.
    pub rejected: BTreeMap<String, u64>,
    /// Quantity recorded as late usage.
    pub late_quantity: u64,
    /// Records skipped as duplicates.
    pub dedup_hits: u64,
    /// Distinct rows in the batch.
    pub rows: usize,
    /// Conditional writes that changed a row.
    pub row_writes: u64,
    /// `UpdateItem` calls, including ones whose condition failed.
    pub update_items: u64,
    /// Row parts skipped because the row already held them (replays).
    pub replayed_parts: u64,
    /// The sequence number reported as the batch item failure, if any.
    pub failed_from: Option<String>,
}

/// One delivered record after parsing.
struct Slot {
    record: Result<StreamRecord, String>,
    /// Identifier for `batchItemFailures` (the sequence number as delivered).
    item_id: String,
    decoded: Option<DecodedRecord>,
    duplicate: bool,
}

/// Stream name from `arn:aws:kinesis:<region>:<account>:stream/<name>`.
fn stream_name(arn: Option<&str>) -> String {
    arn.and_then(|a| a.rsplit_once(":stream/").map(|(_, n)| n.to_owned()))
        .unwrap_or_else(|| "unknown-stream".to_owned())
}

/// Turn a delivered record into a [`StreamRecord`].
pub fn stream_record(r: &KinesisEventRecord) -> Result<StreamRecord, String> {
    let shard_id = r
        .event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(shard, _)| shard.to_owned())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("eventID {:?} has no shard id", r.event_id))?;
    Ok(StreamRecord {
        stream: stream_name(r.event_source_arn.as_deref()),
        shard_id,
        sequence_number: SeqNum::parse(&r.kinesis.sequence_number)?,
        partition_key: r.kinesis.partition_key.clone(),
        arrival: r.kinesis.approximate_arrival_timestamp.0,
        data: Bytes::from(r.kinesis.data.0.clone()),
    })
}

/// A delivered record built exactly as Lambda builds it (base64 data, partition key,
/// sequence number, arrival time, `eventSourceARN`, `eventID` = `shardId-…:seq`).
pub fn kinesis_record(
    stream_arn: &str,
    shard_id: &str,
    sequence_number: &str,
    partition_key: &str,
    arrival: DateTime<Utc>,
    data: Vec<u8>,
) -> KinesisEventRecord {
    let mut r = KinesisEventRecord::default();
    r.aws_region = stream_arn.split(':').nth(3).map(str::to_owned);
    r.event_id = Some(format!("{shard_id}:{sequence_number}"));
    r.event_name = Some("aws:kinesis:record".into());
    r.event_source = Some("aws:kinesis".into());
    r.event_source_arn = Some(stream_arn.to_owned());
    r.event_version = Some("1.0".into());
    r.kinesis.approximate_arrival_timestamp.0 = arrival;
    r.kinesis.data.0 = data;
    r.kinesis.partition_key = partition_key.to_owned();
    r.kinesis.sequence_number = sequence_number.to_owned();
    r.kinesis.kinesis_schema_version = Some("1.0".into());
    r
}

impl Consumer {
    /// Handle one batch; failures become `batchItemFailures`, never an `Err`.
    pub async fn handle(&self, event: KinesisEvent) -> KinesisEventResponse {
        self.process(event).await.0
    }

    async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            match op().await {
                Err(e) if e.is_retryable() && attempt + 1 < STORE_ATTEMPTS => {
                    let d = backoff_full_jitter(
                        attempt,
                        self.settings.backoff_base,
                        Duration::from_secs(2),
                        &mut rand::rng(),
                    );
                    tokio::time::sleep(d).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn ttl_days_after(&self, t: DateTime<Utc>, days: u32) -> Option<i64> {
        (days > 0).then(|| (t + chrono::Duration::days(i64::from(days))).timestamp())
    }

    /// Handle one batch and say what happened.
    pub async fn process(&self, event: KinesisEvent) -> (KinesisEventResponse, BatchReport) {
        let now = self.clock.now();
        let mut report = BatchReport {
            records: event.records.len(),
            ..BatchReport::default()
        };
        let mut slots: Vec<Slot> = event
            .records
            .iter()
            .map(|r| {
                let record = stream_record(r);
                let decoded = record
                    .as_ref()
                    .ok()
                    .map(|rec| decode_record(rec, &self.settings.verify));
                Slot {
                    item_id: r.kinesis.sequence_number.clone(),
                    record,
                    decoded,
                    duplicate: false,
                }
            })
            .collect();
        // The lowest record index that failed: Lambda resumes from it.
        let mut failed: Option<usize> = None;
        let fail_at = |failed: &mut Option<usize>, i: usize| {
            *failed = Some(failed.map_or(i, |f| f.min(i)));
        };

        // 2. Dedup claims (first occurrence of a key in the batch claims; later ones are hits).
        let mut first_of_key: HashMap<&str, usize> = HashMap::new();
        let mut to_claim = Vec::new();
        let mut in_batch_dups = Vec::new();
        for (i, s) in slots.iter().enumerate() {
            if let (Ok(rec), Some(d)) = (&s.record, &s.decoded) {
                match first_of_key.get(d.dedup_key.as_str()) {
                    Some(_) => in_batch_dups.push(i),
                    None => {
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
                }
            }
        }
        let claims: Vec<(usize, Result<ClaimOutcome>)> = futures::stream::iter(to_claim)
            .map(|(i, c)| async move { (i, self.retry(|| self.dedup.claim(&c)).await) })
            .buffered(self.settings.concurrency)
            .collect()
            .await;
        for (i, outcome) in claims {
            match outcome {
                Ok(ClaimOutcome::Duplicate) => slots[i].duplicate = true,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, seq = %slots[i].item_id, "dedup claim failed; the batch resumes from this record");
                    fail_at(&mut failed, i);
                }
            }
        }
        for i in in_batch_dups {
            slots[i].duplicate = true;
        }
        // Records from the cut on are left for the retry.
        let cut = failed.unwrap_or(slots.len());
        report.dedup_hits = slots[..cut].iter().filter(|s| s.duplicate).count() as u64;
        if report.dedup_hits > 0 {
            self.metrics
                .emit(Metric::counts(metrics::DEDUP_HIT, report.dedup_hits));
        }

        // 3. Refused events and malformed records.
        let mut refusals: Vec<(usize, RejectedEvent)> = Vec::new();
        for (i, s) in slots[..cut].iter().enumerate() {
            if s.duplicate {
                continue;
            }
            match (&s.record, &s.decoded) {
                (Err(why), _) => {
                    refusals.push((i, malformed_record(&event.records[i], why, now)));
                }
                (Ok(rec), Some(d)) => {
                    for item in &d.refused {
                        refusals.push((i, self.refused_event(rec, item, now)));
                    }
                }
                (Ok(_), None) => {}
            }
        }
        for (_, r) in &refusals {
            *report.rejected.entry(r.reason.clone()).or_default() += 1;
        }
        let refusal_results: Vec<(usize, Result<()>)> = futures::stream::iter(&refusals)
            .map(|(i, r)| async move { (*i, self.retry(|| self.rejected.put(r)).await) })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        for (i, res) in refusal_results {
            if let Err(e) = res {
                tracing::warn!(error = %e, "recording a rejected event failed; the batch resumes from its record");
                fail_at(&mut failed, i);
            }
        }
        for (_, r) in &refusals {
            self.metrics.emit(
                Metric::count(metrics::EVENT_REJECTED).with(metrics::REASON, r.reason.clone()),
            );
        }

        // 4. Fold.
        let mut fold = BatchFold::new();
        let mut metas: Vec<RecordMeta> = Vec::with_capacity(cut);
        let mut per_producer: BTreeMap<String, u64> = BTreeMap::new();
        for (i, s) in slots.iter_mut().enumerate().take(cut) {
            let meta = match &s.record {
                Ok(rec) => RecordMeta {
                    lane: rec.lane(),
                    seq: rec.sequence_number.clone(),
                },
                // Never folded; an empty slot keeps the indexes aligned.
                Err(_) => RecordMeta {
                    lane: crate::domain::seq::Lane::from_name(""),
                    seq: SeqNum::parse("0").expect("0 is a sequence number"),
                },
            };
            metas.push(meta);
            if s.duplicate {
                continue;
            }
            if let Some(d) = s.decoded.take() {
                for (sub, ev) in d.events {
                    report.events_accepted += 1;
                    *per_producer
                        .entry(ev.producer_id.clone().unwrap_or_else(|| "unknown".into()))
                        .or_default() += 1;
                    fold.add(i as u32, sub, ev);
                }
            }
        }
        for (producer, n) in per_producer {
            self.metrics.emit(
                Metric::counts(metrics::EVENTS_ACCEPTED, n).with(metrics::PRODUCER, producer),
            );
        }
        let rows = fold.into_rows();
        report.rows = rows.len();

        // 5. Finalized group-hours, then rows.
        let groups: Vec<GroupKey> = rows
            .iter()
            .map(|r| r.id.group())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let finalized = if groups.is_empty() {
            Ok(HashSet::new())
        } else {
            self.retry(|| self.finalized.finalized(&groups)).await
        };
        match finalized {
            Err(e) => {
                tracing::warn!(error = %e, "finalized-group lookup failed; no row written");
                if let Some(first) = rows.iter().map(|r| r.first_record() as usize).min() {
                    fail_at(&mut failed, first);
                }
            }
            Ok(finalized) => {
                let slots = &slots;
                let metas = &metas;
                let finalized = &finalized;
                let outcomes: Vec<(usize, Result<RowOutcome>)> = futures::stream::iter(&rows)
                    .map(|row| async move {
                        let fin = finalized.contains(&row.id.group());
                        (
                            row.first_record() as usize,
                            self.write_row(row, metas, slots, fin, now).await,
                        )
                    })
                    .buffer_unordered(self.settings.concurrency)
                    .collect()
                    .await;
                for (first, outcome) in outcomes {
                    match outcome {
                        Ok(o) => {
                            report.update_items += o.update_items;
                            report.row_writes += u64::from(o.written);
                            report.quantity_written += o.decision.accepted_quantity;
                            report.replayed_parts += o.decision.applied.len() as u64;
                            for rej in &o.decision.rejected {
                                *report.rejected.entry(rej.reason.to_owned()).or_default() += 1;
                                if rej.reason == reasons::LATE_USAGE {
                                    report.late_quantity += rej.quantity;
                                    self.metrics
                                        .emit(Metric::counts(metrics::LATE_USAGE, rej.quantity));
                                } else {
                                    self.metrics.emit(
                                        Metric::count(metrics::EVENT_REJECTED)
                                            .with(metrics::REASON, rej.reason),
                                    );
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "row write failed; the batch resumes from its first record");
                            fail_at(&mut failed, first);
                        }
                    }
                }
            }
        }
        if report.row_writes > 0 {
            self.metrics
                .emit(Metric::counts(metrics::ROWS_WRITTEN, report.row_writes));
        }
        if report.events_accepted > 0 {
            self.metrics.emit(Metric::value(
                metrics::WRITE_AMPLIFICATION,
                report.update_items as f64 * 1000.0 / report.events_accepted as f64,
            ));
        }
        let mut response = KinesisEventResponse::default();
        if let Some(i) = failed {
            report.failed_from = Some(slots[i].item_id.clone());
            response.add_failure(slots[i].item_id.clone());
        }
        (response, report)
    }

    fn refused_event(
        &self,
        rec: &StreamRecord,
        item: &RefusedItem,
        now: DateTime<Utc>,
    ) -> RejectedEvent {
        let e = item.event.as_ref();
        RejectedEvent {
            record_key: match item.sub {
                Some(sub) => format!(
                    "{}/{}/{}/{sub}",
                    rec.stream, rec.shard_id, rec.sequence_number
                ),
                None => format!(
                    "{}/{}/{}/record",
                    rec.stream, rec.shard_id, rec.sequence_number
                ),
            },
            reason: item.reason.to_owned(),
            detail: item.detail.clone(),
            stream: rec.stream.clone(),
            shard_id: rec.shard_id.clone(),
            sequence_number: rec.sequence_number.decimal().to_owned(),
            sub_sequence_numbers: item.sub.into_iter().collect(),
            partition_key: rec.partition_key.clone(),
            arrival: rec.arrival,
            data_base64: (item.data.len() <= MAX_INLINE_REJECTED_BYTES)
                .then(|| base64::engine::general_purpose::STANDARD.encode(&item.data)),
            data_len: item.data.len(),
            quantity: e.map(|e| e.quantity),
            event_id: e.map(|e| e.event_id.clone()),
            producer_id: e.and_then(|e| e.producer_id.clone()),
            license_arn: e.map(|e| e.license_arn.clone()),
            customer_aws_account_id: e.map(|e| e.customer_aws_account_id.clone()),
            dimension: e.map(|e| e.dimension.clone()),
            row_sort_key: None,
            rejected_at: now,
            ttl: self.ttl_days_after(now, self.settings.rejected_ttl_days),
        }
    }

    async fn write_row(
        &self,
        row: &RowContribution,
        metas: &[RecordMeta],
        slots: &[Slot],
        finalized: bool,
        now: DateTime<Utc>,
    ) -> Result<RowOutcome> {
        let key = row.id.key();
        let mut state: Option<Option<RowState>> = None;
        let mut update_items = 0;
        for _ in 0..MAX_ROW_ATTEMPTS {
            let observation = match &state {
                None => Observation::Unknown,
                Some(None) => Observation::Absent,
                Some(Some(st)) => Observation::Present(st),
            };
            let decision = match resolve(row, metas, observation, finalized, self.settings.limits) {
                Resolve::NeedsRead => {
                    let read = self.retry(|| self.rows.read(&key)).await?;
                    state = Some(read.as_ref().map(RowState::from_row));
                    continue;
                }
                Resolve::Decided(d) => d,
            };
            // Rejections are recorded before the write that moves the watermark past them.
            let recs: Vec<RejectedEvent> = decision
                .rejected
                .iter()
                .map(|rej| self.row_rejection(row, rej, metas, slots, now))
                .collect();
            futures::stream::iter(&recs)
                .map(|r| self.retry(|| self.rejected.put(r)))
                .buffer_unordered(self.settings.concurrency)
                .try_collect::<Vec<()>>()
                .await?;
            let Some(plan) = decision.write.clone() else {
                return Ok(RowOutcome {
                    decision,
                    written: false,
                    update_items,
                });
            };
            let write = row_write(
                &row.id,
                plan,
                self.ttl_days_after(row.id.instant(), self.settings.usage_ttl_days),
                audit_timestamp(now),
            );
            update_items += 1;
            if self.retry(|| self.rows.write(&write)).await? {
                return Ok(RowOutcome {
                    decision,
                    written: true,
                    update_items,
                });
            }
            let read = self.retry(|| self.rows.read(&key)).await?;
            state = Some(read.as_ref().map(RowState::from_row));
        }
        Err(ConsumerError::Contention(format!(
            "{} {}",
            key.license_arn, key.sort_key
        )))
    }

    fn row_rejection(
        &self,
        row: &RowContribution,
        rej: &crate::domain::row::PartRejection,
        metas: &[RecordMeta],
        slots: &[Slot],
        now: DateTime<Utc>,
    ) -> RejectedEvent {
        let part = &row.parts[rej.part];
        let meta = &metas[part.record as usize];
        let rec = slots[part.record as usize].record.as_ref().ok();
        let kind = match rej.kind {
            None => "all",
            Some(Kind::Allocated) => "allocated",
            Some(Kind::Unallocated) => "unallocated",
        };
        let key = row.id.key();
        let stream = rec.map(|r| r.stream.clone()).unwrap_or_default();
        let shard = rec.map(|r| r.shard_id.clone()).unwrap_or_default();
        RejectedEvent {
            record_key: format!(
                "{stream}/{shard}/{}/row/{}/{}/{kind}",
                meta.seq, key.license_arn, key.sort_key
            ),
            reason: rej.reason.to_owned(),
            detail: format!(
                "{} units ({kind} usage) of {} events not written to the row",
                rej.quantity,
                part.subs.len()
            ),
            stream,
            shard_id: shard,
            sequence_number: meta.seq.decimal().to_owned(),
            sub_sequence_numbers: part.subs.clone(),
            partition_key: rec.map(|r| r.partition_key.clone()).unwrap_or_default(),
            arrival: rec.map_or(now, |r| r.arrival),
            data_base64: None,
            data_len: 0,
            quantity: Some(rej.quantity),
            event_id: None,
            producer_id: None,
            license_arn: Some(row.id.license_arn.clone()),
            customer_aws_account_id: Some(row.id.customer_aws_account_id.clone()),
            dimension: Some(row.id.dimension.clone()),
            row_sort_key: Some(key.sort_key),
            rejected_at: now,
            ttl: self.ttl_days_after(now, self.settings.rejected_ttl_days),
        }
    }
}

struct RowOutcome {
    decision: Decision,
    written: bool,
    update_items: u64,
}

fn malformed_record(r: &KinesisEventRecord, why: &str, now: DateTime<Utc>) -> RejectedEvent {
    let stream = stream_name(r.event_source_arn.as_deref());
    let data = &r.kinesis.data.0;
    RejectedEvent {
        record_key: format!(
            "{stream}/{}/record",
            r.event_id.as_deref().unwrap_or(&r.kinesis.sequence_number)
        ),
        reason: reasons::MALFORMED_STREAM_RECORD.to_owned(),
        detail: why.to_owned(),
        stream,
        shard_id: String::new(),
        sequence_number: r.kinesis.sequence_number.clone(),
        sub_sequence_numbers: Vec::new(),
        partition_key: r.kinesis.partition_key.clone(),
        arrival: r.kinesis.approximate_arrival_timestamp.0,
        data_base64: (data.len() <= MAX_INLINE_REJECTED_BYTES)
            .then(|| base64::engine::general_purpose::STANDARD.encode(data)),
        data_len: data.len(),
        rejected_at: now,
        ..RejectedEvent::default()
    }
}
