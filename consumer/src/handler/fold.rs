//! Step 4: fold the accepted events of the records before the cut into row contributions,
//! one per (group, UTC second) ([`BatchFold`]), with an `EventsAccepted` metric per producer.

use std::collections::BTreeMap;

use awsmp_aws::emf::Metric;
use awsmp_contract::metrics;

use super::{Batch, Consumer};
use crate::archive::ArchivedEvent;
use crate::domain::fold::{BatchFold, FoldedRows};
use crate::domain::row::RecordMeta;
use crate::domain::seq::{Lane, SeqNum};

/// The batch's rows and, per record before the cut, its lane and sequence number.
pub(super) struct Folded {
    /// One contribution per row the batch touches.
    pub(super) rows: FoldedRows,
    /// Indexed like the batch's records.
    pub(super) metas: Vec<RecordMeta>,
    /// With a billing archive: each folded event with its record's index (`archive.rs`).
    pub(super) archived: Vec<(usize, ArchivedEvent)>,
}

impl Consumer {
    /// Fold the accepted events before `cut` (the decoded records are taken out of their slots).
    pub(super) fn fold(&self, batch: &mut Batch<'_>, cut: usize) -> Folded {
        let events = batch.slots[..cut.min(batch.slots.len())]
            .iter()
            .filter(|s| !s.duplicate)
            .filter_map(|s| s.decoded.as_ref())
            .map(|d| d.events.len())
            .sum();
        let mut fold = BatchFold::for_events(events);
        let mut metas: Vec<RecordMeta> = Vec::with_capacity(cut);
        let mut per_producer: BTreeMap<String, u64> = BTreeMap::new();
        let mut archived = Vec::new();
        for (i, s) in batch.slots.iter_mut().enumerate().take(cut) {
            let meta = match &s.record {
                Ok(rec) => RecordMeta {
                    lane: rec.lane(),
                    seq: rec.sequence_number.clone(),
                },
                // Never folded; an empty slot keeps the indexes aligned.
                Err(_) => RecordMeta {
                    lane: Lane::from_name(""),
                    seq: SeqNum::parse("0").expect("0 is a sequence number"),
                },
            };
            metas.push(meta);
            if s.duplicate {
                continue;
            }
            if let Some(d) = s.decoded.take() {
                for (sub, ev) in d.events {
                    if let (Some(_), Ok(rec)) = (&self.archive, &s.record) {
                        let at = (
                            rec.stream.as_str(),
                            rec.shard_id.as_str(),
                            rec.sequence_number.decimal(),
                            Some(sub),
                        );
                        archived.push((i, ArchivedEvent::new(&ev.to_verified(), at, batch.now)));
                    }
                    batch.report.events_accepted += 1;
                    // Counted by name without an allocation per event: the map owns one key
                    // per producer.
                    let producer = ev.producer_id.as_deref().unwrap_or("unknown");
                    match per_producer.get_mut(producer) {
                        Some(n) => *n += 1,
                        None => {
                            per_producer.insert(producer.to_owned(), 1);
                        }
                    }
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
        batch.report.rows = rows.len();
        Folded {
            rows,
            metas,
            archived,
        }
    }
}
