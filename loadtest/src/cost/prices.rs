//! Public on-demand prices in US East (N. Virginia), US dollars, read from the AWS pricing pages
//! on 2026-12-01. Free tiers are left out: the cost of a million events is what a seller pays
//! once past them.

/// Kinesis Data Streams, provisioned mode: per shard-hour
/// (<https://aws.amazon.com/kinesis/data-streams/pricing/>, 2026-12-01).
pub const KINESIS_SHARD_HOUR: f64 = 0.015;
/// Kinesis Data Streams, provisioned mode: per million PUT payload units of 25 KB (same page).
pub const KINESIS_PER_MILLION_PUT_PAYLOAD_UNITS: f64 = 0.014;
/// Kinesis Data Streams, on-demand mode: per stream-hour (same page).
pub const KINESIS_ON_DEMAND_STREAM_HOUR: f64 = 0.04;
/// Kinesis Data Streams, on-demand mode: per GB ingested, each record rounded up to 1 KB
/// (same page).
pub const KINESIS_ON_DEMAND_PER_GB_IN: f64 = 0.08;
/// Kinesis Data Streams, on-demand mode: per GB retrieved (same page).
pub const KINESIS_ON_DEMAND_PER_GB_OUT: f64 = 0.04;
/// AWS Lambda: per million requests (<https://aws.amazon.com/lambda/pricing/>, 2026-12-01).
pub const LAMBDA_PER_MILLION_REQUESTS: f64 = 0.20;
/// AWS Lambda, Arm (the architecture of every function in `infra/*.yaml`): per GB-second,
/// first pricing tier (same page).
pub const LAMBDA_ARM_PER_GB_SECOND: f64 = 0.000_013_333_4;
/// DynamoDB on-demand: per million write request units
/// (<https://aws.amazon.com/dynamodb/pricing/on-demand/>, 2026-12-01).
pub const DYNAMODB_PER_MILLION_WRITE_UNITS: f64 = 0.625;
/// DynamoDB on-demand: per million read request units (same page).
pub const DYNAMODB_PER_MILLION_READ_UNITS: f64 = 0.125;
/// SQS standard queues: per million requests, each 64 KB chunk of a payload one request
/// (<https://aws.amazon.com/sqs/pricing/>, 2026-12-01).
pub const SQS_PER_MILLION_REQUESTS: f64 = 0.40;
/// AWS Marketplace Metering Service: `BatchMeterUsage` calls carry no AWS charge (the listing
/// fee is a share of what the buyer pays, not a per-call price;
/// <https://docs.aws.amazon.com/marketplace/latest/userguide/listing-fees.html>).
pub const BATCH_METER_USAGE_PER_CALL: f64 = 0.0;
