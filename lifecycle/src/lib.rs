#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod adapters;
pub mod aws;
pub mod config;
pub mod domain;
pub mod error;
pub mod handlers;
pub mod page;
pub mod ports;

pub use error::{LifecycleError, Result};
