//! Batching: the linger window that stages recorded events (collapsing them when asked), and
//! its closing into packed Kinesis records.
//!
//! Without collapse a window is packed while it is open: each take of staged events goes into
//! the window's [`Packer`] at once (the task is woken every [`crate::handoff::PACK_STEP_BYTES`]
//! staged while a window is open), so at a high rate the packing runs beside the callers'
//! recording instead of after it. Its records are still queued when the window closes, as one
//! window's records always were: only when the packing happens moves, not what is sent when.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use super::Engine;
use super::record::{KRecord, UserAck, UserMeta};
use crate::batch::{Packed, Packer, UserRec};
use crate::config::ProducerConfig;
#[cfg(debug_assertions)]
use crate::fold::GroupFields;
use crate::fold::{Folded, SumHead};
use crate::handoff::{Incoming, RECORD_OVERHEAD_BYTES, Reservation};
use crate::key_cache::keyed_group;
use crate::partition::ShardMap;
use crate::shards::ShardMapSource;
use crate::sink::RecordSink;
use awsmp_contract::event::Event;
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::limits::kinesis::MAX_BYTES_PER_PUT;
use awsmp_contract::wire::v2::{SplitSingle, generated_single_len, put_generated_single};
use awsmp_contract::wire::{WireVersion, encode_event};

/// Size trigger: a window worth a few full PutRecords calls, or a quarter of the buffer, goes
/// out without waiting for the linger.
pub(crate) fn size_trigger(config: &ProducerConfig) -> usize {
    (4 * MAX_BYTES_PER_PUT).min(config.max_buffered_bytes / 4)
}

/// Events staged since the window opened.
pub(super) struct Window {
    pub opened_at: Option<Instant>,
    bytes: usize,
    /// The window's user records, packed as they are taken.
    packer: Packer<UserMeta>,
    /// The records the packer finished, queued when the window closes.
    packed: Vec<Packed<UserMeta>>,
    /// The shard map the open aggregates are grouped by.
    map: Option<Arc<ShardMap>>,
    /// User records taken and not packed yet, in order: those taken before any shard map was
    /// known wait here until one is (or until the close, then packed by partition key).
    unpacked: Vec<UserRec<UserMeta>>,
    /// Sums taken by the last take (shutdown) before the window closes.
    pub folded: Vec<Folded>,
    /// Collapse, v2: where the window's sums are encoded, back to back (each sum's payload a
    /// slice of it: one allocation per [`SUM_BUFFER_BYTES`], not one per sum).
    sum_bytes: BytesMut,
}

/// The least a window's buffer for its encoded sums holds ([`Window::sum_bytes`]).
const SUM_BUFFER_BYTES: usize = 64 * 1024;

impl Window {
    pub(super) fn new(config: &ProducerConfig) -> Self {
        Window {
            opened_at: None,
            bytes: 0,
            packer: Packer::new(config.aggregation, config.max_aggregate_bytes),
            packed: Vec::new(),
            map: None,
            unpacked: Vec::new(),
            folded: Vec::new(),
            sum_bytes: BytesMut::new(),
        }
    }
}

impl<S: RecordSink, M: ShardMapSource> Engine<S, M> {
    /// Stages one event of a take; the take counts it outstanding ([`Engine::take_staged`]).
    pub(super) fn stage(&mut self, incoming: Incoming) {
        let Incoming {
            payload,
            split,
            partition_key,
            hash,
            enqueued_at,
            bytes,
        } = incoming;
        let meta = UserMeta {
            enqueued_at,
            epoch: self.epoch,
            constituents: 1,
            bytes,
        };
        self.window.opened_at.get_or_insert_with(Instant::now);
        self.window.bytes += meta.bytes;
        self.pack(UserRec {
            payload,
            split,
            partition_key,
            hash,
            meta,
        });
        if self.window.bytes >= size_trigger(&self.parts.config) {
            self.close_window();
        }
    }

    /// Adds `u` to the window's open aggregates, grouped by the current shard map; before any
    /// map is known it waits, and is packed (in order) once one is.
    fn pack(&mut self, u: UserRec<UserMeta>) {
        self.window.unpacked.push(u);
        if self.shard_map.is_some() {
            self.pack_unpacked();
        }
    }

