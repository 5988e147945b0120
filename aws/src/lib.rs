#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod deprovisioning;
pub mod dynamodb;
pub mod emf;
pub mod error;
pub mod lambda_init;
pub mod mutants;
pub mod retry;
pub mod sdk;
pub mod watermark;

pub use retry::retry;
