#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod causes;
pub mod crash_point;
pub mod ingest;
pub mod invariants;
pub mod lifecycle;
pub mod lock_edge;
pub mod names;
pub mod nested;
pub mod poison;
pub mod race;
pub mod redrive;
pub mod scale;
pub mod schedule;
pub mod stages;
pub mod steps;
pub mod sweep;
pub mod trace;
pub mod world;

// The test kit's models and fault plan, under the names the simulation's modules use.
pub use awsmp_testkit::{destination, esm, faults, ports, queue, stream};

pub use schedule::{ScheduleReport, run, run_setup, setup_for};
pub use sweep::{Sweep, first_failure, sweep};
pub use world::Setup;
pub mod cli;
pub mod mutant;
