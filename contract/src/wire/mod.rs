//! What goes on the stream: the v1 JSON event payload ([`encode_event`], [`decode_event`]), the
//! compact binary v2 encoding ([`v2`], written by default), the KPL aggregated-record format
//! ([`AggregateBuilder`], [`AggregateV2Builder`], [`deaggregate`]) and every event of a record
//! whatever wrote it ([`decode_events`]). Pure, no I/O: the consumer uses this module to read
//! what any producer wrote. The format byte by byte: docs/wire-format.md.

mod aggregate_v2;
mod events;
mod json;
mod kpl;
pub mod v2;

pub use crate::error::{DecodeError, V2Error};
pub use aggregate_v2::AggregateV2Builder;
pub use events::{DecodedUser, decode_events};
pub use json::{PAYLOAD_VERSION, decode_event, encode_event, format_timestamp};
pub use kpl::{
    AGGREGATE_OVERHEAD, AggregateBuilder, KPL_MAGIC, MD5_LEN, UserRecord, deaggregate,
    decode_aggregated, encode_aggregated, is_aggregated, pb,
};
pub use v2::{
    decode_payload, encode_single, encode_single_bytes, encode_single_into, single_len,
    single_len_as,
};

/// Which encoding the producer writes (docs/wire-format.md, "Choosing the version").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WireVersion {
    /// v1: one UTF-8 JSON object per event (docs/row-contract.md, "Event payload v1").
    V1,
    /// v2: binary, the group written once per aggregate (the default).
    #[default]
    V2,
}

impl WireVersion {
    /// The self-contained payload of `event` in this version.
    pub fn encode(self, event: &crate::event::Event) -> Vec<u8> {
        match self {
            WireVersion::V1 => encode_event(event),
            WireVersion::V2 => encode_single(event),
        }
    }

    /// [`WireVersion::encode`] as [`bytes::Bytes`], in one buffer; `generated` is the event's
    /// id when the caller just generated it (the bytes are the same as without it).
    pub fn encode_bytes(
        self,
        event: &crate::event::Event,
        generated: Option<crate::event_id::GeneratedId>,
    ) -> bytes::Bytes {
        match self {
            WireVersion::V1 => bytes::Bytes::from(encode_event(event)),
            WireVersion::V2 => encode_single_bytes(event, generated),
        }
    }
}

impl std::str::FromStr for WireVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "1" | "v1" => Ok(Self::V1),
            "2" | "v2" => Ok(Self::V2),
            other => Err(format!("wire version {other:?} is neither 1 nor 2")),
        }
    }
}
