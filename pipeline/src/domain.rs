//! Pure metering domain: folds, validation, batching, bisection.
//!
//! Nothing in here talks to AWS, reads the environment or the wall clock: rows arrive as
//! [`row::AttrValue`] maps (the adapter converts from the SDK's `AttributeValue`), time comes
//! from an injected [`awsmp_contract::clock::Clock`], and every decision is a plain function or a
//! small state machine that the async handlers drive. What the domain shares with the consumer
//! and the lifecycle functions (keys, time rules, attributes, statuses, reason codes, metrics,
//! AWS limits) is the contract crate's, [`awsmp_contract`].
//!
//! | module | what it owns |
//! |---|---|
//! | [`row`] | the AWS-free raw row model and exact DynamoDB number parsing |
//! | [`fold`] | the streamed group fold with the client-side guardrails and VMT merge |
//! | [`batch`] | planning `BatchMeterUsage` calls (≤25 records, ≤1 MB, one product, CA/legacy apart) |
//! | [`bisect`] | isolating request-level errors by bisection |
//! | [`results`] | mapping `BatchMeterUsage` results back to per-record write-back decisions |

pub mod batch;
pub mod bisect;
pub mod fold;
pub mod results;
