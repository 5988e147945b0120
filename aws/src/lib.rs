#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod emf;
pub mod lambda_init;
pub mod retry;
pub mod sdk;

pub use retry::retry;
