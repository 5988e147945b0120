//! The sparse `metering_pending` index, shared by the usage and aggregated-usage tables.

use super::errors::ddb_err;
use crate::error::Result;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::dynamodb::s;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::HourBucket;
use std::collections::HashMap;

/// Every item of `table`'s sparse `metering_pending` index in `bucket` (paginated), optionally
/// only one license's (the index sort key).
pub(super) async fn query_pending_index(
    client: &Client,
    table: &str,
    bucket: HourBucket,
    license: Option<&str>,
) -> Result<Vec<HashMap<String, Av>>> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let mut q = client
            .query()
            .table_name(table)
            .index_name(a::METERING_PENDING_INDEX)
            .expression_attribute_values(":hb", s(bucket.to_string()))
            .set_exclusive_start_key(start);
        q = match license {
            Some(l) => q
                .key_condition_expression("meteringPending = :hb AND licenseArn = :la")
                .expression_attribute_values(":la", s(l)),
            None => q.key_condition_expression("meteringPending = :hb"),
        };
        let page = q.send().await.map_err(|e| ddb_err("Query", table, e))?;
        out.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(out);
        }
    }
}
