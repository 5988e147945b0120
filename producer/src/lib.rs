#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod batch;
pub mod budget;
pub mod config;
mod engine;
pub mod error;
mod event_id;
mod fold;
mod handoff;
mod key_cache;
pub mod metrics;
mod outcome;
pub mod partition;
mod producer;
pub mod shards;
pub mod sink;

#[cfg(test)]
mod test_support;

pub use config::{DEFAULT_RETRY_POLICY, ProducerConfig, RetryPolicy};
// The event and its errors are the contract's (`awsmp-contract`); they are the types of the
// producer's own API, so a seller needs no second dependency to call it.
pub use awsmp_contract::error::{DecodeError, ValidationError};
pub use awsmp_contract::event::{Event, Tag, UsageAllocation};
pub use error::ProducerError;
pub use handoff::RECORD_OVERHEAD_BYTES;
pub use metrics::ProducerStats;
pub use outcome::{FlushOutcome, Undelivered, UndeliveredCallback, UndeliveredReason};
pub use producer::{Meter, Producer, ProducerBuilder};
pub use shards::{KinesisShardMapSource, ShardMapSource, StaticShardMapSource};
pub use sink::{
    EntryOutcome, FaultConfig, FaultInjectingRecordSink, KinesisRecordSink, MemoryRecordSink,
    PutEntry, RecordSink, SinkError,
};
