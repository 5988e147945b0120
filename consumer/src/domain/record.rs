//! One stream record: deaggregate, decode (v1 JSON or v2 binary, docs/wire-format.md),
//! verify, and its de-duplication key. A record whose every event is accepted takes the
//! borrowing hot path ([`super::fast`]); any other record the general path below, which reads
//! owned events and says why each refused one is refused.

use awsmp_contract::wire::{MD5_LEN, decode_events, is_aggregated};
use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use md5::{Digest, Md5};

use super::accepted::{Accepted, EventId};
use super::intern::Interner;
use super::seq::{Lane, SeqNum};
use super::verify::{VerifiedEvent, VerifyPolicy, billing_time, client_skew, verified};

/// One Kinesis record as the event source mapping delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    /// Stream name (from the event source ARN).
    pub stream: String,
    /// Shard id (from the event id `shardId-…:seq`).
    pub shard_id: String,
    /// Sequence number.
    pub sequence_number: SeqNum,
    /// Kinesis partition key of the record (for an aggregate: its outer key).
    pub partition_key: String,
    /// `approximateArrivalTimestamp`: the server receive time.
    pub arrival: DateTime<Utc>,
    /// The record's data.
    pub data: Bytes,
}

impl StreamRecord {
    /// The lane this record is ordered in (see [`Lane`]).
    pub fn lane(&self) -> Lane {
        Lane::new(&self.shard_id, &self.partition_key)
    }
}

/// What a rejected item carried, when it decoded far enough to tell.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventSummary {
    /// Event id.
    pub event_id: String,
    /// License ARN.
    pub license_arn: String,
    /// Account id.
    pub customer_aws_account_id: String,
    /// Dimension.
    pub dimension: String,
    /// Quantity.
    pub quantity: u64,
    /// Producer id.
    pub producer_id: Option<String>,
    /// Client timestamp.
    pub timestamp: Option<DateTime<Utc>>,
}

/// A user record (or a whole record) that was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedItem {
    /// Position inside the aggregate; `None` when the whole record is refused.
    pub sub: Option<u32>,
    /// Stable reason code.
    pub reason: &'static str,
    /// Detail.
    pub detail: String,
    /// The refused bytes (the user record, or the whole record).
    pub data: Bytes,
    /// What the event said, if it decoded.
    pub event: Option<EventSummary>,
}

/// A record after decoding and verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    /// De-duplication key: the aggregate's MD5 trailer, the plain event's id, or the MD5 of
    /// bytes that did not decode (so a duplicated bad record is recorded once).
    pub dedup_key: String,
    /// Accepted events with their position inside the record.
    pub events: Vec<(u32, Accepted)>,
    /// Refused items.
    pub refused: Vec<RefusedItem>,
    /// The largest distance between a decoded event's client time and the arrival time.
    pub largest_client_skew: Option<Duration>,
}

fn raw_key(data: &[u8]) -> String {
    hex_key("raw:", &Md5::digest(data))
}

/// The de-duplication key of KPL aggregate `data`, its trailer already checked (the MD5 of the
/// whole body): `kpl:` and the trailer in lower-case hex.
pub(crate) fn aggregate_key(data: &[u8]) -> String {
    hex_key("kpl:", &data[data.len() - MD5_LEN..])
}

/// `prefix` and the digest `md5` in lower-case hex, written straight into the key's string
/// (one allocation, none of the formatting machinery: a key is made per record).
fn hex_key(prefix: &str, md5: &[u8]) -> String {
    let mut digits = [0u8; 2 * MD5_LEN];
    hex::encode_to_slice(md5, &mut digits).expect("an MD5 digest: 16 bytes");
    let mut key = String::with_capacity(prefix.len() + digits.len());
    key.push_str(prefix);
    key.push_str(std::str::from_utf8(&digits).expect("hex digits are ASCII"));
    key
}

fn summary(e: &awsmp_contract::Event) -> EventSummary {
    EventSummary {
        event_id: e.event_id.clone(),
        license_arn: e.license_arn.clone(),
        customer_aws_account_id: e.customer_aws_account_id.clone(),
        dimension: e.dimension.clone(),
        quantity: e.quantity,
        producer_id: e.producer_id.clone(),
        timestamp: Some(e.timestamp),
    }
}

/// Deaggregate, decode and verify one record. Never fails: every user record ends up either
/// accepted or refused with a reason.
pub fn decode_record(record: &StreamRecord, policy: &VerifyPolicy) -> DecodedRecord {
    decode_record_in(record, policy, &mut Interner::new())
}

/// [`decode_record`], interning group names and producer ids in the batch's `interner`.
pub fn decode_record_in(
    record: &StreamRecord,
    policy: &VerifyPolicy,
    interner: &mut Interner,
) -> DecodedRecord {
    super::fast::decode_plain(record, policy, interner)
        .unwrap_or_else(|| decode_general(record, policy, interner))
}

/// Every record of a batch decoded as [`decode_record_in`] decodes it, one `interner` for the
/// batch: the aggregates' MD5 trailers are checked together first
/// ([`super::trailer::trailers_match`], several aggregates per SIMD pass), then each record
/// takes the hot path or the general one.
pub fn decode_records(
    records: &[&StreamRecord],
    policy: &VerifyPolicy,
    interner: &mut Interner,
) -> Vec<DecodedRecord> {
    let data: Vec<&[u8]> = records.iter().map(|r| &r.data[..]).collect();
    let trailers = super::trailer::trailers_match(&data);
    let mut scratch = super::fast::Scratch::new();
    records
        .iter()
        .zip(trailers)
        .map(|(r, trailer_ok)| {
            super::fast::decode_plain_in(r, policy, interner, trailer_ok, &mut scratch)
                .unwrap_or_else(|| decode_general(r, policy, interner))
        })
        .collect()
}

