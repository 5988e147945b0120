//! The hot path of [`super::record::decode_record_in`]: a record whose every event is accepted,
//! decoded borrowing from the record's bytes — the KPL body read in place (`prost`'s varint
//! and key readers over the slice, no copy), a v2 user record through the borrowing
//! [`decode_v2`], a v1 payload through a typed `serde_json` struct of `&str` fields — verified
//! and turned into [`Accepted`] events with no allocation per event (a generated id is kept as
//! its numbers; the group and the producer id are interned, the names kept from batch to batch
//! of a warm instance).
//!
//! What the events of an aggregate share is resolved once per aggregate, not once per event
//! ([`Shared`]): the group a partition key names (interned by the key's index in the KPL
//! table), the group and the producer id of each v2 table entry. Under the default timestamp
//! policy (arrival time, no allowlist) an event's checks are integer comparisons on its
//! fields: no calendar arithmetic per event.
//!
//! It answers only for the plain case: anything it does not read exactly as the general path
//! would (an unknown or repeated protobuf field, a KPL tag, an escaped JSON string, VMT
//! allocations, any refusal) is `None`, and the general path decodes the record. So what it
//! returns is, by construction, what the general path returns (the property test in
//! `consumer/tests/integration/decode_paths.rs` checks it on arbitrary records).

use std::sync::Arc;

use awsmp_contract::event::MAX_EVENT_ID_BYTES;
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::wire::KPL_MAGIC;
use awsmp_contract::wire::v2::{
    EntryAt, EntryV2, EventV2, GroupV2, IdV2, KIND_TABLE, RecordV2, V2, decode_ref_in_order,
    decode_v2, is_binary,
};
use chrono::{DateTime, Datelike, Duration, Utc};
use md5::{Digest, Md5};
use prost::encoding::decode_varint;

use super::accepted::{Accepted, EventId};
use super::intern::{Group, GroupIx, Interner, text_hash};
use super::record::{DecodedRecord, StreamRecord};
use super::trailer::body_and_trailer;
use super::verify::{TimestampPolicy, VerifyPolicy, billing_time_of};

mod v1;
use v1::v1_fields;

/// Epoch milliseconds of 10000-01-01T00:00:00Z: a v2 timestamp is in years 1970–9999 (what
/// `Event::validate` admits) exactly when it lies in `0..YEAR_10000_MS`.
const YEAR_10000_MS: i64 = 253_402_300_800_000;

/// One user record, borrowed: the index of its partition key in the aggregate's table (`None`
/// for a plain record) and its data.
struct User<'a> {
    pk: Option<usize>,
    data: &'a [u8],
}

/// What the hot path keeps from one record to the next of a batch: buffers cleared for each
/// record, so once they have grown a record costs no allocation for its user records, its
/// partition keys or what its events share.
#[derive(Default)]
pub struct Scratch<'a> {
    users: Vec<User<'a>>,
    shared: Shared<'a>,
}

impl Scratch<'_> {
    /// Empty buffers.
    pub fn new() -> Self {
        Self::default()
    }
}

/// A varint of `buf`, as `prost`'s `decode_varint` reads it (which it is, past one byte).
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Option<u64> {
    match buf.split_first() {
        Some((&b, rest)) if b < 0x80 => {
            *buf = rest;
            Some(u64::from(b))
        }
        _ => decode_varint(buf).ok(),
    }
}

/// A protobuf key: field number `field`, wire type `wire_type`.
const fn key(field: u64, wire_type: u64) -> u64 {
    field << 3 | wire_type
}

/// Wire type varint.
const VARINT: u64 = 0;
/// Wire type length-delimited.
const LEN: u64 = 2;

/// A length-delimited field of `buf`.
fn take<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(buf)?).ok()?;
    if len > buf.len() {
        return None;
    }
    let (field, rest) = buf.split_at(len);
    *buf = rest;
    Some(field)
}

/// One KPL `Record` message: (partition key index, data). `None` for anything but fields 1–3
/// each at most once with 1 and 3 present (tags, a repeated field: the general path).
fn kpl_record(mut buf: &[u8]) -> Option<(u64, Option<u64>, &[u8])> {
    let (mut pk, mut ehk, mut data) = (None, None, None);
    while !buf.is_empty() {
        // Any key but these three (whatever `prost` would make of it) is the general path's.
        match varint(&mut buf)? {
            k if k == key(1, VARINT) && pk.is_none() => pk = Some(varint(&mut buf)?),
            k if k == key(2, VARINT) && ehk.is_none() => ehk = Some(varint(&mut buf)?),
            k if k == key(3, LEN) && data.is_none() => data = Some(take(&mut buf)?),
            _ => return None,
        }
    }
    Some((pk?, ehk, data?))
}

