//! Implementations of the [`crate::ports`]: DynamoDB, in memory, and fault-injecting wrappers.

pub mod archive;
mod dedup_table;
pub mod dynamodb;
pub mod fault;
pub mod memory;
