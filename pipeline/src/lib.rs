//! awsmp-pipeline: discover, aggregate, clean up, submit and expire metered usage.
//!
//! Layout (SPEC §3): [`domain`] is pure logic that knows nothing of AWS; everything that
//! talks to AWS sits behind small port traits with adapters over `aws-sdk-*`.

pub mod aws;
pub mod domain;
pub mod ids;
pub mod metering_client;
