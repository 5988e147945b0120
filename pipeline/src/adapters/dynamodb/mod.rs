//! DynamoDB adapters: the usage table, the aggregated-usage table and the subscribers'
//! deprovisioning index. Each holds only a client and a table name; conversion between the
//! SDK's `AttributeValue` and the domain's `AttrValue` lives here.
//!
//! | module | what it owns |
//! |---|---|
//! | `usage` | [`DynamoDbUsageStore`], the raw usage table |
//! | `aggregated` | [`DynamoDbAggregatedStore`] and the aggregated item conversion |
//! | `deprovisioning` | [`DynamoDbDeprovisioningIndex`] over the subscribers table |
//! | `convert` | SDK `AttributeValue` ↔ [`AttrValue`](crate::domain::row::AttrValue) |
//! | `errors` | DynamoDB error classification ([`is_retryable`], [`is_conditional_failure`]) |
//! | `folded` | cleanup's conditional stamp of a folded row, with the exact late difference |
//! | `watermark` | [`DynamoDbWatermarkStore`], the ingest-watermark table |
//! | `pending` | the paginated query of the sparse `metering_pending` index |

mod aggregated;
mod convert;
mod deprovisioning;
mod errors;
mod folded;
mod pending;
mod usage;
mod watermark;

pub use aggregated::{
    DynamoDbAggregatedStore, aggregated_from_item, aggregated_to_item, is_billed,
};
pub use convert::{
    into_domain, row_from_item, row_from_owned_item, to_domain, to_sdk, usage_row_from_owned_item,
};
pub use deprovisioning::{
    DEPROVISIONING_INDEX, DEPROVISIONING_PENDING_FLAG, DynamoDbDeprovisioningIndex,
};
pub use errors::{is_conditional_failure, is_retryable};
pub use usage::DynamoDbUsageStore;
pub use watermark::{
    DynamoDbWatermarkStore, WATERMARK_APPLIED_THROUGH, WATERMARK_DRAINED, WATERMARK_SHARD_ID,
    WATERMARK_STREAM,
};
