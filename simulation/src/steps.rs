//! One unit of work of each stage, as the scheduler runs it: produce, one consumer batch, one
//! SQS batch of a pipeline stage, one scheduled run; and the environment's moves (the clock,
//! heartbeats, resharding). Each invocation runs under the fault plan; a crashed one is
//! discarded as Lambda discards a crashed invocation (nothing acknowledged).

use crate::causes::Held;
use crate::esm::Completion;
use crate::faults::{EmptyTables, Fault};
use crate::stages::Step;
use crate::world::{World, lock};
use aws_lambda_events::sqs::SqsEvent;
use awsmp_contract::Event;
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::stream::{HEARTBEAT_MARKER, HEARTBEAT_PARTITION_KEY};
use awsmp_contract::time::bucket_for_offset;
use awsmp_pipeline::handlers::discoverer::{DiscovererInput, discover};
use awsmp_pipeline::handlers::{aggregator, cleanup, expiry, handle_sqs_batch, submitter};
use bytes::Bytes;
use chrono::Duration;
use rand::Rng;
use std::future::Future;
use std::pin::Pin;

/// A boxed step (nested steps recurse through the port wrappers).
pub type StepFuture<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// The SQS-driven stages.
#[derive(Debug, Clone, Copy)]
enum SqsStage {
    Aggregate,
    Cleanup,
}

/// Tokio seconds slept before each produce step: past the producer's shard-map refresh
/// interval (60 s by default, `producer/src/config.rs`).
pub(crate) const PRODUCER_SETTLE_SECS: u64 = 3600;

/// SQS batch size of the pipeline's queue mappings.
const SQS_BATCH: usize = 5;

pub use crate::names::{DIMENSIONS, account, dimension, license};

impl World {
    pub(crate) fn pick(&self, n: usize) -> usize {
        lock(&self.rng).random_range(0..n.max(1))
    }

    fn chance(&self, per_mille: u32) -> bool {
        lock(&self.rng).random_range(0..1000) < per_mille
    }

    /// The callers record a few events (some re-recorded with their ids, as a caller's retry
    /// does; the producer's hand-backs again), occasionally a poison record enters the stream
    /// directly; then the producer flushes.
    pub async fn produce(&self, new_events: usize) {
        // Let every producer timer due by now fire first (the shard-map refresh): Tokio's
        // paused time also moves with the handlers' retry sleeps, which the faults drawn decide,
        // so the producer must not see how far it moved.
        tokio::time::sleep(std::time::Duration::from_secs(PRODUCER_SETTLE_SECS)).await;
        let now = self.clock.now();
        let mut batch: Vec<Event> = std::mem::take(&mut lock(&self.truth).handed_back);
        let resent = batch.len();
        for _ in 0..new_events {
            batch.push(self.new_event(now));
        }
        self.send(batch, resent, new_events).await;
    }

    /// A fresh event of a random group, half of them with a caller-supplied id; counted.
    fn new_event(&self, now: chrono::DateTime<chrono::Utc>) -> Event {
        {
            let (l, d, q, lag, named) = {
                let mut rng = lock(&self.rng);
                (
                    rng.random_range(0..self.setup.licenses),
                    rng.random_range(0..self.setup.dimensions),
                    rng.random_range(1..=20u64),
                    rng.random_range(0..30i64),
                    rng.random_bool(0.5),
                )
            };
            let mut truth = lock(&self.truth);
            truth.events += 1;
            let mut e = Event::new(
                license(l),
                account(l),
                dimension(d),
                q,
                now - Duration::seconds(lag),
            );
            if named {
                e = e.with_event_id(format!("ev-{}", truth.events));
            }
            *truth
                .produced
                .entry((
                    e.license_arn.clone(),
                    e.customer_aws_account_id.clone(),
                    e.dimension.clone(),
                ))
                .or_default() += q;
            if named {
                truth.recorded.push(e.clone());
            }
            e
        }
    }

