//! awsmp-producer: ships AWS Marketplace usage events to Amazon Kinesis.
#![warn(missing_docs)]

pub mod error;
pub mod event;
pub mod partition;
pub mod wire;

pub use error::{DecodeError, ProducerError, ValidationError};
pub use event::{Event, Tag, UsageAllocation};
