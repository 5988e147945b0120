//! `record()`'s first step: validating an event and preparing it for the staging area —
//! encoded (no collapse, or an event with an id of its own) or sized for its window's sum
//! (collapse) — and completing an event that goes back to the caller.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::Producer;
use crate::error::ProducerError;
use crate::key_cache::{CheckedGroup, SingleHead, checked_group, keyed_group};
use crate::partition::{partition_hash, partition_key, partition_key_len};
use awsmp_contract::error::ValidationError;
use awsmp_contract::event::{Event, truncate_to_millis, validate_allocations, validate_timestamp};
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::limits::kinesis::MAX_RECORD_BYTES;
use awsmp_contract::wire::v2::{allocations_len, generated_single_len};
use awsmp_contract::wire::{WireVersion, single_len_as};

/// A validated event on its way to the staging area, charged `cost` bytes.
pub(super) struct Prepared {
    pub event: Event,
    /// The id generated for it here (written into `event` only if the event goes back).
    pub generated: Option<GeneratedId>,
    pub route: Route,
    pub cost: usize,
}

/// A payload to write: v2 (sized, written straight into the staging buffer: from the event,
/// or from its group's cached head when its id is generated and it has no producer id of
/// its own, its allocations after the head's fields) or v1 JSON.
pub(super) enum Payload {
    V2 { len: usize },
    V2Head { len: usize, head: SingleHead },
    Json(Bytes),
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::V2 { len } | Payload::V2Head { len, .. } => *len,
            Payload::Json(b) => b.len(),
        }
    }

    /// Where the v2 single splits for an aggregate, when known before it is written: its
    /// table entry's start and its event fields' start (a single written from its group's
    /// head: the head's split, the fields right after the head).
    pub fn split(&self) -> Option<(u32, u32)> {
        match self {
            Payload::V2Head { head, .. } => Self::split_of(head),
            Payload::V2 { .. } | Payload::Json(_) => None,
        }
    }

    /// Where a single written from `head` splits.
    pub(super) fn split_of(head: &SingleHead) -> Option<(u32, u32)> {
        let entry = u32::try_from(head.entry_start?).ok()?;
        Some((entry, u32::try_from(head.bytes.len()).ok()?))
    }
}

/// A group's partition key and its hash.
pub(super) type Keyed = (Arc<str>, u128);

/// How much of an event [`Producer::prepare`] checks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// Every rule (an event from the caller).
    Whole,
    /// Its timestamp and allocations only: a bound group handle's event, whose group was
    /// checked once when the handle was made and which has no id or producer id of its own.
    Usage,
}

pub(super) enum Route {
    /// No collapse, or an event with an id of its own (which never joins a sum: its id is
    /// the caller's idempotency key): the payload, encoded when it is staged.
    Encoded {
        payload: Payload,
        partition_key: std::sync::Arc<str>,
        hash: u128,
    },
    /// Collapse: added to its window's sum; `payload_len` bounds its encoded size; `keyed`
    /// is its group's partition key and hash when known.
    Fold {
        payload_len: usize,
        keyed: Option<Keyed>,
    },
}

impl Producer {
    /// The producer id written for `event`: its own, else the configured default (borrowed:
    /// an event is never given a copy of it unless it goes back to the caller).
    pub(super) fn producer_id_of<'a>(&'a self, event: &'a Event) -> Option<&'a str> {
        event
            .producer_id
            .as_deref()
            .or(self.shared.config.producer_id.as_deref())
    }

    /// `event` as the caller gets it back: its producer id filled in, and an id — the one
    /// generated for it, or (collapse, which names events only when their window closes) a
    /// new one — so a retry keeps it.
    pub(super) fn give_back(&self, mut event: Event, generated: Option<GeneratedId>) -> Event {
        self.complete(&mut event, generated);
        event
    }

    /// Fills in `event`'s producer id and id as [`Producer::give_back`] describes.
    fn complete(&self, event: &mut Event, generated: Option<GeneratedId>) {
        if event.producer_id.is_none() {
            event.producer_id = self.shared.config.producer_id.clone();
        }
        let ids = &self.shared.ids;
        match generated {
            Some(id) => event.event_id = ids.render(id),
            None if event.event_id.is_empty() => {
                let pk = partition_key(
                    &event.license_arn,
                    &event.customer_aws_account_id,
                    &event.dimension,
                );
                event.event_id = ids.render(ids.next_id(partition_hash(&pk)));
            }
            None => {}
        }
    }

