//! DynamoDB adapters: the usage table and the aggregated-usage table (the ingest-watermark
//! table and the deprovisioning index, which other crates share, are `awsmp_aws`'s). Each holds only a client and a table name; conversion between the
//! SDK's `AttributeValue` and the contract's `AttrValue` is `awsmp_aws::dynamodb`'s.
//!
//! | module | what it owns |
//! |---|---|
//! | `usage` | [`DynamoDbUsageStore`], the raw usage table, and the conditions and updates of its stamps |
//! | `aggregated` | [`DynamoDbAggregatedStore`], the aggregated item conversion, and the conditions and updates of its writes (which the memory twin evaluates and applies too) |
//! | `convert` | an SDK item as the aggregator's fold takes it (the plain conversions: `awsmp_aws::dynamodb`) |
//! | `errors` | [`PipelineError`](crate::PipelineError)s of DynamoDB calls (the classification: `awsmp_aws::dynamodb`) |
//! | `folded` | cleanup's conditional stamp of a folded row, with the exact late difference (its condition and update) |
//! | `pending` | the paginated query of the sparse `metering_pending` index |

mod aggregated;
mod convert;
mod errors;
mod folded;
mod pending;
mod usage;

pub use aggregated::{
    DynamoDbAggregatedStore, aggregated_attrs, aggregated_from_attrs, aggregated_from_item,
    aggregated_put_attrs, aggregated_to_item, is_billed, mark_attempted_condition,
    mark_attempted_update, put_if_absent_condition, retract_attempt_condition,
    retract_attempt_update, write_back_condition, write_back_update,
};
pub use convert::usage_row_from_owned_item;
pub use folded::{folded_stamp_condition, folded_stamp_update};
pub use usage::{
    DynamoDbUsageStore, expire_condition, expire_update, finalize_row_condition,
    finalize_row_update,
};
