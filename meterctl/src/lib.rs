//! `meterctl`, the operator's CLI (docs/meterctl.md), and the logic behind it: the billing
//! ledger, the status of a group-hour with what happens next, re-drive decisions and
//! verification. It reads the pipeline's stores through `awsmp-pipeline`; no Lambda links it
//! (the CloudTrail client and the CLI parser live here only). The modules are pure except
//! [`read`] (the stores), [`redrive`]'s conditional writes and [`cloudtrail`] (the audit
//! trail's adapter).
//!
//! | module | what it owns |
//! |---|---|
//! | [`trail`] | what AWS accepted (CloudTrail records) and the [`trail::MeteringTrail`] port |
//! | [`sources`] | the per-group-hour summaries the ledger reads |
//! | [`ledger`] | the ledger lines, differences, reasons, totals and exit status |
//! | [`status`] | one group-hour's state and what happens next |
//! | [`subscription`] | the license's subscription: active, flushing, closed or finalized |
//! | [`redrive`] | whether a group-hour may be re-driven, and the conditional resets |
//! | [`verify`] | stored values against their recomputation |
//! | [`read`] | the DynamoDB reads behind all of them |
//! | [`render`] | the tables for people |
//! | [`cloudtrail`] | the [`trail::MeteringTrail`] adapter over CloudTrail's `LookupEvents`, and its memory twin |

#![warn(missing_docs)]

pub mod cloudtrail;
pub mod error;
pub mod ledger;
pub mod read;
pub mod redrive;
pub mod render;
pub mod sources;
pub mod status;
pub mod subscription;
pub mod trail;
pub mod verify;

pub use error::{MeterctlError, Result};

#[cfg(test)]
mod ledger_examples;
