#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

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
