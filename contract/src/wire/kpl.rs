//! The KPL aggregated-record format: `F3 89 9A C2` magic, a protobuf `AggregatedRecord` body,
//! then the 16-byte MD5 of that body. The protobuf messages are derived by hand from the KPL's
//! `messages.proto` (proto2), so no `protoc` is needed.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use md5::{Digest, Md5};
use prost::Message;
use prost::encoding::encoded_len_varint;

use crate::error::DecodeError;

/// The four bytes every aggregated record starts with.
pub const KPL_MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
/// Length of the MD5 trailer.
pub const MD5_LEN: usize = 16;
/// Bytes an aggregate adds around its protobuf body (magic + MD5).
pub const AGGREGATE_OVERHEAD: usize = KPL_MAGIC.len() + MD5_LEN;

/// Protobuf messages of the KPL aggregation format.
pub mod pb {
    use bytes::Bytes;

    /// `message AggregatedRecord`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AggregatedRecord {
        /// `repeated string partition_key_table = 1;`
        #[prost(string, repeated, tag = "1")]
        pub partition_key_table: Vec<String>,
        /// `repeated string explicit_hash_key_table = 2;`
        #[prost(string, repeated, tag = "2")]
        pub explicit_hash_key_table: Vec<String>,
        /// `repeated Record records = 3;`
        #[prost(message, repeated, tag = "3")]
        pub records: Vec<Record>,
    }

    /// `message Record`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Record {
        /// `required uint64 partition_key_index = 1;`
        #[prost(uint64, required, tag = "1")]
        pub partition_key_index: u64,
        /// `optional uint64 explicit_hash_key_index = 2;`
        #[prost(uint64, optional, tag = "2")]
        pub explicit_hash_key_index: Option<u64>,
        /// `required bytes data = 3;`
        #[prost(bytes = "bytes", required, tag = "3")]
        pub data: Bytes,
        /// `repeated Tag tags = 4;`
        #[prost(message, repeated, tag = "4")]
        pub tags: Vec<Tag>,
    }

    /// `message Tag`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tag {
        /// `required string key = 1;`
        #[prost(string, required, tag = "1")]
        pub key: String,
        /// `optional string value = 2;`
        #[prost(string, optional, tag = "2")]
        pub value: Option<String>,
    }
}

/// One user record out of a Kinesis record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// The user record's partition key; `None` for a plain record, whose partition key is the
    /// enclosing Kinesis record's.
    pub partition_key: Option<String>,
    /// The user record's explicit hash key, if the aggregate carried one.
    pub explicit_hash_key: Option<String>,
    /// The user record's data (for awsmp, one v1 event payload).
    pub data: Bytes,
    /// Position inside the aggregate (0 for a plain record), as the KCL's sub-sequence number.
    pub sub_sequence_number: u64,
    /// Whether it came out of an aggregate.
    pub aggregated: bool,
}

/// True when `data` starts with the KPL magic bytes.
pub fn is_aggregated(data: &[u8]) -> bool {
    data.starts_with(&KPL_MAGIC)
}

/// Splits one Kinesis record's data into user records. Data starting with the KPL magic must be
/// a valid aggregate (MD5 verified, protobuf well-formed, indexes in range, at least one user
/// record); anything else is a plain record and comes back whole as one user record.
pub fn deaggregate(data: &[u8]) -> Result<Vec<UserRecord>, DecodeError> {
    if is_aggregated(data) {
        decode_aggregated(data)
    } else {
        Ok(vec![UserRecord {
            partition_key: None,
            explicit_hash_key: None,
            data: Bytes::copy_from_slice(data),
            sub_sequence_number: 0,
            aggregated: false,
        }])
    }
}

/// Decodes data that must be a KPL aggregate.
pub fn decode_aggregated(data: &[u8]) -> Result<Vec<UserRecord>, DecodeError> {
    if !is_aggregated(data) {
        return Err(DecodeError::BadMagic);
    }
    if data.len() < AGGREGATE_OVERHEAD {
        return Err(DecodeError::Truncated(data.len()));
    }
    let (body, digest) = data[KPL_MAGIC.len()..].split_at(data.len() - AGGREGATE_OVERHEAD);
    if Md5::digest(body).as_slice() != digest {
        return Err(DecodeError::Md5Mismatch);
    }
    let agg = pb::AggregatedRecord::decode(Bytes::copy_from_slice(body))
        .map_err(|e| DecodeError::MalformedProtobuf(e.to_string()))?;
    if agg.records.is_empty() {
        return Err(DecodeError::EmptyAggregate);
    }
    let pb::AggregatedRecord {
        partition_key_table: pks,
        explicit_hash_key_table: ehks,
        records,
    } = agg;
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let pk = usize::try_from(r.partition_key_index)
                .ok()
                .and_then(|ix| pks.get(ix))
                .ok_or_else(|| {
                    DecodeError::MalformedProtobuf(format!(
                        "record {i}: partition_key_index {} outside a table of {}",
                        r.partition_key_index,
                        pks.len()
                    ))
                })?;
            let ehk = match r.explicit_hash_key_index {
                None => None,
                Some(ix) => Some(
                    usize::try_from(ix)
                        .ok()
                        .and_then(|ix| ehks.get(ix))
                        .ok_or_else(|| {
                            DecodeError::MalformedProtobuf(format!(
                                "record {i}: explicit_hash_key_index {ix} outside a table of {}",
                                ehks.len()
                            ))
                        })?
                        .clone(),
                ),
            };
            Ok(UserRecord {
                partition_key: Some(pk.clone()),
                explicit_hash_key: ehk,
                data: r.data,
                sub_sequence_number: i as u64,
                aggregated: true,
            })
        })
        .collect()
}