    pub(super) fn prepare(
        &self,
        mut event: Event,
        check: Check,
    ) -> Result<Prepared, ProducerError> {
        if self.shared.closed.load(Ordering::Relaxed) {
            let event = self.give_back(event, None);
            return Err(ProducerError::Closed(Some(Box::new(event))));
        }
        event.timestamp = truncate_to_millis(event.timestamp);
        let invalid = |source: ValidationError, event: Event| {
            self.shared.metrics.refused(source.reason());
            ProducerError::Invalid {
                source,
                event: Box::new(self.give_back(event, None)),
            }
        };
        let checked = match self.check(&event, check) {
            Ok(checked) => checked,
            Err(e) => return Err(invalid(e, event)),
        };
        let config = &self.shared.config;
        // Only an event without an id of its own joins a sum: a sum is named by an id of its
        // own, and merging an event that has one would lose the key its re-record is
        // recognised by (docs/row-contract.md, "Collapse").
        let joins_sum = config.collapse && event.event_id.is_empty();
        let (generated, route, pk_len) = match (joins_sum, config.wire_version) {
            (true, version) => {
                let keyed = checked.map(|c| (c.partition_key, c.hash));
                let payload_len = self.fold_payload_len(&mut event, version);
                let pk_len = keyed.as_ref().map_or_else(
                    || {
                        partition_key_len(
                            &event.license_arn,
                            &event.customer_aws_account_id,
                            &event.dimension,
                        )
                    },
                    |(pk, _)| pk.len(),
                );
                (None, Route::Fold { payload_len, keyed }, pk_len)
            }
            (false, version) => self.encode_plain(&mut event, version, checked),
        };
        let payload_len = match &route {
            Route::Encoded { payload, .. } => payload.len(),
            Route::Fold { payload_len, .. } => *payload_len,
        };
        // A sum can outgrow its first constituent by its quantity's digits: charged for the
        // longest quantity, the sums never hold more than their reservations.
        let slack = match &route {
            Route::Fold { .. } => quantity_slack(event.quantity, config.wire_version),
            Route::Encoded { .. } => 0,
        };
        let cost = match self.admit(payload_len, slack, pk_len) {
            Ok(cost) => cost,
            Err(e) => return Err(invalid(e, event)),
        };
        Ok(Prepared {
            event,
            generated,
            route,
            cost,
        })
    }

    /// The size check of every recording path (this one, the plain event's fast path, a
    /// meter's largest event), written once: an event whose payload is `payload_len` bytes
    /// under a partition key of `pk_len` bytes must fit one Kinesis record
    /// ([`MAX_RECORD_BYTES`]), and its charge — the payload, the `slack` bytes its sum may
    /// grow by, the key and the record overhead ([`Producer::buffer_cost`]) — must fit the
    /// buffer bound. Its charge, or the refusal ([`ValidationError::EventTooLarge`]).
    #[inline]
    pub(super) fn admit(
        &self,
        payload_len: usize,
        slack: usize,
        pk_len: usize,
    ) -> Result<usize, ValidationError> {
        let size = payload_len + pk_len;
        if size > MAX_RECORD_BYTES {
            return Err(ValidationError::EventTooLarge {
                bytes: size,
                limit: MAX_RECORD_BYTES,
            });
        }
        let cost = Self::buffer_cost(payload_len + slack, pk_len);
        let limit = self.shared.config.max_buffered_bytes;
        if cost > limit {
            return Err(ValidationError::EventTooLarge { bytes: cost, limit });
        }
        Ok(cost)
    }

