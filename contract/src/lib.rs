#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod attrs;
pub mod clock;
pub mod condition;
pub mod error;
pub mod event;
pub mod event_id;
pub mod ids;
pub mod keys;
pub mod limits;
pub mod metrics;
pub mod reasons;
pub mod retry;
pub mod row;
pub mod stages;
pub mod status;
pub mod stream;
pub mod subscribers;
pub mod time;
pub mod update;
pub mod wire;

pub use error::{DecodeError, DomainError, ValidationError};
pub use event::{Event, Tag, UsageAllocation};
