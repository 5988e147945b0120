//! `marketplace-sim`: awsmp's AWS Marketplace Metering Service simulator.
//!
//! It speaks the real `AWSMPMeteringService` awsJson1.1 protocol (`POST /` with
//! `X-Amz-Target: AWSMPMeteringService.BatchMeterUsage` or `.ResolveCustomer`), so the
//! unmodified `aws-sdk-marketplacemetering` client and boto3 reach it by endpoint URL. SigV4
//! signatures are not checked. One instance is one region; all state is in memory.
//!
//! Layout: [`rules`] decodes and checks requests (pure), [`ledger`] bills first writes and
//! records duplicates (pure), [`faults`] holds injected faults and the quota's token bucket,
//! [`engine`] ties them into a [`Simulator`], `server` is the axum layer ([`spawn`]), and
//! [`in_process`] puts the engine behind the pipeline's `MeteringApi` port without a server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), awsmp_loadtest::sim::SimError> {
//! use awsmp_loadtest::sim::{Catalog, SimConfig, spawn_on};
//! let catalog = Catalog::from_json(r#"{"products":[{"productCode":"prod1","dimensions":["requests"]}]}"#)?;
//! let sim = spawn_on("127.0.0.1:0".parse().unwrap(), SimConfig::new(catalog)).await?;
//! println!("endpoint {}", sim.url()); // use as the SDK's endpoint_url
//! sim.shutdown().await?;
//! # Ok(()) }
//! ```

pub mod catalog;
pub mod cloudtrail;
pub mod engine;
pub mod error;
pub mod faults;
pub mod in_process;
pub mod ledger;
pub mod lifecycle;
mod lifecycle_admin;
pub mod rules;
mod server;

pub use catalog::{
    Catalog, CatalogIndex, LegacyCustomer, License, Product, RegistrationToken, SubscriptionStatus,
};
pub use cloudtrail::{CloudTrailLog, TrailSettings};
pub use engine::{Counters, Reply, SimConfig, Simulator};
pub use error::{ApiError, ErrorCode, SimError, error_chain};
pub use faults::{Faults, TokenBucket};
pub use in_process::InProcessMeteringApi;
pub use ledger::{BilledRecord, DuplicateAttempt, Ledger};
pub use server::{SimHandle, spawn, spawn_on};