/// One partition key of an aggregate's table: the group the batch already knows it names
/// (looked up by its bytes, which then need no UTF-8 check), or its text and hash.
#[derive(Clone)]
enum Pk<'a> {
    Named(GroupIx),
    Text(&'a str, u64),
}

impl<'a> Pk<'a> {
    /// Key `bytes`; `None` when they are not UTF-8.
    fn of(bytes: &'a [u8], interner: &Interner) -> Option<Self> {
        let hash = text_hash(bytes);
        if let Some(ix) = interner.known_key(bytes, hash) {
            return Some(Self::Named(ix));
        }
        Some(Self::Text(std::str::from_utf8(bytes).ok()?, hash))
    }
}

/// The user records of a KPL aggregate's `body` (its trailer already checked), borrowed, into
/// `users` and the partition key table into `pks`; `None` when the hot path does not read it.
fn kpl_users<'a>(
    mut body: &'a [u8],
    interner: &Interner,
    pks: &mut Vec<Pk<'a>>,
    users: &mut Vec<User<'a>>,
) -> Option<()> {
    let mut ehks = 0usize;
    // Both tables may follow the records: the indexes are checked once the body is read.
    let (mut top_pk, mut top_ehk) = (0usize, None);
    while !body.is_empty() {
        let k = varint(&mut body)?;
        if k & 7 != LEN {
            return None;
        }
        let field = take(&mut body)?;
        match k >> 3 {
            1 => pks.push(Pk::of(field, interner)?),
            2 => {
                std::str::from_utf8(field).ok()?;
                ehks += 1;
            }
            3 => {
                let (pk, ehk, data) = kpl_record(field)?;
                let pk = usize::try_from(pk).ok()?;
                top_pk = top_pk.max(pk);
                if let Some(e) = ehk {
                    top_ehk = top_ehk.max(Some(usize::try_from(e).ok()?));
                }
                users.push(User { pk: Some(pk), data });
            }
            _ => return None,
        }
    }
    if users.is_empty() || top_pk >= pks.len() || top_ehk.is_some_and(|e| e >= ehks) {
        return None;
    }
    Some(())
}

/// An event's client time: a v2 event's epoch milliseconds, or the instant a v1 payload
/// spells (kept as parsed: a leap second has no epoch-millisecond form of its own).
#[derive(Clone, Copy)]
enum ClientTime {
    Millis(i64),
    Parsed(DateTime<Utc>),
}

/// An event's fields once decoded, before verification, its group and producer id resolved.
struct Fields<'a> {
    group: Group,
    event_id: EventId,
    quantity: u64,
    time: ClientTime,
    producer_id: Option<&'a str>,
    producer: Option<Arc<str>>,
}

impl Fields<'_> {
    /// What `Event::validate` checks of an event (its group's checks are the interned name's,
    /// `GroupName::is_valid`, made once per group).
    fn valid(&self) -> bool {
        let id_ok = match &self.event_id {
            EventId::Generated(_) => true,
            EventId::Supplied(s) => !s.is_empty() && s.len() <= MAX_EVENT_ID_BYTES,
        };
        let year_ok = match self.time {
            ClientTime::Millis(ms) => (0..YEAR_10000_MS).contains(&ms),
            ClientTime::Parsed(t) => (1970..=9999).contains(&t.year()),
        };
        id_ok && year_ok && self.group.is_valid() && self.producer_id.is_none_or(|p| !p.is_empty())
    }
}

/// What the events of one record share, resolved the first time an event needs it: the v2
/// table, the group each partition key names, each table entry's group and producer id.
#[derive(Default)]
struct Shared<'a> {
    pks: Vec<Pk<'a>>,
    table: Option<Vec<EntryV2<'a>>>,
    entry_groups: Vec<Option<GroupIx>>,
    entry_producers: Vec<Option<Arc<str>>>,
}

impl<'a> Shared<'a> {
    /// Ready for a record whose partition keys are `self.pks` and whose v2 table is `table`.
    fn reset(&mut self, table: Option<Vec<EntryV2<'a>>>) {
        let entries = table.as_ref().map_or(0, Vec::len);
        self.entry_groups.clear();
        self.entry_groups.resize(entries, None);
        self.entry_producers.clear();
        self.entry_producers.resize(entries, None);
        self.table = table;
    }

    /// The group partition key `pk` names.
    fn pk_group(&mut self, pk: usize, interner: &mut Interner) -> Option<GroupIx> {
        let (text, hash) = match self.pks[pk] {
            Pk::Named(ix) => return Some(ix),
            Pk::Text(text, hash) => (text, hash),
        };
        let ix = interner.group_named_by_hashed_key(text, hash)?;
        self.pks[pk] = Pk::Named(ix);
        Some(ix)
    }

