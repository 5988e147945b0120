//! awsmp-pipeline: discover, aggregate, clean up, submit and expire metered usage.
//!
//! Layout (SPEC §3): [`domain`] is pure logic that knows nothing of AWS; [`ports`] are the
//! small capabilities the stages need; [`adapters`] implement them over `aws-sdk-*`.

pub mod adapters;
pub mod aws;
pub mod config;
pub mod domain;
pub mod emf;
pub mod error;
pub mod handlers;
pub mod ids;
pub mod metering_client;
pub mod ports;

pub use error::{PipelineError, Result};
