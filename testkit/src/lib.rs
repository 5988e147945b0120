#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod destination;
pub mod esm;
pub mod faults;
pub mod interleave;
pub mod memory;
pub mod ports;
pub mod queue;
pub mod stream;
