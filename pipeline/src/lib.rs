#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod adapters;
pub mod config;
pub mod domain;
pub mod error;
pub mod handlers;
pub mod metering_client;
pub mod ports;

pub use error::{PipelineError, Result};