    /// Packs the waiting user records by the current map (after finishing the open
    /// aggregates if they were grouped by another map, so no aggregate mixes two maps'
    /// shards), or by partition key when there is still none.
    fn pack_unpacked(&mut self) {
        let w = &mut self.window;
        let Some(current) = &self.shard_map else {
            for u in w.unpacked.drain(..) {
                w.packer.push(u, |_| None, &mut w.packed);
            }
            return;
        };
        if !w.map.as_ref().is_some_and(|m| Arc::ptr_eq(m, current)) {
            w.packer.finish(&mut w.packed);
            w.map = Some(current.clone());
        }
        for u in w.unpacked.drain(..) {
            w.packer.push(u, |h| current.shard_index(h), &mut w.packed);
        }
    }

    /// Collapse: the window holds the sums in the staging area; it opens with their first
    /// bytes and closes early once they pass the size trigger. With `seal` (shutdown), the
    /// sums are taken now and later adds are refused.
    pub(super) fn watch_folded(&mut self, seal: bool) {
        let staging = self.parts.staging.clone();
        if seal {
            let folded = &mut self.window.folded;
            staging.take_folded(true, |f| folded.push(f));
            if !self.window.folded.is_empty() {
                self.window.opened_at.get_or_insert_with(Instant::now);
            }
            return;
        }
        let staged = staging.bytes();
        if staged > 0 {
            self.window.opened_at.get_or_insert_with(Instant::now);
            if staged >= size_trigger(&self.parts.config) {
                self.close_window();
            }
        }
    }

    pub(super) fn close_window(&mut self) {
        if self.window.opened_at.is_none() {
            return;
        }
        self.window.opened_at = None;
        self.window.bytes = 0;
        // The sums taken at shutdown first, then the open window's, each encoded and packed
        // as it is taken: no list of the window's sums between the two. What their
        // constituents were charged beyond the sums' own bytes goes back to the buffer in one
        // release below (one lock of the semaphore's waiters, not one a sum).
        let (mut collapsed_away, mut released) = (0u64, 0usize);
        let mut folded = std::mem::take(&mut self.window.folded);
        for f in folded.drain(..) {
            collapsed_away += self.encode_and_pack(f, &mut released);
        }
        // The vector's room is kept for the next shutdown's sums.
        self.window.folded = folded;
        if self.parts.config.collapse {
            let staging = self.parts.staging.clone();
            staging.take_folded(false, |f| {
                collapsed_away += self.encode_and_pack(f, &mut released);
            });
        }
        if released > 0 {
            self.parts.sem.add_permits(released);
        }
        if collapsed_away > 0 {
            self.parts
                .metrics
                .events_collapsed
                .increment(collapsed_away);
        }
        // What waited for want of a map: by the map that arrived since, if one did.
        self.pack_unpacked();
        let w = &mut self.window;
        let mut packed = std::mem::take(&mut w.packed);
        w.packer.finish(&mut packed);
        for p in packed.drain(..) {
            let r = self.new_record(p);
            self.enqueue_ready(r);
        }
        // The vector's room is kept for the next window.
        self.window.packed = packed;
    }

    /// Encodes and packs one sum of the window, adding the buffer bytes it releases to
    /// `released`; the events it collapsed away.
    fn encode_and_pack(&mut self, f: Folded, released: &mut usize) -> u64 {
        let (u, excess) = self.encode_folded(f);
        *released += excess;
        let away = u.meta.constituents - 1;
        self.pack(u);
        away
    }

