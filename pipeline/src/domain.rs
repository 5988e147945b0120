//! Pure metering domain: keys, time rules, folds, validation, batching, bisection.
//!
//! Nothing in here talks to AWS, reads the environment or the wall clock: rows arrive as
//! [`row::AttrValue`] maps (the adapter converts from the SDK's `AttributeValue`), time comes
//! from an injected [`clock::Clock`], and every decision is a plain function or a small state
//! machine that the async handlers drive. The names and limits the domain shares with the
//! consumer (attributes, statuses, reason codes, metrics, AWS limits) are in [`crate::contract`].
//!
//! | module | what it owns |
//! |---|---|
//! | [`clock`] | the [`clock::Clock`] port, a system clock and a settable test clock |
//! | [`keys`] | [`keys::HourBucket`], whole-second timestamps, sort keys, [`keys::GroupKey`] (the work message) |
//! | [`row`] | the AWS-free raw row model and exact DynamoDB number parsing |
//! | [`time`] | [`time::TimeConfig`], lock / window / month-boundary rules, age-out shards, expiry and flush windows |
//! | [`fold`] | the streamed group fold with the client-side guardrails and VMT merge |
//! | [`batch`] | planning `BatchMeterUsage` calls (≤25 records, ≤1 MB, one product, CA/legacy apart) |
//! | [`bisect`] | isolating request-level errors by bisection |
//! | [`results`] | mapping `BatchMeterUsage` results back to per-record write-back decisions |

pub mod batch;
pub mod bisect;
pub mod clock;
pub mod error;
pub mod fold;
pub mod keys;
pub mod results;
pub mod row;
pub mod time;

pub use error::DomainError;
