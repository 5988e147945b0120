//! The shared stores (`awsmp_aws`: the ingest-watermark table) under the fault plan, and
//! their error for an injected fault.

use super::{Failed, Faulty, Injected, InjectedFault};
use async_trait::async_trait;
use awsmp_aws::error::StoreError;
use awsmp_aws::watermark::{ShardWatermark, WatermarkStore};
use chrono::{DateTime, Utc};

/// The error a shared store's DynamoDB adapter (`awsmp_aws`) returns for an injected fault of
/// `operation`: the same as [`injected_dynamodb`], in the shared stores' error type.
pub fn injected_store(operation: &'static str, failed: Failed) -> StoreError {
    StoreError::DynamoDb {
        operation,
        resource: "simulated".into(),
        source: Box::new(InjectedFault {
            operation,
            code: failed.code(),
        }),
        retryable: failed.retryable(),
    }
}

impl Injected for StoreError {
    fn injected(operation: &'static str, failed: Failed) -> Self {
        injected_store(operation, failed)
    }
}

#[async_trait]
impl<T: WatermarkStore + ?Sized> WatermarkStore for Faulty<T> {
    async fn advance(
        &self,
        stream: &str,
        shard_id: &str,
        arrival: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let call = self.inner.advance(stream, shard_id, arrival);
        self.call("advance", shard_id, true, call).await
    }

    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<(), StoreError> {
        let call = self.inner.mark_drained(stream, shard_id);
        self.call("mark_drained", shard_id, true, call).await
    }

    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>, StoreError> {
        let call = self.inner.shards(stream);
        self.call("shards", "", false, call).await
    }
}
