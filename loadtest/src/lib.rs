//! awsmp-loadtest: the local AWS stack (`awsmp-local`), the Marketplace Metering simulator
//! (`marketplace-sim`) and the end-to-end load test.

pub mod cli;
pub mod conservation;
pub mod faults;
pub mod kinesis_esm;
pub mod loadrun;
pub mod local;
pub mod metrics_capture;
pub mod produce;
pub mod report;
pub mod runner;
pub mod sim;
pub mod workload;