    /// Record `batch` (plus, sometimes, a re-record and injected inputs) and flush.
    async fn send(&self, mut batch: Vec<Event>, resent: usize, new_events: usize) {
        let again = {
            let truth = lock(&self.truth);
            (!truth.recorded.is_empty() && self.chance(150))
                .then(|| truth.recorded[self.pick(truth.recorded.len())].clone())
        };
        if let Some(e) = again {
            self.faults.count("caller-re-record");
            batch.push(e);
        }
        for e in batch {
            if let Err(err) = self.producer.record(e).await {
                self.log(format!("produce: record refused: {err}"));
            }
        }
        if self.chance(60) {
            self.poison();
        }
        if self.chance(50) {
            self.late_arrival();
        }
        let undelivered = match self.producer.flush().await {
            Ok(out) => out.undelivered,
            Err(err) => {
                self.log(format!("produce: flush failed: {err}"));
                Vec::new()
            }
        };
        let shards: Vec<String> = self
            .stream
            .shards()
            .iter()
            .map(|s| format!("{}={}", &s.id[8..], s.records.len()))
            .collect();
        self.log(format!(
            "produce: {new_events} new, {resent} handed back re-recorded, {} handed back now; stream {}",
            undelivered.len(),
            shards.join(" ")
        ));
        lock(&self.truth)
            .handed_back
            .extend(undelivered.into_iter().map(|u| u.event));
    }

    /// An event whose record carries an arrival time 5–40 minutes back: beyond the settle
    /// margin the ingest fence assumes, so its hour may already be aggregated. Declared: its
    /// units may end late (`LateUsage`), never silently lost or billed twice.
    fn late_arrival(&self) {
        let now = self.clock.now();
        let (l, d, q, back) = {
            let mut rng = lock(&self.rng);
            (
                rng.random_range(0..self.setup.licenses),
                rng.random_range(0..self.setup.dimensions),
                rng.random_range(1..=20u64),
                rng.random_range(300..=2400i64),
            )
        };
        self.put_late(l, d, q, now - Duration::seconds(back));
    }

    /// Put an event of license `l`, dimension `d`, quantity `q` into the stream stamped with
    /// `arrival`, declared late: its units may end `LateUsage`.
    pub(crate) fn put_late(
        &self,
        l: usize,
        d: usize,
        q: u64,
        arrival: chrono::DateTime<chrono::Utc>,
    ) {
        let mut truth = lock(&self.truth);
        truth.events += 1;
        let e = Event::new(license(l), account(l), dimension(d), q, arrival)
            .with_event_id(format!("late-{}", truth.events));
        let group = (
            e.license_arn.clone(),
            e.customer_aws_account_id.clone(),
            e.dimension.clone(),
        );
        *truth.produced.entry(group.clone()).or_default() += q;
        *truth.late.entry(group).or_default() += q;
        drop(truth);
        let key = awsmp_producer::partition::partition_key(
            &e.license_arn,
            &e.customer_aws_account_id,
            &e.dimension,
        );
        self.stream.put_at(
            &key,
            Bytes::from(awsmp_contract::wire::encode_event(&e)),
            arrival,
        );
        self.faults.count("late-arrival");
    }

    /// A late arrival (declared, as [`World::late_arrival`]'s) stamped with the second of one
    /// of `group`'s pending rows, so that row grows after the aggregator folded it.
    pub(crate) fn grow_folded_row(&self, group: &GroupKey) {
        let prefix = group.usage_prefix();
        let rows = self.usage.rows_with_prefix(&group.license_arn, &prefix);
        let second = rows.iter().find_map(|r| {
            let ts = r.get(awsmp_contract::attrs::TIMESTAMP)?.as_s()?;
            awsmp_contract::keys::parse_usage_timestamp(ts).ok()
        });
        let Some(arrival) = second else {
            return;
        };
        let q = lock(&self.rng).random_range(1..=5u64);
        let mut truth = lock(&self.truth);
        truth.events += 1;
        let e = Event::new(
            &group.license_arn,
            &group.customer_aws_account_id,
            &group.dimension,
            q,
            arrival,
        )
        .with_event_id(format!("late-{}", truth.events));
        let key = (
            e.license_arn.clone(),
            e.customer_aws_account_id.clone(),
            e.dimension.clone(),
        );
        *truth.produced.entry(key.clone()).or_default() += q;
        *truth.late.entry(key).or_default() += q;
        drop(truth);
        let pk = awsmp_producer::partition::partition_key(
            &e.license_arn,
            &e.customer_aws_account_id,
            &e.dimension,
        );
        self.stream.put_at(
            &pk,
            Bytes::from(awsmp_contract::wire::encode_event(&e)),
            arrival,
        );
        self.faults.count("late-arrival");
        self.log(format!("  late arrival into {group} at {arrival}"));
    }

