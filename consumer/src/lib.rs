#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod adapters;
pub mod archive;
pub mod config;
pub mod domain;
pub mod error;
pub mod handler;
pub mod heartbeat;
pub mod mutants;
pub mod ports;

pub use config::Config;
pub use error::{ConsumerError, Result};
pub use handler::{BatchReport, Consumer, PhaseTimes, Settings};
