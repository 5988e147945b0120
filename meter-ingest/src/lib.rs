#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod adapters;
pub mod check;
pub mod config;
pub mod error;
pub mod identity;
pub mod mapping;
pub mod mutants;
pub mod payload;
pub mod ports;
pub mod report;
pub mod service;

pub use config::IngestConfig;
pub use error::{IngestError, Result};
pub use report::{EventResult, IngestReport, Outcome};
pub use service::{IngestSettings, Invocation, MeterIngest};
