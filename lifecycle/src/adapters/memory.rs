//! In-memory twins of the ports, for handler tests and the simulation; they apply the pure
//! transitions of [`crate::domain::state`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::event::{Change, LicenseKey};
use crate::domain::registration::{Registration, ResolvedCustomer};
use crate::domain::state::{self, Outcome, Subscriber};
use crate::error::Result;
use crate::ports::{
    CustomerProfileStore, CustomerResolver, DeadLetters, ResolveError, SubscriberStore,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The subscribers table in memory.
#[derive(Debug, Clone, Default)]
pub struct MemorySubscriberStore {
    rows: Arc<Mutex<BTreeMap<LicenseKey, Subscriber>>>,
}

impl MemorySubscriberStore {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
    /// Every row, in key order.
    pub fn rows(&self) -> Vec<Subscriber> {
        lock(&self.rows).values().cloned().collect()
    }
}

#[async_trait]
impl SubscriberStore for MemorySubscriberStore {
    async fn apply(&self, key: &LicenseKey, change: &Change, at: DateTime<Utc>) -> Result<Outcome> {
        let mut rows = lock(&self.rows);
        let (row, outcome) = state::apply(rows.get(key).cloned(), key, change, at);
        if let Some(row) = row {
            rows.insert(key.clone(), row);
        }
        Ok(outcome)
    }

    async fn licenses_of_agreement(&self, agreement_id: &str) -> Result<Vec<LicenseKey>> {
        Ok(lock(&self.rows)
            .values()
            .filter(|r| r.agreement_id.as_deref() == Some(agreement_id))
            .map(|r| r.key.clone())
            .collect())
    }

    async fn get(&self, key: &LicenseKey) -> Result<Option<Subscriber>> {
        Ok(lock(&self.rows).get(key).cloned())
    }

    async fn expired_deprovisioning(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<(LicenseKey, DateTime<Utc>)>> {
        let mut out: Vec<_> = lock(&self.rows)
            .values()
            .filter_map(|r| {
                r.deprovisioning_expiry
                    .filter(|e| *e <= now)
                    .map(|e| (r.key.clone(), e))
            })
            .collect();
        out.sort_by_key(|(_, e)| *e);
        Ok(out)
    }

    async fn finalize(&self, key: &LicenseKey, now: DateTime<Utc>) -> Result<bool> {
        Ok(lock(&self.rows)
            .get_mut(key)
            .is_some_and(|r| state::finalize(r, now)))
    }

    async fn record_registration(
        &self,
        key: &LicenseKey,
        product_code: &str,
        region: &str,
        _now: DateTime<Utc>,
    ) -> Result<()> {
        let mut rows = lock(&self.rows);
        let row = state::registered(rows.get(key).cloned(), key, product_code, region);
        rows.insert(key.clone(), row);
        Ok(())
    }
}

/// The pipeline's reader of the sparse deprovisioning index over the same rows: every license
/// whose flag is set (its flush window open or not yet finalized), as
/// `awsmp_aws::deprovisioning::DynamoDbDeprovisioningIndex` reads the table.
#[async_trait]
impl awsmp_aws::deprovisioning::DeprovisioningIndex for MemorySubscriberStore {
    async fn active(
        &self,
    ) -> awsmp_aws::error::Result<Vec<awsmp_aws::deprovisioning::Deprovisioning>> {
        Ok(lock(&self.rows)
            .values()
            .filter_map(|r| {
                r.deprovisioning_expiry
                    .map(|expiry| awsmp_aws::deprovisioning::Deprovisioning {
                        license_arn: r.key.license_arn.clone(),
                        customer_aws_account_id: r.key.customer_aws_account_id.clone(),
                        expiry,
                    })
            })
            .collect())
    }
}

/// A stored profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProfile {
    /// The product.
    pub product_code: String,
    /// Where the buyer registered.
    pub region: String,
    /// The allowlisted fields.
    pub fields: BTreeMap<String, String>,
}

/// The customer-profile table in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryProfileStore {
    rows: Arc<Mutex<HashMap<LicenseKey, StoredProfile>>>,
}

impl MemoryProfileStore {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
    /// One profile.
    pub fn get(&self, key: &LicenseKey) -> Option<StoredProfile> {
        lock(&self.rows).get(key).cloned()
    }
}

#[async_trait]
impl CustomerProfileStore for MemoryProfileStore {
    async fn put(
        &self,
        customer: &ResolvedCustomer,
        registration: &Registration,
        region: &str,
        _now: DateTime<Utc>,
    ) -> Result<()> {
        lock(&self.rows).insert(
            customer.key.clone(),
            StoredProfile {
                product_code: customer.product_code.clone(),
                region: region.to_owned(),
                fields: registration.fields.clone(),
            },
        );
        Ok(())
    }
}

/// What a memory token resolves to.
#[derive(Debug, Clone)]
pub enum TokenOutcome {
    /// A customer.
    Resolves(ResolvedCustomer),
    /// `ExpiredTokenException`.
    Expired,
    /// Any other failure.
    Fails,
}

/// `ResolveCustomer` in memory: unknown tokens are invalid.
#[derive(Debug, Clone, Default)]
pub struct MemoryResolver {
    tokens: Arc<Mutex<HashMap<String, TokenOutcome>>>,
}

impl MemoryResolver {
    /// No tokens.
    pub fn new() -> Self {
        Self::default()
    }
    /// Make `token` resolve to `outcome`.
    pub fn insert(&self, token: &str, outcome: TokenOutcome) {
        lock(&self.tokens).insert(token.to_owned(), outcome);
    }
}

#[async_trait]
impl CustomerResolver for MemoryResolver {
    async fn resolve(&self, token: &str) -> Result<ResolvedCustomer, ResolveError> {
        match lock(&self.tokens).get(token) {
            Some(TokenOutcome::Resolves(c)) => Ok(c.clone()),
            Some(TokenOutcome::Expired) => Err(ResolveError::Expired),
            Some(TokenOutcome::Fails) => Err(ResolveError::Failed("injected failure".into())),
            None => Err(ResolveError::Invalid),
        }
    }
}

/// A dead-letter queue in memory: (body, reason) pairs.
#[derive(Debug, Clone, Default)]
pub struct MemoryDeadLetters {
    sent: Arc<Mutex<Vec<(String, String)>>>,
}

impl MemoryDeadLetters {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
    /// What was sent, with reasons.
    pub fn sent(&self) -> Vec<(String, String)> {
        lock(&self.sent).clone()
    }
}

#[async_trait]
impl DeadLetters for MemoryDeadLetters {
    async fn send(&self, body: &str, reason: &str, _detail: &str) -> Result<()> {
        lock(&self.sent).push((body.to_owned(), reason.to_owned()));
        Ok(())
    }
}
