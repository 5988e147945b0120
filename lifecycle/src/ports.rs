//! Ports: the capabilities the handlers use. Each has a DynamoDB (or SDK) adapter and a
//! memory twin in [`crate::adapters`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::event::{Change, LicenseKey};
use crate::domain::registration::{Registration, ResolvedCustomer};
use crate::domain::state::{Outcome, Subscriber};
use crate::error::Result;

/// The subscribers table (events stack, us-east-1, PII-free).
#[async_trait]
pub trait SubscriberStore: Send + Sync {
    /// Apply one change of event time `at` to `key`'s row (see [`crate::domain::state::apply`]).
    async fn apply(&self, key: &LicenseKey, change: &Change, at: DateTime<Utc>) -> Result<Outcome>;
    /// Every license of `agreement_id` (its `agreementId-index`), all pages.
    async fn licenses_of_agreement(&self, agreement_id: &str) -> Result<Vec<LicenseKey>>;
    /// One row.
    async fn get(&self, key: &LicenseKey) -> Result<Option<Subscriber>>;
    /// Licenses in the deprovisioning index whose window closed by `now`, with their expiry.
    async fn expired_deprovisioning(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<(LicenseKey, DateTime<Utc>)>>;
    /// Finalize one to `inactive` and remove it from the index, if its flag is still there
    /// and its window closed by `now`. False when another run already did.
    async fn finalize(&self, key: &LicenseKey, now: DateTime<Utc>) -> Result<bool>;
    /// The register Lambda's PII-free upsert: product code (if unset) and `registeredRegions`
    /// ADD `region`.
    async fn record_registration(
        &self,
        key: &LicenseKey,
        product_code: &str,
        region: &str,
        now: DateTime<Utc>,
    ) -> Result<()>;
}

/// The in-region customer-profile table (buyer PII).
#[async_trait]
pub trait CustomerProfileStore: Send + Sync {
    /// Write (replace) the allowlisted registration fields of `customer`.
    async fn put(
        &self,
        customer: &ResolvedCustomer,
        registration: &Registration,
        region: &str,
        now: DateTime<Utc>,
    ) -> Result<()>;
}

/// Why `ResolveCustomer` did not resolve a token.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// `ExpiredTokenException`: the buyer must start again from AWS Marketplace.
    #[error("the registration token has expired")]
    Expired,
    /// `InvalidTokenException`.
    #[error("the registration token is invalid")]
    Invalid,
    /// Any other failure (throttling, AWS-side error, transport); the buyer may retry.
    #[error("ResolveCustomer failed")]
    Failed(#[source] crate::error::SdkError),
}

/// `ResolveCustomer`.
#[async_trait]
pub trait CustomerResolver: Send + Sync {
    /// Resolve a registration token.
    async fn resolve(&self, token: &str) -> Result<ResolvedCustomer, ResolveError>;
}

/// Where malformed events go, with their reason.
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// Send `body` with `reason`.
    async fn send(&self, body: &str, reason: &str, detail: &str) -> Result<()>;
}
