//! Bound group handles ([`Meter`]): one group validated, keyed and hashed once, then
//! `record(timestamp, quantity)` per event with no string to validate, hash, copy or free
//! (docs/producer-internals.md, "Bound group handles (`Meter`)").

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::Producer;
use super::prepare::{Check, Prepared, Route, quantity_slack};
use crate::error::ProducerError;
use crate::fold::{Charged, FoldKey, FoldSlot, GroupFields, GroupHash, Joined, SumHead};
use crate::partition::{partition_hash, partition_key};
use awsmp_contract::error::ValidationError;
use awsmp_contract::event::{
    Event, GroupRef, UsageAllocation, second_in_range, truncate_to_millis, validate_account_id,
    validate_dimension, validate_license_arn, validate_timestamp,
};
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::wire::v2::{generated_single_len, put_generated_single, single_head};
use awsmp_contract::wire::{WireVersion, encode_event};

/// A [`Producer`] bound to one group (license ARN, customer account, dimension), for a hot
/// loop that records the same group again and again — what `metrics`' `Counter` handles or
/// OpenTelemetry's bound instruments are to a metric name.
///
/// [`Producer::meter`] checks the group once and keeps everything an event of it needs: its
/// partition key and MD5 hash (its shard and id lane), the collapse table's hash of it and
/// (v2) the encoded head of its payloads. [`Meter::record`] then takes a timestamp and a
/// quantity: with collapse it adds them to the open (group, second) sum (no buffer charge,
/// no allocation when the sum is open); without collapse it takes the lane's next sequence
/// and writes the v2 payload into the staging buffer. The records, ids, bytes, retries,
/// ordering, back-pressure and metrics are those of [`Producer::record`] for the same
/// events (an event of the meter has no id of its own — one is generated — and the
/// producer's default producer id).
///
/// Cheap to clone (one reference count); `Send + Sync`, so one meter can be shared by
/// tasks. It holds a producer handle: like any handle, drop it (or call
/// [`Producer::shutdown`]) for the producer to finish.
///
/// ```
/// # async fn demo(producer: awsmp_producer::Producer) -> Result<(), Box<dyn std::error::Error>> {
/// let arn = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
/// let requests = producer.meter(arn, "210987654321", "requests")?;
/// for _ in 0..1_000 {
///     requests.record(chrono::Utc::now(), 1).await?;
/// }
/// # Ok(()) }
/// ```
///
/// A fast path (docs/producer-internals.md, "The fast-path rule"): its equivalence test,
/// `producer::meter::tests::a_meter_records_what_record_records`, runs the same usage through
/// meters and through [`Producer::record`] and compares the sink's bytes.
#[derive(Clone)]
pub struct Meter {
    bound: Arc<Bound>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("partition_key", &self.bound.partition_key)
            .finish()
    }
}

/// What a meter computed once.
struct Bound {
    producer: Producer,
    /// The group and the producer's default producer id: a sum this meter opens (collapse,
    /// v2) shares them instead of owning a copy ([`GroupFields`]).
    fields: Arc<GroupFields>,
    partition_key: Arc<str>,
    hash: u128,
    fold: GroupHash,
    /// v2: the bytes every payload of the group starts with (header, entry with the group,
    /// producer id and id epoch).
    head: Arc<[u8]>,
    /// The id epoch `head` was written for.
    epoch: u128,
    /// Where each payload splits for an aggregate ([`crate::batch::UserRec::split`]).
    split: Option<(u32, u32)>,
    /// Collapse: its hold on the group's open sum, where most of its events are added.
    slot: Arc<FoldSlot>,
}