    /// Names one sum of the window (docs/row-contract.md, "Collapse": the next generated id
    /// of its lane, whether it stands for one event or many — none of them had an id of its
    /// own) and encodes it; with it, the bytes its constituents were charged beyond it, for
    /// the caller to release.
    fn encode_folded(&mut self, f: Folded) -> (UserRec<UserMeta>, usize) {
        let Folded {
            keyed,
            mut head,
            mut event,
            constituents,
            enqueued_at,
            bytes,
        } = f;
        *self.outstanding.entry(self.epoch).or_default() += constituents;
        // A hollow sum's fields, written into it below unless it is written from its head.
        let mut fields = head.as_mut().and_then(|h| h.fields.take());
        if keyed.is_none()
            && let Some(f) = fields.take()
        {
            f.fill(&mut event);
        }
        let (pk, hash) = keyed.unwrap_or_else(|| {
            keyed_group(
                &event.license_arn,
                &event.customer_aws_account_id,
                &event.dimension,
            )
        });
        debug_assert!(event.event_id.is_empty(), "a sum is named here");
        let idgen = &self.parts.ids;
        let id = idgen.next_id(hash);
        // A sum without allocations whose opener kept its group's head (of this id's epoch)
        // is written as the head and its fields: what laying it out from the template's
        // strings writes (checked below in debug builds).
        let version = self.parts.config.wire_version;
        let from_head = head
            .filter(|h| h.epoch == id.epoch)
            .filter(|_| version == WireVersion::V2 && event.usage_allocations.is_none());
        if from_head.is_none()
            && let Some(f) = fields.take()
        {
            f.fill(&mut event);
        }
        let (payload, split) = match version {
            WireVersion::V2 if let Some(head) = from_head => {
                let written = self.write_from_head(&head, &event, id);
                #[cfg(debug_assertions)]
                same_as_laid_out(&event, fields.as_deref(), id, &pk, &written, head.split);
                (written, head.split)
            }
            WireVersion::V2 => {
                let producer_id = event.producer_id.as_deref();
                let single = SplitSingle::of(&event, producer_id, Some(id), &pk);
                let buf = &mut self.window.sum_bytes;
                if buf.capacity() - buf.len() < single.len {
                    *buf = BytesMut::with_capacity(single.len.max(SUM_BUFFER_BYTES));
                }
                single.write(buf, &event, producer_id);
                debug_assert_eq!(buf.len(), single.len, "the layout sizes the single");
                (buf.split().freeze(), Some(single.split))
            }
            WireVersion::V1 => {
                event.event_id = idgen.render(id);
                (bytes::Bytes::from(encode_event(&event)), None)
            }
        };
        // Charged per constituent; the sum needs only its own bytes.
        let needed = payload.len() + pk.len() + RECORD_OVERHEAD_BYTES;
        let excess = bytes.saturating_sub(needed);
        let bytes = bytes.min(needed);
        let u = UserRec {
            payload,
            split,
            hash,
            partition_key: pk,
            meta: UserMeta {
                enqueued_at,
                epoch: self.epoch,
                constituents,
                bytes,
            },
        };
        (u, excess)
    }

    /// A sum of the window written as its group's v2 head and its fields (quantity,
    /// earliest timestamp, id `id`) into the window's buffer for sums.
    fn write_from_head(&mut self, head: &SumHead, sum: &Event, id: GeneratedId) -> Bytes {
        let millis = sum.timestamp.timestamp_millis();
        let len = generated_single_len(&head.bytes, sum.quantity, millis, id);
        let buf = &mut self.window.sum_bytes;
        if buf.capacity() - buf.len() < len {
            *buf = BytesMut::with_capacity(len.max(SUM_BUFFER_BYTES));
        }
        put_generated_single(buf, &head.bytes, sum.quantity, millis, id);
        debug_assert_eq!(buf.len(), len, "the head sizes the single");
        buf.split().freeze()
    }

    fn new_record(&self, p: Packed<UserMeta>) -> KRecord {
        let mut users = Vec::with_capacity(p.users.len());
        let mut metas = p.users.into_iter();
        let first = metas
            .next()
            .expect("a record holds at least one user record");
        let mut oldest = first.enqueued_at;
        let mut bytes = first.bytes;
        users.push(UserAck {
            enqueued_at: first.enqueued_at,
            epoch: first.epoch,
            constituents: first.constituents,
        });
        for u in metas {
            oldest = oldest.min(u.enqueued_at);
            bytes += u.bytes;
            users.push(UserAck {
                enqueued_at: u.enqueued_at,
                epoch: u.epoch,
                constituents: u.constituents,
            });
        }
        // One reservation per record: the buffer bytes of every user record inside it.
        let reservation = Reservation::new(self.parts.sem.clone(), bytes);
        KRecord {
            size: p.entry.billed_size(),
            entry: p.entry,
            route_hash: p.route_hash,
            users,
            reservation,
            attempts: 0,
            deadline: oldest + self.parts.config.record_ttl,
            maybe_delivered: false,
            last_error: None,
            predicted_shard: None,
        }
    }
}

/// Debug builds: a sum written from its head (`written`, splitting at `split`) is what
/// laying it out from its template's strings writes — a hollow one's filled in from
/// `fields`.
#[cfg(debug_assertions)]
fn same_as_laid_out(
    sum: &Event,
    fields: Option<&GroupFields>,
    id: GeneratedId,
    pk: &str,
    written: &[u8],
    split: Option<(u32, u32)>,
) {
    let mut event = sum.clone();
    if let Some(f) = fields {
        f.fill(&mut event);
    }
    let producer_id = event.producer_id.as_deref();
    let single = SplitSingle::of(&event, producer_id, Some(id), pk);
    let mut laid_out = BytesMut::new();
    single.write(&mut laid_out, &event, producer_id);
    assert_eq!(&laid_out[..], written, "the head writes the same single");
    assert_eq!(Some(single.split), split, "and it splits alike");
}
