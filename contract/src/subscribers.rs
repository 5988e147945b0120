//! Attribute and index names of the subscribers table (events stack) and the customer-profile
//! table (main stack), and the values their status attributes take (docs/lifecycle.md). The
//! lifecycle Lambdas write them; the pipeline reads the deprovisioning markers (its
//! `DynamoDbDeprovisioningIndex`), so both import them from here.
//!
//! Both tables are keyed by [`super::attrs::LICENSE_ARN`] + [`super::attrs::CUSTOMER_AWS_ACCOUNT_ID`].

/// The product the license is for.
pub const PRODUCT_CODE: &str = "productCode";
/// The agreement of the license's latest `License Updated` event.
pub const AGREEMENT_ID: &str = "agreementId";
/// The agreement lifecycle: [`ACTIVE`] or [`INACTIVE`].
pub const AGREEMENT_STATUS: &str = "agreementStatus";
/// The license lifecycle: [`ACTIVE`], [`DEPROVISIONING`] or [`INACTIVE`].
pub const SUBSCRIPTION_STATUS: &str = "subscriptionStatus";
/// String set of the regions the buyer registered in (reference only, never a metering gate).
pub const REGISTERED_REGIONS: &str = "registeredRegions";
/// Constant partition of the sparse deprovisioning index, present only in the flush window.
pub const DEPROVISIONING_PENDING_FLAG: &str = "deprovisioningPendingFlag";
/// Sort key of the sparse deprovisioning index: when the flush window closes (the
/// `License Deprovisioned` event time + 1 h), written as [`super::attrs::audit_timestamp`]
/// so that string order is time order.
pub const DEPROVISIONING_EXPIRY: &str = "deprovisioningExpiry";
/// Event time of the `License Updated` that set [`AGREEMENT_ID`] (newest wins).
pub const LICENSE_EVENT_AT: &str = "licenseEventAt";
/// The agreement's status word from `Purchase Agreement Ended` (e.g. `CANCELLED`, `EXPIRED`).
pub const AGREEMENT_END_STATUS: &str = "agreementEndStatus";
/// `Purchase Agreement Amended` metadata: the agreement's start time as AWS sent it.
pub const AGREEMENT_START_TIME: &str = "agreementStartTime";
/// `Purchase Agreement Amended` metadata: the agreement's end time as AWS sent it.
pub const AGREEMENT_END_TIME: &str = "agreementEndTime";
/// Event time of the newest `Purchase Agreement Amended` applied.
pub const AGREEMENT_AMENDED_AT: &str = "agreementAmendedAt";

/// Customer-profile table: the allowlisted registration fields, a map of strings.
pub const REGISTRATION_DATA: &str = "registrationData";
/// Customer-profile table: the region the buyer registered in.
pub const REGISTRATION_REGION: &str = "registrationRegion";

/// The sparse index of the licenses in their flush window: partition
/// [`DEPROVISIONING_PENDING_FLAG`] (always [`DEPROVISIONING_PENDING_VALUE`]), sort key
/// [`DEPROVISIONING_EXPIRY`].
pub const DEPROVISIONING_INDEX: &str = "deprovisioning-pending-index";
/// The one value of [`DEPROVISIONING_PENDING_FLAG`] (a constant flag: the index's one partition).
pub const DEPROVISIONING_PENDING_VALUE: &str = "1";

/// The subscribers table's index by buyer account.
pub const CUSTOMER_ACCOUNT_INDEX: &str = "customerAWSAccountId-index";
/// The subscribers table's index by agreement (agreement events carry no license ARN).
pub const AGREEMENT_INDEX: &str = "agreementId-index";

/// Status value: active (both lifecycles).
pub const ACTIVE: &str = "active";
/// Status value: in the ~1 h flush window after `License Deprovisioned` (license lifecycle).
pub const DEPROVISIONING: &str = "deprovisioning";
/// Status value: ended (both lifecycles; the license's is final).
pub const INACTIVE: &str = "inactive";
