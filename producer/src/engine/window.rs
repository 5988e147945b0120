//! Batching: the linger window that stages recorded events (collapsing them when asked), and
//! its closing into packed Kinesis records.

use tokio::time::Instant;

use super::Engine;
use super::record::{KRecord, UserAck, UserMeta};
use crate::batch::{Packed, UserRec, pack};
use crate::collapse::Collapser;
use crate::config::ProducerConfig;
use crate::handoff::{Body, Incoming, RECORD_OVERHEAD_BYTES};
use crate::limits::MAX_BYTES_PER_PUT;
use crate::partition::{partition_hash, partition_key};
use crate::shards::ShardMapSource;
use crate::sink::RecordSink;

/// Size trigger: a window worth a few full PutRecords calls, or a quarter of the buffer, goes
/// out without waiting for the linger.
pub(crate) fn size_trigger(config: &ProducerConfig) -> usize {
    (4 * MAX_BYTES_PER_PUT).min(config.max_buffered_bytes / 4)
}

/// Events staged since the window opened.
#[derive(Default)]
pub(super) struct Window {
    pub opened_at: Option<Instant>,
    bytes: usize,
    plain: Vec<UserRec<UserMeta>>,
    collapser: Collapser<UserMeta>,
}

impl<S: RecordSink, M: ShardMapSource> Engine<S, M> {
    pub(super) fn stage(&mut self, incoming: Incoming) {
        let Incoming {
            body,
            partition_key,
            hash,
            enqueued_at,
            reservation,
        } = incoming;
        *self.outstanding.entry(self.epoch).or_default() += 1;
        let meta = UserMeta {
            enqueued_at,
            epoch: self.epoch,
            constituents: 1,
            reservation,
        };
        let w = &mut self.window;
        w.opened_at.get_or_insert_with(Instant::now);
        w.bytes += meta.reservation.bytes();
        match body {
            Body::Encoded(payload) => w.plain.push(UserRec {
                payload,
                partition_key,
                hash,
                meta,
            }),
            Body::Event { event, payload_len } => {
                w.collapser.add(event, partition_key, payload_len, meta);
            }
        }
        if self.window.bytes >= size_trigger(&self.parts.config) {
            self.close_window();
        }
    }

    pub(super) fn close_window(&mut self) {
        if self.window.opened_at.is_none() {
            return;
        }
        let mut window = std::mem::take(&mut self.window);
        let mut users = std::mem::take(&mut window.plain);
        let mut collapsed_away = 0u64;
        for c in window.collapser.drain() {
            let payload = bytes::Bytes::from(self.parts.config.wire_version.encode(&c.event));
            let pk = partition_key(
                &c.event.license_arn,
                &c.event.customer_aws_account_id,
                &c.event.dimension,
            );
            let mut meta = c.meta;
            collapsed_away += meta.constituents - 1;
            meta.reservation
                .shrink_to(payload.len() + pk.len() + RECORD_OVERHEAD_BYTES);
            users.push(UserRec {
                payload,
                hash: partition_hash(&pk),
                partition_key: pk,
                meta,
            });
        }
        if collapsed_away > 0 {
            self.parts
                .metrics
                .events_collapsed
                .increment(collapsed_away);
        }
        let map = self.shard_map.clone();
        let packed = pack(
            users,
            |h| map.as_ref().and_then(|m| m.shard_index(h)),
            self.parts.config.aggregation,
            self.parts.config.max_aggregate_bytes,
        );
        for p in packed {
            let r = self.new_record(p);
            self.enqueue_ready(r);
        }
    }

    fn new_record(&self, p: Packed<UserMeta>) -> KRecord {
        let mut metas = p.users.into_iter();
        let first = metas
            .next()
            .expect("a record holds at least one user record");
        let mut oldest = first.enqueued_at;
        let mut reservation = first.reservation;
        let mut users = vec![UserAck {
            enqueued_at: first.enqueued_at,
            epoch: first.epoch,
            constituents: first.constituents,
        }];
        for u in metas {
            oldest = oldest.min(u.enqueued_at);
            reservation.merge(u.reservation);
            users.push(UserAck {
                enqueued_at: u.enqueued_at,
                epoch: u.epoch,
                constituents: u.constituents,
            });
        }
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