    /// The group and the interned producer id of table entry `ix`, for a user record of
    /// partition key `pk`.
    fn entry(
        &mut self,
        ix: usize,
        pk: Option<usize>,
        interner: &mut Interner,
    ) -> Option<(Entry<'a>, Group, Option<Arc<str>>)> {
        let table_entry = self.table.as_ref()?.get(ix)?;
        let entry = Entry::of(table_entry);
        let group = match table_entry.group {
            Some(g) => match self.entry_groups[ix] {
                Some(known) => known,
                None => {
                    let group = intern(g, interner);
                    self.entry_groups[ix] = Some(group);
                    group
                }
            },
            None => self.pk_group(pk?, interner)?,
        };
        let group = interner.name(group).clone();
        let producer = match (entry.producer_id, &self.entry_producers[ix]) {
            (None, _) => None,
            (Some(_), Some(known)) => Some(known.clone()),
            (Some(p), None) => {
                let p = interner.producer(p);
                self.entry_producers[ix] = Some(p.clone());
                Some(p)
            }
        };
        Some((entry, group, producer))
    }
}

fn intern(g: GroupV2<'_>, interner: &mut Interner) -> GroupIx {
    interner.group_ix(g.license_arn, g.customer_aws_account_id, g.dimension)
}

/// A v2 event of user record `user`.
fn v2_fields<'a>(
    user: &User<'a>,
    shared: &mut Shared<'a>,
    interner: &mut Interner,
) -> Option<Fields<'a>> {
    // An aggregate's refs, as the producer writes them, take the straight-line reader.
    if let Some(r) = decode_ref_in_order(user.data) {
        let ix = usize::try_from(r.entry_index).ok()?;
        let (entry, group, producer) = shared.entry(ix, user.pk, interner)?;
        let id = GeneratedId {
            epoch: entry.epoch?,
            lane: r.lane,
            seq: r.seq,
        };
        return Some(Fields {
            group,
            event_id: EventId::generated(id),
            quantity: r.quantity,
            time: ClientTime::Millis(r.timestamp_ms),
            producer_id: entry.producer_id,
            producer,
        });
    }
    let RecordV2::Event(e) = decode_v2(user.data).ok()? else {
        return None;
    };
    let EventV2 {
        entry,
        quantity,
        timestamp_ms,
        id,
        ..
    } = e;
    if e.has_allocations() {
        return None;
    }
    let (entry, group, producer) = match entry {
        // A single's entry names its group itself.
        EntryAt::Inline(entry) => {
            let ix = intern(entry.group?, interner);
            let group = interner.name(ix).clone();
            let producer = entry.producer_id.map(|p| interner.producer(p));
            (Entry::of(&entry), group, producer)
        }
        EntryAt::Index(ix) => shared.entry(usize::try_from(ix).ok()?, user.pk, interner)?,
    };
    let event_id = match id {
        IdV2::Supplied(s) => EventId::parse(s),
        IdV2::Generated { lane, seq } => EventId::generated(GeneratedId {
            epoch: entry.epoch?,
            lane,
            seq,
        }),
    };
    Some(Fields {
        group,
        event_id,
        quantity,
        time: ClientTime::Millis(timestamp_ms),
        producer_id: entry.producer_id,
        producer,
    })
}

/// What an event needs of its table entry besides the group: the epoch of its generated id
/// and its producer id.
#[derive(Clone, Copy)]
struct Entry<'a> {
    epoch: Option<u128>,
    producer_id: Option<&'a str>,
}

impl<'a> Entry<'a> {
    fn of(e: &EntryV2<'a>) -> Self {
        Self {
            epoch: e.epoch,
            producer_id: e.producer_id,
        }
    }
}

/// The checks of [`billing_time_of`] for the events of one record, and the skew they show.
struct Verifier<'p> {
    policy: &'p VerifyPolicy,
    arrival: DateTime<Utc>,
    arrival_second: i64,
    /// Arrival time, no allowlist: the billing second is the arrival's for any event within
    /// the quantity bound.
    by_arrival: bool,
    largest: Option<Duration>,
    millis: Option<(i64, i64)>,
}

impl<'p> Verifier<'p> {
    fn new(policy: &'p VerifyPolicy, arrival: DateTime<Utc>) -> Self {
        Self {
            policy,
            arrival,
            arrival_second: arrival.timestamp(),
            by_arrival: policy.timestamp == TimestampPolicy::Arrival
                && policy.allowed_producers.is_none(),
            largest: None,
            millis: None,
        }
    }

