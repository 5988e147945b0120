//! DynamoDB adapters: the usage table and the aggregated-usage table (the ingest-watermark
//! table and the deprovisioning index, which other crates share, are `awsmp_aws`'s). Each holds only a client and a table name; conversion between the
//! SDK's `AttributeValue` and the contract's `AttrValue` is `awsmp_aws::dynamodb`'s.
//!
//! | module | what it owns |
//! |---|---|
//! | `usage` | [`DynamoDbUsageStore`], the raw usage table |
//! | `aggregated` | [`DynamoDbAggregatedStore`] and the aggregated item conversion |
//! | `convert` | an SDK item as the aggregator's fold takes it (the plain conversions: `awsmp_aws::dynamodb`) |
//! | `errors` | [`PipelineError`](crate::PipelineError)s of DynamoDB calls (the classification: `awsmp_aws::dynamodb`) |
//! | `folded` | cleanup's conditional stamp of a folded row, with the exact late difference |
//! | `pending` | the paginated query of the sparse `metering_pending` index |

mod aggregated;
mod convert;
mod errors;
mod folded;
mod pending;
mod usage;

pub use aggregated::{
    DynamoDbAggregatedStore, aggregated_from_item, aggregated_to_item, is_billed,
};
pub use convert::usage_row_from_owned_item;
pub use usage::DynamoDbUsageStore;
