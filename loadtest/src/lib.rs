#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod capacity;
pub mod cli;
pub mod conservation;
pub mod cost;
pub mod faults;
pub mod ledger_check;
pub mod loadrun;
pub mod metrics_capture;
pub mod produce;
pub mod report;
pub mod workload;
