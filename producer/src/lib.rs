#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod batch;
pub mod budget;
pub mod collapse;
pub mod config;
mod engine;
pub mod error;
pub mod event;
pub mod limits;
pub mod metrics;
pub mod partition;
mod producer;
pub mod shards;
pub mod sink;
pub mod wire;

pub use config::{ProducerConfig, RetryPolicy};
pub use error::{DecodeError, ProducerError, ValidationError};
pub use event::{Event, Tag, UsageAllocation};
pub use metrics::ProducerStats;
pub use producer::{
    FlushOutcome, Producer, ProducerBuilder, RECORD_OVERHEAD_BYTES, Undelivered,
    UndeliveredCallback, UndeliveredReason,
};
pub use shards::{KinesisShardMapSource, ShardMapSource, StaticShardMapSource};
pub use sink::{
    EntryOutcome, FaultConfig, FaultInjectingRecordSink, KinesisRecordSink, MemoryRecordSink,
    PutEntry, RecordSink, SinkError,
};
