#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod kinesis_esm;
pub mod local;
pub mod runner;
pub mod testing;
