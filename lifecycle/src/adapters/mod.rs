//! Adapters: over `aws-sdk-*` (each holds a client and a resource name), and in memory
//! ([`memory`]) for tests and the simulation.

pub mod dynamodb;
pub mod memory;
pub mod resolver;
pub mod sqs;