impl Producer {
    /// A [`Meter`] for one group: validated here (license ARN, account id, non-empty
    /// dimension, and that its largest event fits a record and the buffer), so that its
    /// `record()` checks only the timestamp.
    pub fn meter(
        &self,
        license_arn: impl Into<String>,
        customer_aws_account_id: impl Into<String>,
        dimension: impl Into<String>,
    ) -> Result<Meter, ValidationError> {
        let (license_arn, customer_aws_account_id, dimension) = (
            license_arn.into(),
            customer_aws_account_id.into(),
            dimension.into(),
        );
        validate_license_arn(&license_arn)?;
        validate_account_id(&customer_aws_account_id)?;
        validate_dimension(&dimension)?;
        let group = GroupRef {
            license_arn: &license_arn,
            customer_aws_account_id: &customer_aws_account_id,
            dimension: &dimension,
        };
        let producer_id = self.shared.config.producer_id.as_deref();
        let pk = partition_key(&license_arn, &customer_aws_account_id, &dimension);
        let ids = &self.shared.ids;
        let epoch = ids.longest_id().epoch;
        let head: Arc<[u8]> = single_head(group, producer_id, epoch).into();
        self.check_largest(group, &head, pk.len())?;
        let split = crate::partition::head_entry_start(&head, &pk)
            .and_then(|e| Some((u32::try_from(e).ok()?, u32::try_from(head.len()).ok()?)));
        Ok(Meter {
            bound: Arc::new(Bound {
                split,
                hash: partition_hash(&pk),
                partition_key: pk.into(),
                fold: GroupHash::new(group, producer_id),
                head,
                epoch,
                slot: Arc::default(),
                producer: self.clone(),
                fields: Arc::new(GroupFields {
                    license_arn,
                    customer_aws_account_id,
                    dimension,
                    producer_id: self.shared.config.producer_id.clone(),
                }),
            }),
        })
    }

    /// Refuses a group whose largest event (longest quantity, latest timestamp, longest id)
    /// would not fit a Kinesis record or the buffer: `record()` then never has to check.
    fn check_largest(
        &self,
        group: GroupRef<'_>,
        head: &[u8],
        pk_len: usize,
    ) -> Result<(), ValidationError> {
        let longest = self.shared.ids.longest_id();
        let latest = DateTime::<Utc>::MAX_UTC;
        let latest_millis = chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
            .and_then(|d| d.and_hms_milli_opt(23, 59, 59, 999))
            .map_or(latest.timestamp_millis(), |t| {
                t.and_utc().timestamp_millis()
            });
        let payload = match self.shared.config.wire_version {
            WireVersion::V2 => generated_single_len(head, u64::MAX, latest_millis, longest),
            WireVersion::V1 => {
                let mut e = Event::new(
                    group.license_arn,
                    group.customer_aws_account_id,
                    group.dimension,
                    u64::MAX,
                    DateTime::from_timestamp_millis(latest_millis).unwrap_or(latest),
                )
                .with_event_id(longest.to_string());
                e.producer_id = self.shared.config.producer_id.clone();
                encode_event(&e).len()
            }
        };
        self.admit(payload, 0, pk_len).map(drop)
    }
}

