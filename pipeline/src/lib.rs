#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod adapters;
pub mod aws;
pub mod config;
pub mod contract;
pub mod domain;
pub mod emf;
pub mod error;
pub mod handlers;
pub mod ids;
pub mod lambda_init;
pub mod metering_client;
pub mod mutants;
pub mod ports;

pub use error::{PipelineError, Result};
