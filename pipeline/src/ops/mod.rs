//! Operator logic behind `meterctl` (docs/meterctl.md): the billing ledger, the status of a
//! group-hour with what happens next, re-drive decisions and verification. The modules here
//! are pure except [`read`] (the stores) and [`redrive`]'s conditional writes.
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

pub mod ledger;
pub mod read;
pub mod redrive;
pub mod render;
pub mod sources;
pub mod status;
pub mod subscription;
pub mod trail;
pub mod verify;
