//! The hot path of [`super::record::decode_record_in`]: a record whose every event is accepted,
//! decoded borrowing from the record's bytes — the KPL body read in place (`prost`'s varint
//! and key readers over the slice, no copy), a v2 user record through the borrowing
//! [`decode_v2`], a v1 payload through a typed `serde_json` struct of `&str` fields — verified
//! and turned into [`Accepted`] events with no allocation per event (a generated id is kept as
//! its numbers; the group and the producer id are interned per batch).
//!
//! It answers only for the plain case: anything it does not read exactly as the general path
//! would (an unknown or repeated protobuf field, a KPL tag, an escaped JSON string, VMT
//! allocations, any refusal) is `None`, and the general path decodes the record. So what it
//! returns is, by construction, what the general path returns (the property test in
//! `consumer/tests/decode_paths.rs` checks it on arbitrary records).

use awsmp_producer::event::MAX_EVENT_ID_BYTES;
use awsmp_producer::event_id::GeneratedId;
use awsmp_producer::wire::v2::{
    EntryAt, EntryV2, EventV2, GroupV2, IdV2, KIND_TABLE, RecordV2, V2, decode_v2, is_binary,
};
use awsmp_producer::wire::{AGGREGATE_OVERHEAD, KPL_MAGIC, MD5_LEN, PAYLOAD_VERSION};
use chrono::{DateTime, Datelike, Duration, Timelike, Utc};
use md5::{Digest, Md5};
use prost::encoding::{WireType, decode_key, decode_varint};
use serde::Deserialize;

use super::accepted::{Accepted, EventId};
use super::intern::Interner;
use super::record::{DecodedRecord, StreamRecord};
use super::verify::{VerifyPolicy, billing_time_of};

/// One user record, borrowed: its partition key (`None` for a plain record) and data.
struct User<'a> {
    pk: Option<&'a str>,
    data: &'a [u8],
}

/// A length-delimited field of `buf`.
fn take<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(decode_varint(buf).ok()?).ok()?;
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
        let (tag, wt) = decode_key(&mut buf).ok()?;
        match (tag, wt) {
            (1, WireType::Varint) if pk.is_none() => pk = Some(decode_varint(&mut buf).ok()?),
            (2, WireType::Varint) if ehk.is_none() => ehk = Some(decode_varint(&mut buf).ok()?),
            (3, WireType::LengthDelimited) if data.is_none() => data = Some(take(&mut buf)?),
            _ => return None,
        }
    }
    Some((pk?, ehk, data?))
}

/// The user records of a KPL aggregate, borrowed from `data` (MD5 verified), or `None`.
fn kpl_users(data: &[u8]) -> Option<Vec<User<'_>>> {
    if data.len() < AGGREGATE_OVERHEAD {
        return None;
    }
    let (body, digest) = data[KPL_MAGIC.len()..].split_at(data.len() - AGGREGATE_OVERHEAD);
    if Md5::digest(body).as_slice() != digest {
        return None;
    }
    let mut pks: Vec<&str> = Vec::new();
    let mut ehks = 0usize;
    let mut records: Vec<(u64, Option<u64>, &[u8])> = Vec::new();
    let mut buf = body;
    while !buf.is_empty() {
        let (tag, wt) = decode_key(&mut buf).ok()?;
        if wt != WireType::LengthDelimited {
            return None;
        }
        let field = take(&mut buf)?;
        match tag {
            1 => pks.push(std::str::from_utf8(field).ok()?),
            2 => {
                std::str::from_utf8(field).ok()?;
                ehks += 1;
            }
            3 => records.push(kpl_record(field)?),
            _ => return None,
        }
    }
    if records.is_empty() {
        return None;
    }
    records
        .into_iter()
        .map(|(pk, ehk, data)| {
            let pk = pks.get(usize::try_from(pk).ok()?)?;
            if let Some(e) = ehk
                && usize::try_from(e).ok()? >= ehks
            {
                return None;
            }
            Some(User { pk: Some(pk), data })
        })
        .collect()
}

/// A v1 payload's fields, borrowed (a string with an escape does not borrow: the general path).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V1<'a> {
    v: u64,
    #[serde(rename = "eventId")]
    event_id: &'a str,
    #[serde(rename = "licenseArn")]
    license_arn: &'a str,
    #[serde(rename = "customerAWSAccountId")]
    customer_aws_account_id: &'a str,
    dimension: &'a str,
    quantity: u64,
    timestamp: &'a str,
    #[serde(rename = "producerId", default)]
    producer_id: Option<&'a str>,
    #[serde(rename = "usageAllocations", default)]
    usage_allocations: Option<serde::de::IgnoredAny>,
}

