//! Adapters: over `aws-sdk-*` (each holds a client and a resource name, nothing else), and
//! in memory ([`memory`]) for tests and simulation without emulators.

pub mod dynamodb;
pub mod marketplace;
pub mod memory;
pub mod pages;
pub mod sqs;