/// Builds one aggregated record, tracking its exact encoded size as user records are added
/// (so a packer can stop before a limit instead of encoding to find out).
#[derive(Debug, Default)]
pub struct AggregateBuilder {
    pk_table: Vec<String>,
    pk_lookup: HashMap<String, u64>,
    ehk_table: Vec<String>,
    ehk_lookup: HashMap<String, u64>,
    records: Vec<pb::Record>,
    body_len: usize,
}

fn field_len(len: usize) -> usize {
    // One-byte key (field numbers < 16) + length varint + bytes.
    1 + encoded_len_varint(len as u64) + len
}

impl AggregateBuilder {
    /// An empty aggregate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of user records added.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when no user record was added.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Encoded size of the whole aggregate (magic + body + MD5) as it stands.
    pub fn encoded_len(&self) -> usize {
        AGGREGATE_OVERHEAD + self.body_len
    }

    /// Encoded size of the whole aggregate if this user record were added.
    pub fn encoded_len_with(
        &self,
        partition_key: &str,
        explicit_hash_key: Option<&str>,
        data_len: usize,
    ) -> usize {
        AGGREGATE_OVERHEAD
            + self.body_len
            + self.added_len(partition_key, explicit_hash_key, data_len)
    }

    fn added_len(&self, pk: &str, ehk: Option<&str>, data_len: usize) -> usize {
        let mut size = 0;
        let pk_ix = match self.pk_lookup.get(pk) {
            Some(ix) => *ix,
            None => {
                size += field_len(pk.len());
                self.pk_table.len() as u64
            }
        };
        let mut inner = 1 + encoded_len_varint(pk_ix) + field_len(data_len);
        if let Some(ehk) = ehk {
            let ehk_ix = match self.ehk_lookup.get(ehk) {
                Some(ix) => *ix,
                None => {
                    size += field_len(ehk.len());
                    self.ehk_table.len() as u64
                }
            };
            inner += 1 + encoded_len_varint(ehk_ix);
        }
        size + field_len(inner)
    }

    /// Adds a user record.
    pub fn add(&mut self, partition_key: &str, explicit_hash_key: Option<&str>, data: Bytes) {
        self.body_len += self.added_len(partition_key, explicit_hash_key, data.len());
        let pk_ix = match self.pk_lookup.get(partition_key) {
            Some(ix) => *ix,
            None => {
                let ix = self.pk_table.len() as u64;
                self.pk_table.push(partition_key.to_owned());
                self.pk_lookup.insert(partition_key.to_owned(), ix);
                ix
            }
        };
        let ehk_ix = explicit_hash_key.map(|ehk| match self.ehk_lookup.get(ehk) {
            Some(ix) => *ix,
            None => {
                let ix = self.ehk_table.len() as u64;
                self.ehk_table.push(ehk.to_owned());
                self.ehk_lookup.insert(ehk.to_owned(), ix);
                ix
            }
        });
        self.records.push(pb::Record {
            partition_key_index: pk_ix,
            explicit_hash_key_index: ehk_ix,
            data,
            tags: Vec::new(),
        });
    }

    /// Encodes magic + protobuf body + MD5 trailer.
    pub fn finish(self) -> Bytes {
        let msg = pb::AggregatedRecord {
            partition_key_table: self.pk_table,
            explicit_hash_key_table: self.ehk_table,
            records: self.records,
        };
        debug_assert_eq!(
            msg.encoded_len(),
            self.body_len,
            "size tracking matches prost"
        );
        encode_message(msg)
    }
}

/// Magic + `msg` + the MD5 of `msg`: one aggregated record.
pub fn encode_message(msg: pb::AggregatedRecord) -> Bytes {
    let body_len = msg.encoded_len();
    let mut out = BytesMut::with_capacity(AGGREGATE_OVERHEAD + body_len);
    out.put_slice(&KPL_MAGIC);
    msg.encode(&mut out).expect("capacity reserved");
    let digest = Md5::digest(&out[KPL_MAGIC.len()..]);
    out.put_slice(digest.as_slice());
    out.freeze()
}

/// Encodes user records `(partition key, explicit hash key, data)` as one aggregated record.
pub fn encode_aggregated<'a>(
    records: impl IntoIterator<Item = (&'a str, Option<&'a str>, &'a [u8])>,
) -> Bytes {
    let mut b = AggregateBuilder::new();
    for (pk, ehk, data) in records {
        b.add(pk, ehk, Bytes::copy_from_slice(data));
    }
    b.finish()
}