    /// The billing second of `f`, or `None` when it is refused.
    fn billing_second(&mut self, f: &Fields<'_>) -> Option<i64> {
        let timestamp = match f.time {
            ClientTime::Millis(ms) => {
                // The largest skew is at the earliest or the latest client time.
                let (lo, hi) = self.millis.unwrap_or((ms, ms));
                self.millis = Some((lo.min(ms), hi.max(ms)));
                if self.by_arrival {
                    return (f.quantity <= MAX_USAGE_QUANTITY).then_some(self.arrival_second);
                }
                DateTime::from_timestamp_millis(ms)?
            }
            ClientTime::Parsed(t) => {
                self.largest = self.largest.max(Some((t - self.arrival).abs()));
                t
            }
        };
        billing_time_of(
            f.producer_id,
            f.quantity,
            timestamp,
            self.arrival,
            self.policy,
        )
        .ok()
        .map(|b| b.timestamp())
    }

    /// The largest distance between an event's client time and the arrival time.
    fn largest_skew(&self) -> Option<Duration> {
        let skew = |ms: i64| DateTime::from_timestamp_millis(ms).map(|t| (t - self.arrival).abs());
        let (lo, hi) = match self.millis {
            Some((lo, hi)) => (skew(lo), skew(hi)),
            None => (None, None),
        };
        self.largest.max(lo).max(hi)
    }
}

/// The record decoded on the hot path, or `None`: the general path decides. Checks an
/// aggregate's MD5 trailer itself.
pub fn decode_plain(
    record: &StreamRecord,
    policy: &VerifyPolicy,
    interner: &mut Interner,
) -> Option<DecodedRecord> {
    let data = &record.data[..];
    let trailer_ok = data.starts_with(&KPL_MAGIC)
        && body_and_trailer(data).is_some_and(|(b, t)| Md5::digest(b).as_slice() == t);
    decode_plain_checked(record, policy, interner, trailer_ok)
}

/// [`decode_plain`] of a record whose MD5 trailer, if it is an aggregate, was already checked:
/// `trailer_ok` says whether it matched (a mismatch is the general path's to refuse).
pub fn decode_plain_checked(
    record: &StreamRecord,
    policy: &VerifyPolicy,
    interner: &mut Interner,
    trailer_ok: bool,
) -> Option<DecodedRecord> {
    decode_plain_in(record, policy, interner, trailer_ok, &mut Scratch::new())
}

/// [`decode_plain_checked`] with the batch's `scratch` buffers (the records of one batch
/// share them).
pub fn decode_plain_in<'a>(
    record: &'a StreamRecord,
    policy: &VerifyPolicy,
    interner: &mut Interner,
    trailer_ok: bool,
    scratch: &mut Scratch<'a>,
) -> Option<DecodedRecord> {
    let data = &record.data[..];
    let aggregated = data.starts_with(&KPL_MAGIC);
    let Scratch { users, shared } = scratch;
    users.clear();
    shared.pks.clear();
    if aggregated {
        if !trailer_ok {
            return None;
        }
        kpl_users(body_and_trailer(data)?.0, interner, &mut shared.pks, users)?;
    } else {
        users.push(User { pk: None, data });
    }
    // A v2 aggregate's first user record is its table.
    let table: Option<Vec<EntryV2<'_>>> = match users.first() {
        Some(u) if aggregated && u.data.starts_with(&[V2, KIND_TABLE]) => {
            match decode_v2(u.data).ok()? {
                RecordV2::Table(t) => Some(t),
                RecordV2::Event(_) => return None,
            }
        }
        _ => None,
    };
    let first_event = usize::from(table.is_some());
    shared.reset(table);
    let mut verifier = Verifier::new(policy, record.arrival);
    let mut events = Vec::with_capacity(users.len() - first_event);
    for (i, u) in users.iter().enumerate().skip(first_event) {
        let f = if is_binary(u.data) {
            v2_fields(u, shared, interner)?
        } else {
            v1_fields(u.data, interner)?
        };
        if !f.valid() {
            return None;
        }
        let second = verifier.billing_second(&f)?;
        let accepted = Accepted {
            group: f.group,
            second,
            quantity: f.quantity,
            allocations: None,
            event_id: f.event_id,
            producer_id: f.producer,
        };
        events.push((u32::try_from(i).unwrap_or(u32::MAX), accepted));
    }
    let dedup_key = if aggregated {
        super::record::aggregate_key(data)
    } else {
        format!("evt:{}", events.first()?.1.event_id)
    };
    Some(DecodedRecord {
        dedup_key,
        events,
        refused: Vec::new(),
        largest_client_skew: verifier.largest_skew(),
    })
}
