//! Implementations of the [`crate::ports`]: DynamoDB and Kinesis, and their in-memory twins (the
//! dedup store is the consumer's: `awsmp_consumer::adapters`).

pub mod dynamodb;
pub mod memory;