/// An event's fields once decoded, before verification.
struct Fields<'a> {
    group: GroupV2<'a>,
    event_id: EventId,
    quantity: u64,
    timestamp: DateTime<Utc>,
    producer_id: Option<&'a str>,
}

impl Fields<'_> {
    /// What `Event::validate` checks of an event without allocations, but for its group.
    fn valid(&self) -> bool {
        let id_ok = match &self.event_id {
            EventId::Generated(_) => true,
            EventId::Supplied(s) => !s.is_empty() && s.len() <= MAX_EVENT_ID_BYTES,
        };
        // The group's own checks are the interned name's (`GroupName::is_valid`).
        id_ok
            && (1970..=9999).contains(&self.timestamp.year())
            && self.producer_id.is_none_or(|p| !p.is_empty())
    }
}

/// RFC 3339 with a zero offset, sub-millisecond digits dropped (as the v1 decoder reads it).
fn v1_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let parsed = DateTime::parse_from_rfc3339(s).ok()?;
    if parsed.offset().local_minus_utc() != 0 {
        return None;
    }
    let ts = parsed.with_timezone(&Utc);
    let nanos = ts.nanosecond();
    Some(ts.with_nanosecond(nanos - nanos % 1_000_000).unwrap_or(ts))
}

fn v1_fields(data: &[u8]) -> Option<Fields<'_>> {
    let p: V1<'_> = serde_json::from_slice(data).ok()?;
    if p.v != PAYLOAD_VERSION || p.usage_allocations.is_some() {
        return None;
    }
    Some(Fields {
        group: GroupV2 {
            license_arn: p.license_arn,
            customer_aws_account_id: p.customer_aws_account_id,
            dimension: p.dimension,
        },
        event_id: EventId::parse(p.event_id),
        quantity: p.quantity,
        timestamp: v1_timestamp(p.timestamp)?,
        producer_id: p.producer_id,
    })
}

/// A v2 event with its entry (`entries`: the aggregate's table, if it has one).
fn v2_fields<'a>(
    data: &'a [u8],
    pk: Option<&'a str>,
    entries: Option<&[EntryV2<'a>]>,
) -> Option<Fields<'a>> {
    let RecordV2::Event(e) = decode_v2(data).ok()? else {
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
    let (entry, pk) = match entry {
        // A single's entry names its group itself.
        EntryAt::Inline(entry) => (entry, None),
        EntryAt::Index(ix) => (*entries?.get(usize::try_from(ix).ok()?)?, pk),
    };
    let group = entry
        .group
        .or_else(|| pk.and_then(GroupV2::from_partition_key))?;
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
        timestamp: DateTime::from_timestamp_millis(timestamp_ms)?,
        producer_id: entry.producer_id,
    })
}

/// The record decoded on the hot path, or `None`: the general path decides.
pub fn decode_plain(
    record: &StreamRecord,
    policy: &VerifyPolicy,
    interner: &mut Interner,
) -> Option<DecodedRecord> {
    let data = &record.data[..];
    let aggregated = data.starts_with(&KPL_MAGIC);
    let users = if aggregated {
        kpl_users(data)?
    } else {
        vec![User { pk: None, data }]
    };
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
    let mut events = Vec::with_capacity(users.len());
    let mut largest: Option<Duration> = None;
    let mut plain_id = None;
    for (i, u) in users.iter().enumerate() {
        if i == 0 && table.is_some() {
            continue;
        }
        let f = if is_binary(u.data) {
            v2_fields(u.data, u.pk, table.as_deref())?
        } else {
            v1_fields(u.data)?
        };
        if !f.valid() {
            return None;
        }
        let skew = (f.timestamp - record.arrival).abs();
        largest = largest.max(Some(skew));
        let billing = billing_time_of(
            f.producer_id,
            f.quantity,
            f.timestamp,
            record.arrival,
            policy,
        )
        .ok()?;
        let group = interner.group(
            f.group.license_arn,
            f.group.customer_aws_account_id,
            f.group.dimension,
        );
        if !group.is_valid() {
            return None;
        }
        if !aggregated {
            plain_id = Some(format!("evt:{}", f.event_id));
        }
        let accepted = Accepted {
            group,
            second: billing.timestamp(),
            quantity: f.quantity,
            allocations: None,
            event_id: f.event_id,
            producer_id: f.producer_id.map(|p| interner.producer(p)),
        };
        events.push((u32::try_from(i).unwrap_or(u32::MAX), accepted));
    }
    let dedup_key = if aggregated {
        format!("kpl:{}", hex::encode(&data[data.len() - MD5_LEN..]))
    } else {
        plain_id?
    };
    Some(DecodedRecord {
        dedup_key,
        events,
        refused: Vec::new(),
        largest_client_skew: largest,
    })
}
