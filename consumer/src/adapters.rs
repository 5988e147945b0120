//! Implementations of the [`crate::ports`]: DynamoDB and in memory (the fault wrapper is the test kit's, `awsmp_testkit::ports::Faulty`).

pub mod archive;
mod dedup_table;
pub mod dynamodb;
pub mod memory;
