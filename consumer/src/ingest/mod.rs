//! meter-ingest: the trust boundary for untrusted modules (docs/meter-ingest.md). A module
//! async-invokes its own alias of the `meter-ingest` function; the alias is its identity.
//!
//! - [`identity`]: the qualified invoked ARN, the environment's account allowlist.
//! - [`mapping`]: invoked ARN → licenses, dimensions, rate limit and anomaly bound.
//! - [`payload`]: the module's event batch, parsed strictly.
//! - [`check`]: attribution, timestamp authority, bounds, dedup keys, the stream record (pure).
//! - [`ports`]: mapping, rate counters, usage stream, held events (the dedup store is the
//!   consumer's [`crate::ports::DedupStore`]).
//! - [`service`]: the handler, [`MeterIngest`]; [`report`]: its JSON result and metrics.
//! - [`config`]: its environment variables.

pub mod check;
pub mod config;
pub mod identity;
pub mod mapping;
pub mod payload;
pub mod ports;
pub mod report;
pub mod service;

pub use config::IngestConfig;
pub use report::{EventResult, IngestReport, Outcome};
pub use service::{IngestSettings, Invocation, MeterIngest};