    /// A poison record: bytes no producer writes, declared as injected.
    fn poison(&self) {
        let key = format!("poison-{}", lock(&self.truth).poison.len());
        let data = format!("\u{0}not an awsmp record: {key}");
        self.stream.put(&key, None, Bytes::from(data));
        self.faults.count("poison-record");
        lock(&self.truth).poison.push(key);
    }

    /// One consumer invocation on a ready lane, if any; false when none was ready.
    pub async fn deliver(&self) -> bool {
        let now = self.clock.now();
        let ready = lock(&self.esm).ready(&self.stream, now);
        if ready.is_empty() {
            return false;
        }
        let lane = ready[self.pick(ready.len())].clone();
        self.deliver_lane(&lane, true).await
    }

    /// One consumer invocation on `lane` (ready); false when it had nothing to deliver. With
    /// `crash_points`, the crash-point class may arm a crash in it and runs the pipeline after
    /// it failed (`simulation/src/crash_point.rs`).
    pub(crate) async fn deliver_lane(&self, lane: &(String, u32), crash_points: bool) -> bool {
        let now = self.clock.now();
        let Some(delivery) = lock(&self.esm).deliver(&self.stream, lane) else {
            return false;
        };
        if self.fail_poisoned(&delivery) {
            return true;
        }
        let armed = crash_points && self.crash_point_arm(&lane.0, &delivery.event);
        self.faults.begin(Step::ConsumerBatch.timeout());
        let (response, report) = self.consumer.process(delivery.event.clone()).await;
        let crashed = self.faults.end();
        let lost = !crashed
            && self.faults.roll(
                40,
                &[
                    "invoke-lost",
                    &lane.0,
                    &report.records.to_string(),
                    &now.to_string(),
                ],
            );
        if lost {
            self.faults.count("invocation-timeout");
        }
        let completion = if crashed || lost {
            Completion::FunctionError
        } else {
            Completion::Response(response.clone())
        };
        lock(&self.esm).complete(&delivery, &completion, now);
        if crashed || lost || !response.batch_item_failures.is_empty() {
            // The lane's watermark stays behind: the fence holds the hours it has not passed.
            crate::causes::note_lane_failure(self, Step::ConsumerBatch, &lane.0);
        }
        self.log(format!(
            "consume {}#{}: {} records, {} events, +{} units, {} dedup hits, rejected {:?}, {} failed{}",
            lane.0,
            lane.1,
            report.records,
            report.events_accepted,
            report.quantity_written,
            report.dedup_hits,
            report.rejected,
            response.batch_item_failures.len(),
            if crashed {
                " [crashed]"
            } else if lost {
                " [timed out after success]"
            } else {
                ""
            }
        ));
        if crash_points {
            self.crash_point_end(lane, armed, crashed || lost).await;
        }
        true
    }

    /// One message of an SQS-driven stage; the outcome as a trace string.
    async fn run_message(
        &self,
        stage: SqsStage,
        body: String,
    ) -> awsmp_pipeline::error::Result<String> {
        match stage {
            SqsStage::Aggregate => {
                *lock(&self.current_work) = Some(body.clone());
                let out = aggregator::aggregate(&self.svc, &body).await;
                *lock(&self.current_work) = None;
                out.map(|o| format!("{o:?}"))
            }
            SqsStage::Cleanup => cleanup::cleanup(&self.svc, &body)
                .await
                .map(|n| format!("{n} rows")),
        }
    }

    async fn logged_message(
        &self,
        stage: SqsStage,
        body: String,
    ) -> awsmp_pipeline::error::Result<()> {
        let r = self.run_message(stage, body).await;
        lock(&self.outcomes).push(match &r {
            Ok(s) => s.clone(),
            Err(e) => format!("error: {e}"),
        });
        r.map(|_| ())
    }