/// The general path: [`decode_events`], owned events, a refusal for each that fails.
pub fn decode_general(
    record: &StreamRecord,
    policy: &VerifyPolicy,
    interner: &mut Interner,
) -> DecodedRecord {
    let data = &record.data;
    let users = match decode_events(data) {
        Ok(users) => users,
        Err(e) => {
            return DecodedRecord {
                dedup_key: raw_key(data),
                events: Vec::new(),
                refused: vec![RefusedItem {
                    sub: None,
                    reason: e.reason(),
                    detail: e.to_string(),
                    data: data.clone(),
                    event: None,
                }],
                largest_client_skew: None,
            };
        }
    };
    let aggregated = is_aggregated(data);
    let mut out = DecodedRecord {
        dedup_key: if aggregated {
            // deaggregate verified the trailer: it is the MD5 of the whole body.
            aggregate_key(data)
        } else {
            raw_key(data)
        },
        events: Vec::with_capacity(users.len()),
        refused: Vec::new(),
        largest_client_skew: None,
    };
    for user in users {
        let sub = user.sub;
        let item_sub = aggregated.then_some(sub);
        match user.event {
            Err(e) => out.refused.push(RefusedItem {
                sub: item_sub,
                reason: e.reason(),
                detail: e.to_string(),
                data: user.data,
                event: None,
            }),
            Ok(event) => {
                let skew = client_skew(&event, record.arrival).abs();
                out.largest_client_skew = out.largest_client_skew.max(Some(skew));
                if !aggregated {
                    out.dedup_key = format!("evt:{}", event.event_id);
                }
                match billing_time(&event, record.arrival, policy) {
                    Ok(billing) => {
                        let v = verified(event, billing);
                        out.events.push((sub, accepted(v, interner)));
                    }
                    Err(r) => out.refused.push(RefusedItem {
                        sub: item_sub,
                        reason: r.reason,
                        detail: r.detail,
                        data: user.data,
                        event: Some(summary(&event)),
                    }),
                }
            }
        }
    }
    out
}

/// The hot-path form of `v`, its names interned in `interner`.
pub fn accepted(v: VerifiedEvent, interner: &mut Interner) -> Accepted {
    Accepted {
        group: interner.group(&v.license_arn, &v.customer_aws_account_id, &v.dimension),
        second: v.second,
        quantity: v.quantity,
        allocations: v.allocations,
        event_id: EventId::parse(&v.event_id),
        producer_id: v.producer_id.as_deref().map(|p| interner.producer(p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_contract::Event;
    use awsmp_contract::wire::{encode_aggregated, encode_event};
    use chrono::TimeZone;

    const ARN: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    fn rec(data: Bytes) -> StreamRecord {
        StreamRecord {
            stream: "s".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: SeqNum::parse("1").unwrap(),
            partition_key: "pk".into(),
            arrival: Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap(),
            data,
        }
    }

    fn payload(id: &str, q: u64) -> Vec<u8> {
        let ts = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        encode_event(&Event::new(ARN, "210987654321", "api", q, ts).with_event_id(id))
    }

    #[test]
    fn record_keys_are_their_digests_in_lower_case_hex() {
        let mut data = b"body".to_vec();
        data.extend([0x00, 0x01, 0xab, 0xcd, 0xef, 0x10, 0x9f, 0xff]);
        data.extend([0, 0, 0, 0, 0, 0, 0, 0x7a]);
        assert_eq!(aggregate_key(&data), "kpl:0001abcdef109fff000000000000007a");
        // RFC 1321's test suite: MD5("abc").
        assert_eq!(raw_key(b"abc"), "raw:900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn aggregate_with_a_bad_user_record_keeps_the_good_ones() {
        let good = payload("a", 3);
        let bad = br#"{"v":2}"#.to_vec();
        let data = encode_aggregated([("pk", None, &good[..]), ("pk", None, &bad[..])]);
        let trailer = hex::encode(&data[data.len() - 16..]);
        let d = decode_record(&rec(data), &VerifyPolicy::default());
        assert_eq!(d.dedup_key, format!("kpl:{trailer}"));
        assert_eq!(d.events.len(), 1);
        assert_eq!(d.events[0].0, 0);
        assert_eq!(d.refused.len(), 1);
        assert_eq!(d.refused[0].sub, Some(1));
        assert_eq!(d.refused[0].reason, "UnknownVersion");
    }

    #[test]
    fn plain_records_dedup_by_event_id_and_corrupt_ones_by_bytes() {
        let d = decode_record(&rec(payload("evt-7", 1).into()), &VerifyPolicy::default());
        assert_eq!(d.dedup_key, "evt:evt-7");
        assert_eq!(d.events[0].0, 0);

        let mut corrupt = encode_aggregated([("pk", None, &payload("x", 1)[..])]).to_vec();
        let n = corrupt.len();
        corrupt[n - 1] ^= 0xff;
        let d = decode_record(&rec(corrupt.clone().into()), &VerifyPolicy::default());
        assert_eq!(d.refused[0].reason, "Md5Mismatch");
        assert_eq!(d.refused[0].sub, None);
        assert_eq!(d.dedup_key, raw_key(&corrupt));
    }
}