thread_local! {
    /// Meter calls on this thread, for the cooperative budget ([`Meter::record`]).
    static METER_CALLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Meter calls a unit of the cooperative budget pays for without collapse: such a call costs
/// about a quarter of a checked `Producer::record(Event)` call.
const METER_CALLS_A_UNIT: u32 = 4;

/// Meter calls a unit pays for with collapse, where most calls add to the sum the meter's
/// slot holds — about a sixteenth of a checked call (docs/benchmarks-journal.md,
/// "Producer hot path, round 13").
const COLLAPSING_METER_CALLS_A_UNIT: u32 = 16;

/// A meter's event past its checks: its timestamp in whole milliseconds, and its UTC second.
struct Usage {
    timestamp: DateTime<Utc>,
    second: i64,
    quantity: u64,
}

/// Collapse: the sum a meter's event opens ([`Meter::opening`]).
struct Opening {
    template: Event,
    payload_len: usize,
    cost: usize,
    /// v2: the meter's head, with its fields (the template is hollow).
    head: Option<SumHead>,
}

/// The v2 payload of a meter's event without collapse, its id taken.
struct Encoded {
    id: GeneratedId,
    millis: i64,
    len: usize,
    cost: usize,
}

impl Meter {
    /// Records `quantity` units of the group at `timestamp` (millisecond precision, as
    /// [`Producer::record`]). Waits while the buffer is full; errors give the event back as
    /// an [`Event`] (with its generated id when it has one), to retry with either API.
    pub async fn record(
        &self,
        timestamp: DateTime<Utc>,
        quantity: u64,
    ) -> Result<(), ProducerError> {
        // [`super::cooperate`] for a bound group handle's call: one unit of the budget every
        // `METER_CALLS_A_UNIT`-th call on the thread (`COLLAPSING_METER_CALLS_A_UNIT`-th
        // with collapse), so a caller recording through meters in a tight loop yields about
        // every 512 calls (2,048 with collapse) — about as often in time as a loop of
        // checked calls yields.
        if self.bound.producer.shared.config.collapse {
            super::cooperate_every!(METER_CALLS, COLLAPSING_METER_CALLS_A_UNIT);
            // The common call, inline: the open sum the slot holds takes the event.
            if self.add_to_slot(timestamp, quantity) {
                return Ok(());
            }
        } else {
            super::cooperate_every!(METER_CALLS, METER_CALLS_A_UNIT);
        }
        match self.record_now(timestamp, quantity)? {
            None => Ok(()),
            Some(waiting) => waiting.await,
        }
    }

    /// Everything [`Meter::record`] does without waiting once the slot did not take the
    /// event; `Some` is the wait for buffer space. Synchronous, so the caller's future keeps
    /// none of its locals.
    fn record_now(
        &self,
        timestamp: DateTime<Utc>,
        quantity: u64,
    ) -> Result<Option<super::Waiting<'_>>, ProducerError> {
        let p = &self.bound.producer;
        let usage = self.check(timestamp, quantity)?;
        let prepared = if p.shared.config.collapse {
            match self.absorb(&usage)? {
                Some(prepared) => prepared,
                None => return Ok(None),
            }
        } else if p.shared.config.wire_version == WireVersion::V1 {
            p.prepare(self.event(&usage), Check::Usage)?
        } else {
            let enc = self.encode(&usage);
            return match p.shared.sem.try_acquire_many(enc.cost as u32) {
                Ok(permit) => {
                    permit.forget();
                    self.stage(&usage, &enc).map(|()| None)
                }
                Err(_) => Ok(Some(self.wait_then_stage(usage, enc))),
            };
        };
        Ok(p.stage_now(prepared)?
            .map(|prepared| p.wait_and_stage(prepared)))
    }

    /// [`Meter::charge_then_stage`], boxed outside the caller's future.
    fn wait_then_stage(&self, usage: Usage, enc: Encoded) -> super::Waiting<'_> {
        Box::pin(self.charge_then_stage(usage, enc))
    }

    /// Waits for `enc`'s buffer space, then stages it.
    async fn charge_then_stage(&self, usage: Usage, enc: Encoded) -> Result<(), ProducerError> {
        match self.bound.producer.charge(enc.cost).await {
            Ok(()) => self.stage(&usage, &enc),
            Err(()) => Err(ProducerError::Closed(Some(self.give_back(&usage, enc.id)))),
        }
    }

    /// Like [`Meter::record`] but never waits: a full buffer is [`ProducerError::Full`], as
    /// [`Producer::try_record`].
    pub fn try_record(&self, timestamp: DateTime<Utc>, quantity: u64) -> Result<(), ProducerError> {
        let p = &self.bound.producer;
        if self.add_to_slot(timestamp, quantity) {
            return Ok(());
        }
        let usage = self.check(timestamp, quantity)?;
        if p.shared.config.collapse {
            return match self.absorb(&usage)? {
                Some(prepared) => p.try_charge_and_stage(prepared),
                None => Ok(()),
            };
        }
        if p.shared.config.wire_version == WireVersion::V1 {
            let prepared = p.prepare(self.event(&usage), Check::Usage)?;
            return p.try_charge_and_stage(prepared);
        }
        let enc = self.encode(&usage);
        match p.try_charge(enc.cost) {
            Ok(()) => self.stage(&usage, &enc),
            Err(e) => {
                let event = self.give_back(&usage, enc.id);
                Err(match e {
                    tokio::sync::TryAcquireError::NoPermits => ProducerError::Full(event),
                    tokio::sync::TryAcquireError::Closed => ProducerError::Closed(Some(event)),
                })
            }
        }
    }

    /// Records an event of the group with a usage allocation breakdown (checked as
    /// [`Producer::record`] checks it). Builds an [`Event`]: it saves the group's checks,
    /// not the event's allocations.
    pub async fn record_allocated(
        &self,
        timestamp: DateTime<Utc>,
        quantity: u64,
        allocations: Vec<UsageAllocation>,
    ) -> Result<(), ProducerError> {
        super::cooperate().await;
        let p = &self.bound.producer;
        let usage = self.check(timestamp, quantity)?;
        let event = self.event(&usage).with_allocations(allocations);
        let prepared = p.prepare(event, Check::Usage)?;
        p.charge_and_stage(prepared).await
    }

    /// The group's partition key (`licenseArn|customerAWSAccountId|dimension`, see
    /// [`crate::partition::partition_key`]).
    pub fn partition_key(&self) -> &str {
        &self.bound.partition_key
    }

    /// The producer this meter records into.
    pub fn producer(&self) -> &Producer {
        &self.bound.producer
    }

    /// Refuses the event once the producer is closed or when its timestamp is invalid, as
    /// [`Producer::record`] does (the same error, reason and metric). The accepted call's
    /// checks are a flag and an integer range; the refusal is built out of line.
    #[inline]
    fn check(&self, timestamp: DateTime<Utc>, quantity: u64) -> Result<Usage, ProducerError> {
        let p = &self.bound.producer;
        let timestamp = truncate_to_millis(timestamp);
        let second = timestamp.timestamp();
        if !second_in_range(second) || p.shared.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(self.refuse(timestamp, quantity));
        }
        Ok(Usage {
            timestamp,
            second,
            quantity,
        })
    }

    /// Why [`Meter::check`] refused the event.
    #[cold]
    #[inline(never)]
    fn refuse(&self, timestamp: DateTime<Utc>, quantity: u64) -> ProducerError {
        let p = &self.bound.producer;
        let usage = Usage {
            timestamp,
            second: timestamp.timestamp(),
            quantity,
        };
        if p.shared.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return ProducerError::Closed(Some(Box::new(p.give_back(self.event(&usage), None))));
        }
        let source = validate_timestamp(&usage.timestamp)
            .expect_err("a timestamp out of range fails validation");
        p.shared.metrics.refused(source.reason());
        ProducerError::Invalid {
            source,
            event: Box::new(p.give_back(self.event(&usage), None)),
        }
    }

    /// Collapse, the common call: the open sum this handle holds takes the event, under the
    /// slot's lock alone, with no check but the producer's flag (the sum's second was
    /// checked when the sum was opened) and no counter (the slot's events are counted when
    /// it is detached, `fold::detach`).
    #[inline]
    fn add_to_slot(&self, timestamp: DateTime<Utc>, quantity: u64) -> bool {
        let b = &*self.bound;
        let shared = &b.producer.shared;
        shared.config.collapse
            && !shared.closed.load(std::sync::atomic::Ordering::Relaxed)
            && b.slot.try_add(timestamp, quantity)
    }

    /// Collapse, an event the slot did not take: adds it to its open sum at no charge, or
    /// opens a new one with it, charged as [`Producer::record`] charges it, the slot attached
    /// either way — one step of the table's (`FoldTable::join_or_open`). With no buffer space
    /// now to open one, the opening event is prepared to wait for space.
    fn absorb(&self, usage: &Usage) -> Result<Option<Prepared>, ProducerError> {
        let b = &*self.bound;
        let p = &b.producer;
        let sem = &p.shared.sem;
        let key = FoldKey::with(
            b.fold,
            self.group(),
            p.shared.config.producer_id.as_deref(),
            usage.second,
            false,
        )
        .from(Some(&b.partition_key));
        let Opening {
            template,
            payload_len,
            cost,
            head,
        } = self.opening(usage);
        let hollow = head.is_some();
        let charge = || match sem.try_acquire_many(cost as u32) {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        };
        let charged = Charged {
            bytes: cost,
            payload_len,
            keyed: Some((b.partition_key.clone(), b.hash)),
            head,
        };
        let (q, at) = (usage.quantity, usage.timestamp);
        let staging = &p.shared.staging;
        match staging.join_or_open(&key, q, at, &b.slot, template, charged, charge) {
            Joined::Opened(_) => {
                p.accepted();
                Ok(None)
            }
            Joined::Absorbed(template) => {
                // Its strings (v1: a v2 template holds none) freed outside the lock.
                drop(template);
                p.accepted();
                Ok(None)
            }
            Joined::NoSpace(template) => Ok(Some(Prepared {
                event: self.whole(template, hollow),
                generated: None,
                route: Route::Fold {
                    payload_len,
                    // The sum it opens keeps the meter's key: its events are found by it,
                    // and the window's close needs no key lookup.
                    keyed: Some((b.partition_key.clone(), b.hash)),
                },
                cost,
            })),
            Joined::Sealed(template) => Err(ProducerError::Closed(Some(Box::new(
                p.give_back(self.whole(template, hollow), None),
            )))),
        }
    }

    /// Collapse: the sum the event would open — its template (the event as
    /// `Producer::prepare` leaves it for a sum, the producer's default producer id written),
    /// its payload's size and its charge, as `Producer::prepare` sizes and charges it. In v2
    /// the template is hollow: the sum shares the meter's fields and is written from its
    /// head (`head`). The group's largest event was checked against the record and buffer
    /// limits when the meter was made.
    fn opening(&self, usage: &Usage) -> Opening {
        let b = &*self.bound;
        let p = &b.producer;
        let config = &p.shared.config;
        let longest = p.shared.ids.longest_id();
        let slack = quantity_slack(usage.quantity, config.wire_version);
        if config.wire_version == WireVersion::V2 && b.epoch == longest.epoch {
            let millis = usage.timestamp.timestamp_millis();
            let payload_len = generated_single_len(&b.head, usage.quantity, millis, longest);
            debug_assert_eq!(
                payload_len,
                p.fold_payload_len(&mut self.whole_template(usage), config.wire_version),
                "the head sizes the sum as its template does"
            );
            return Opening {
                template: GroupFields::hollow(usage.quantity, usage.timestamp),
                payload_len,
                cost: Producer::buffer_cost(payload_len + slack, b.partition_key.len()),
                head: Some(SumHead {
                    bytes: b.head.clone(),
                    epoch: b.epoch,
                    split: b.split,
                    fields: Some(b.fields.clone()),
                }),
            };
        }
        let mut template = self.whole_template(usage);
        let payload_len = p.fold_payload_len(&mut template, config.wire_version);
        Opening {
            template,
            payload_len,
            cost: Producer::buffer_cost(payload_len + slack, b.partition_key.len()),
            head: None,
        }
    }

    /// The event as `Producer::prepare` leaves it for a sum: the producer's default producer
    /// id written.
    fn whole_template(&self, usage: &Usage) -> Event {
        let mut event = self.event(usage);
        event.producer_id.clone_from(&self.bound.fields.producer_id);
        event
    }

    /// `template` given back by the table, whole: a `hollow` one with the meter's fields
    /// written in.
    fn whole(&self, mut template: Event, hollow: bool) -> Event {
        if hollow {
            self.bound.fields.fill(&mut template);
        }
        template
    }

    /// No collapse, v2: the event's id (its lane's next sequence) and payload size.
    fn encode(&self, usage: &Usage) -> Encoded {
        let b = &*self.bound;
        let id = b.producer.shared.ids.next_id(b.hash);
        let millis = usage.timestamp.timestamp_millis();
        let len = generated_single_len(&b.head, usage.quantity, millis, id);
        Encoded {
            id,
            millis,
            len,
            cost: Producer::buffer_cost(len, b.partition_key.len()),
        }
    }

    /// Writes the charged payload into the staging buffer.
    fn stage(&self, usage: &Usage, enc: &Encoded) -> Result<(), ProducerError> {
        let b = &*self.bound;
        let p = &b.producer;
        let write = |buf: &mut bytes::BytesMut| {
            put_generated_single(buf, &b.head, usage.quantity, enc.millis, enc.id);
        };
        let staging = &p.shared.staging;
        if staging.push(enc.len, write, b.split, &b.partition_key, b.hash, enc.cost) {
            p.accepted();
            Ok(())
        } else {
            p.shared.sem.add_permits(enc.cost);
            Err(ProducerError::Closed(Some(self.give_back(usage, enc.id))))
        }
    }

    fn group(&self) -> GroupRef<'_> {
        self.bound.fields.group()
    }

    /// The event as [`Producer::record`] would have been given it.
    fn event(&self, usage: &Usage) -> Event {
        let f = &*self.bound.fields;
        Event::new(
            f.license_arn.as_str(),
            f.customer_aws_account_id.as_str(),
            f.dimension.as_str(),
            usage.quantity,
            usage.timestamp,
        )
    }

    fn give_back(&self, usage: &Usage, id: GeneratedId) -> Box<Event> {
        Box::new(self.bound.producer.give_back(self.event(usage), Some(id)))
    }
}

#[cfg(test)]
mod tests;