    /// Checks `event` as `check` says; a whole check returns its group's partition key and
    /// hash, from the per-thread cache of groups already checked (a hot group is checked
    /// once per thread, not once per event), and the group's v2 head when the event will be
    /// written from it ([`Producer::head_for`]).
    fn check(&self, event: &Event, check: Check) -> Result<Option<CheckedGroup>, ValidationError> {
        match check {
            Check::Whole => {
                let mut checked = None;
                let head_for = self.head_for(event);
                event.validate_with(true, |e| {
                    checked = Some(checked_group(e.group(), head_for)?);
                    Ok(())
                })?;
                Ok(checked)
            }
            Check::Usage => {
                validate_timestamp(&event.timestamp)?;
                let allocations = event.usage_allocations.as_deref();
                allocations.map_or(Ok(()), |a| validate_allocations(a, event.quantity))?;
                Ok(None)
            }
        }
    }

    /// The producer id and epoch whose v2 head `event`'s group is to be written from: an
    /// event written without collapse, in v2, with a generated id (none of its own) and no
    /// producer id of its own (the configured default's; one head per group and thread is
    /// kept). Its allocations, if any, are written after the head's fields.
    fn head_for(&self, event: &Event) -> Option<(Option<&str>, u128)> {
        let config = &self.shared.config;
        let plain = event.event_id.is_empty() && event.producer_id.is_none();
        (plain && !config.collapse && config.wire_version == WireVersion::V2).then(|| {
            (
                config.producer_id.as_deref(),
                self.shared.ids.longest_id().epoch,
            )
        })
    }

    /// No collapse: the event's id (generated if it has none), partition key and payload.
    fn encode_plain(
        &self,
        event: &mut Event,
        version: WireVersion,
        checked: Option<CheckedGroup>,
    ) -> (Option<GeneratedId>, Route, usize) {
        let CheckedGroup {
            partition_key: pk,
            hash,
            head,
        } = checked.unwrap_or_else(|| {
            let (partition_key, hash) = keyed_group(
                &event.license_arn,
                &event.customer_aws_account_id,
                &event.dimension,
            );
            CheckedGroup {
                partition_key,
                hash,
                head: None,
            }
        });
        // `p:{epoch}:{lane}:{seq}`: deduplicated by sequence, not by a claim per event.
        let generated = event
            .event_id
            .is_empty()
            .then(|| self.shared.ids.next_id(hash));
        let millis = event.timestamp.timestamp_millis();
        let payload = match (version, head, generated) {
            (WireVersion::V2, Some(head), Some(id)) => Payload::V2Head {
                len: generated_single_len(&head.bytes, event.quantity, millis, id)
                    + allocations_len(event.usage_allocations.as_deref()),
                head,
            },
            (WireVersion::V2, ..) => Payload::V2 {
                len: single_len_as(event, self.producer_id_of(event), generated),
            },
            (WireVersion::V1, ..) => {
                self.complete(event, generated);
                Payload::Json(version.encode_bytes(event, generated))
            }
        };
        let pk_len = pk.len();
        let route = Route::Encoded {
            payload,
            partition_key: pk,
            hash,
        };
        (generated, route, pk_len)
    }

    /// What a collapsed event is charged for its payload before its window's sum is encoded:
    /// its size with the longest id it can be given (v2 sizes it; v1, the JSON fallback,
    /// encodes it with its producer id).
    pub(super) fn fold_payload_len(&self, event: &mut Event, version: WireVersion) -> usize {
        debug_assert!(
            event.event_id.is_empty(),
            "only events without an id join sums"
        );
        let longest_id = self.shared.ids.longest_id();
        match version {
            WireVersion::V2 => single_len_as(event, self.producer_id_of(event), Some(longest_id)),
            WireVersion::V1 => {
                if event.producer_id.is_none() {
                    event.producer_id = self.shared.config.producer_id.clone();
                }
                version.encode(event).len() + longest_id.to_string().len()
            }
        }
    }
}

/// Bytes a sum's quantity can take beyond `quantity`'s own: the longest `u64` against it (a
/// v2 varint field, or v1 decimal digits).
pub(super) fn quantity_slack(quantity: u64, version: WireVersion) -> usize {
    match version {
        WireVersion::V2 => {
            let own = if quantity == 0 {
                0
            } else {
                1 + prost::encoding::encoded_len_varint(quantity)
            };
            1 + prost::encoding::encoded_len_varint(u64::MAX) - own
        }
        WireVersion::V1 => {
            itoa::Buffer::new().format(u64::MAX).len() - itoa::Buffer::new().format(quantity).len()
        }
    }
}