    async fn sqs_stage(&self, stage: SqsStage) -> bool {
        let (queue, name, step) = match stage {
            SqsStage::Aggregate => (&self.work, "aggregate", Step::Aggregate),
            SqsStage::Cleanup => (&self.cleanup, "cleanup", Step::Cleanup),
        };
        let Some(event): Option<SqsEvent> = queue.receive(SQS_BATCH) else {
            return false;
        };
        self.faults.begin(step.timeout());
        let saved = std::mem::take(&mut *lock(&self.outcomes));
        let response =
            handle_sqs_batch(name, event.clone(), |body| self.logged_message(stage, body)).await;
        let crashed = self.faults.end();
        queue.complete(&event, (!crashed).then_some(&response));
        crate::causes::note_sqs_failures(self, step, &event, crashed, &response);
        let outcomes = std::mem::replace(&mut *lock(&self.outcomes), saved);
        self.log(format!(
            "{name}: {} messages [{}]{}",
            event.records.len(),
            outcomes.join("; "),
            if crashed { " [crashed]" } else { "" }
        ));
        true
    }

    /// One aggregator invocation on the work queue.
    pub async fn aggregate(&self) -> bool {
        self.sqs_stage(SqsStage::Aggregate).await
    }

    /// One cleanup invocation on the cleanup queue.
    pub async fn clean(&self) -> bool {
        self.sqs_stage(SqsStage::Cleanup).await
    }

    /// One submitter run.
    pub async fn submit(&self) {
        let pending = self.pending_records();
        let pending_at_start = crate::causes::pending_groups(self);
        let candidates = crate::causes::submit_candidates(self, &pending_at_start);
        self.faults.begin(Step::Submit.timeout());
        let out = submitter::submit(&self.svc, &self.metering).await;
        let crashed = self.faults.end();
        if crashed || out.is_err() {
            crate::causes::note_failure(self, Step::Submit, Held::Groups(pending_at_start));
        }
        let line = match out {
            Ok(o) => {
                let capped = self.note_submitter_cap(pending, &o);
                // A record the run left pending after a fault on its own attempt keeps that
                // fault as its cause (`causes::expiry_cause`).
                let clean = !crashed && capped.is_empty() && o.halted.is_none();
                crate::causes::note_clean_submit(self, candidates, clean);
                format!(
                    "submit: {} read, {} calls, {:?}{capped}",
                    o.records_read, o.calls, o.statuses,
                )
            }
            Err(e) => format!("submit: error: {e}"),
        };
        self.log(format!("{line}{}", if crashed { " [crashed]" } else { "" }));
    }

    /// One expiry run.
    pub async fn expire(&self) {
        self.faults.begin(Step::Expire.timeout());
        self.declare_empty_tables();
        let out = expiry::expire(&self.svc).await;
        self.faults.set_empty_tables(EmptyTables::default());
        let crashed = self.faults.end();
        let line = match out {
            Ok(o) => format!(
                "expire: {} expired, {} unresolved",
                o.records_expired, o.records_unresolved
            ),
            Err(e) => format!("expire: error: {e}"),
        };
        self.log(format!("{line}{}", if crashed { " [crashed]" } else { "" }));
    }

    /// One discoverer run of `input`.
    pub async fn discover(&self, input: DiscovererInput) {
        self.note_lock_edge(input).await;
        let started = self.clock.now();
        self.faults.begin(Step::Discover.timeout());
        self.declare_empty_tables();
        let out = discover(&self.svc, input).await;
        self.faults.set_empty_tables(EmptyTables::default());
        let crashed = self.faults.end();
        if crashed || out.is_err() {
            // A meter run holds back the hour it targets, the flush every deprovisioning
            // license; age-out's own failure only delays exits.
            let held = match input {
                DiscovererInput::Meter { hour_offset } => {
                    Some(Held::Hour(bucket_for_offset(started, hour_offset)))
                }
                DiscovererInput::Ageout { .. } => None,
                _ => Some(Held::Every),
            };
            if let Some(held) = held {
                crate::causes::note_failure(self, Step::Discover, held);
            }
        }
        let line = match out {
            Ok(o) => format!(
                "discover {input:?}: {} enqueued, {} fenced, {} rows aged out",
                o.groups_enqueued, o.buckets_fenced, o.rows_expired
            ),
            Err(e) => format!("discover {input:?}: error: {e}"),
        };
        self.log(format!("{line}{}", if crashed { " [crashed]" } else { "" }));
    }

