//! Adapters over `aws-sdk-*`: each holds a client and a resource name, nothing else.

pub mod dynamodb;
pub mod marketplace;
pub mod sqs;
