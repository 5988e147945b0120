//! What goes on the stream: the v1 JSON event payload ([`encode_event`], [`decode_event`]) and the
//! KPL aggregated-record format ([`AggregateBuilder`], [`deaggregate`]). Pure, no I/O: the
//! consumer uses this module to read what any producer wrote.

mod json;
mod kpl;

pub use crate::error::DecodeError;
pub use json::{PAYLOAD_VERSION, decode_event, encode_event, format_timestamp};
pub use kpl::{
    AGGREGATE_OVERHEAD, AggregateBuilder, KPL_MAGIC, MD5_LEN, UserRecord, deaggregate,
    decode_aggregated, encode_aggregated, is_aggregated, pb,
};