    /// The stream heartbeat: one marker into every open shard (its starting hash key), each
    /// put under the fault plan: a failed put is not retried (the next minute's run puts
    /// another), and a crash ends the run there, the later shards getting no marker this time.
    pub fn heartbeat(&self) {
        self.faults.begin(Step::Heartbeat.timeout());
        let mut put = 0;
        let mut failed = Vec::new();
        for (shard, start) in self.stream.open_shards() {
            if let Some(Fault::Throttle | Fault::FailBeforeApply | Fault::Crash) =
                self.faults.decide("heartbeat-put", &shard, true)
            {
                failed.push(shard);
                continue;
            }
            self.stream.put(
                HEARTBEAT_PARTITION_KEY,
                Some(start),
                Bytes::from_static(HEARTBEAT_MARKER),
            );
            put += 1;
        }
        let crashed = self.faults.end();
        // A shard without its marker: an idle shard's watermark stays behind.
        for shard in &failed {
            crate::causes::note_lane_failure(self, Step::Heartbeat, shard);
        }
        self.log(format!(
            "heartbeat: {put} markers{}",
            if crashed { " [crashed]" } else { "" }
        ));
    }

    /// The operator's step after a reshard (docs/guarantees.md, "Known limitations"): mark a
    /// closed shard drained once the mapping has read it to its end and every child has
    /// published a watermark. Marking it before a child published would drop the shard from
    /// the fence while the child, absent from the table, holds nothing back: the fence would
    /// pass over the child's unread records (a loss the simulation found).
    pub async fn mark_drained(&self) {
        let drained = lock(&self.esm).drained(&self.stream);
        let (known, published) = self.watermarks_drained().await;
        let shards = self.stream.shards();
        let children_published = |id: &String| {
            shards
                .iter()
                .filter(|s| s.parents.contains(id))
                .all(|c| published.contains(&c.id))
        };
        for id in drained
            .into_iter()
            .filter(|id| !known.contains(id) && children_published(id))
        {
            let _ = awsmp_aws::watermark::WatermarkStore::mark_drained(
                self.watermarks.as_ref(),
                crate::esm::STREAM_NAME,
                &id,
            )
            .await;
            self.log(format!("operator: {id} marked drained"));
        }
    }

    /// The shards marked drained, and every shard with a watermark.
    async fn watermarks_drained(&self) -> (Vec<String>, Vec<String>) {
        let all = awsmp_aws::watermark::WatermarkStore::shards(
            self.watermarks.as_ref(),
            crate::esm::STREAM_NAME,
        )
        .await
        .unwrap_or_default();
        let drained = all.iter().filter(|w| w.drained).map(|w| w.shard_id.clone());
        let published = all.iter().map(|w| w.shard_id.clone());
        (drained.collect(), published.collect())
    }

    /// Split or merge a shard.
    pub fn reshard(&self) {
        let index = self.pick(8);
        let done = if self.chance(600) {
            self.stream
                .split(index)
                .map(|(p, a, b)| format!("split {p} into {a} and {b}"))
        } else {
            self.stream
                .merge(index)
                .map(|(a, b, c)| format!("merged {a} and {b} into {c}"))
        };
        if let Some(line) = done {
            self.faults.count("reshard");
            self.log(line);
        }
    }

    /// Move the virtual clock forward.
    pub fn advance(&self, by: Duration) {
        let before = self.clock.now();
        self.clock.advance(by);
        let after = self.clock.now();
        let crossed = awsmp_contract::keys::HourBucket::containing(before)
            != awsmp_contract::keys::HourBucket::containing(after);
        if crossed {
            *lock(&self.interleavings)
                .entry("hours-crossed".into())
                .or_default() += 1;
        }
        self.log(format!("clock +{}s", by.num_seconds()));
    }
}
