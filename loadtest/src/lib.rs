//! awsmp-loadtest: the local AWS stack (`awsmp-local`), the Marketplace Metering simulator
//! (`marketplace-sim`) and the end-to-end load test.

pub mod kinesis_esm;
pub mod local;
pub mod runner;
pub mod sim;
pub mod conservation;
pub mod workload;
pub mod report;
pub mod faults;
pub mod produce;
pub mod metrics_capture;
