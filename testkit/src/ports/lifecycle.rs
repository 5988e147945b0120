//! The lifecycle's stores under the simulation's fault plan: the subscribers table as the
//! subscription and deprovision-cleanup Lambdas use it, and the pipeline's read of its
//! deprovisioning index (throttling, lost responses, crashes before and after every call).

use super::{Failed, Faulty, Injected, injected_dynamodb, injected_store};
use crate::faults::Fault;
use async_trait::async_trait;
use awsmp_aws::deprovisioning::{Deprovisioning, DeprovisioningIndex};
use awsmp_lifecycle::adapters::memory::MemorySubscriberStore;
use awsmp_lifecycle::domain::event::{Change, LicenseKey};
use awsmp_lifecycle::domain::state::{Outcome, Subscriber};
use awsmp_lifecycle::error::LifecycleError;
use awsmp_lifecycle::ports::SubscriberStore;
use chrono::{DateTime, Utc};

/// The subscribers table under the fault plan.
pub type FaultySubscribers = Faulty<MemorySubscriberStore>;
/// The pipeline's read of the deprovisioning index, faulty.
pub type FaultyIndex = Faulty<MemorySubscriberStore>;

impl Injected for LifecycleError {
    fn injected(operation: &'static str, failed: Failed) -> Self {
        LifecycleError::DynamoDb {
            operation,
            table: "subscribers".into(),
            source: Box::new(injected_dynamodb(operation, failed)),
            retryable: failed.retryable(),
        }
    }
}

#[async_trait]
impl<T: SubscriberStore + ?Sized> SubscriberStore for Faulty<T> {
    async fn apply(
        &self,
        key: &LicenseKey,
        change: &Change,
        at: DateTime<Utc>,
    ) -> awsmp_lifecycle::error::Result<Outcome> {
        let call = self.inner.apply(key, change, at);
        self.call("subscribers-apply", &key.license_arn, true, call)
            .await
    }

    async fn licenses_of_agreement(
        &self,
        agreement_id: &str,
    ) -> awsmp_lifecycle::error::Result<Vec<LicenseKey>> {
        let call = self.inner.licenses_of_agreement(agreement_id);
        self.call("subscribers-agreement", agreement_id, false, call)
            .await
    }

    async fn get(&self, key: &LicenseKey) -> awsmp_lifecycle::error::Result<Option<Subscriber>> {
        let call = self.inner.get(key);
        self.call("subscribers-get", &key.license_arn, false, call)
            .await
    }

    async fn expired_deprovisioning(
        &self,
        now: DateTime<Utc>,
    ) -> awsmp_lifecycle::error::Result<Vec<(LicenseKey, DateTime<Utc>)>> {
        let call = self.inner.expired_deprovisioning(now);
        self.call("subscribers-expired", "index", false, call).await
    }

    async fn finalize(
        &self,
        key: &LicenseKey,
        now: DateTime<Utc>,
    ) -> awsmp_lifecycle::error::Result<bool> {
        let call = self.inner.finalize(key, now);
        self.call("subscribers-finalize", &key.license_arn, true, call)
            .await
    }

    async fn record_registration(
        &self,
        key: &LicenseKey,
        product_code: &str,
        region: &str,
        now: DateTime<Utc>,
    ) -> awsmp_lifecycle::error::Result<()> {
        let call = self
            .inner
            .record_registration(key, product_code, region, now);
        self.call("subscribers-register", &key.license_arn, true, call)
            .await
    }
}

#[async_trait]
impl<T: DeprovisioningIndex + ?Sized> DeprovisioningIndex for Faulty<T> {
    async fn active(&self) -> awsmp_aws::error::Result<Vec<Deprovisioning>> {
        // A read that only fails (throttled, or the invocation crashes before it): no
        // interleaving here.
        let fault = self
            .ctx
            .faults
            .decide("deprovisioning-index", "index", false);
        match fault {
            Some(Fault::Throttle | Fault::FailBeforeApply | Fault::Crash) => {
                Err(injected_store("Query", Failed::of(fault)))
            }
            _ => self.inner.active().await,
        }
    }
}
