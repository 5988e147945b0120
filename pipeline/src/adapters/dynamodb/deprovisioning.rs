//! The subscribers table's deprovisioning index.

use super::convert::s;
use super::errors::{malformed, query_all};
use crate::error::Result;
use crate::ports::{Deprovisioning, DeprovisioningIndex};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use awsmp_contract::attrs as a;
use chrono::{DateTime, Utc};

/// Partition value of the sparse `deprovisioning-pending-index` (a constant flag).
pub const DEPROVISIONING_PENDING_FLAG: &str = "1";
/// The sparse index name.
pub const DEPROVISIONING_INDEX: &str = "deprovisioning-pending-index";

/// The subscribers table's deprovisioning index (read-only here).
#[derive(Debug, Clone)]
pub struct DynamoDbDeprovisioningIndex {
    client: Client,
    table: String,
}

impl DynamoDbDeprovisioningIndex {
    /// Over the subscribers `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

#[async_trait]
impl DeprovisioningIndex for DynamoDbDeprovisioningIndex {
    async fn active(&self) -> Result<Vec<Deprovisioning>> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(DEPROVISIONING_INDEX)
            .key_condition_expression("deprovisioningPendingFlag = :f")
            .expression_attribute_values(":f", s(DEPROVISIONING_PENDING_FLAG));
        let items = query_all(query, &self.table).await?;
        items
            .iter()
            .map(|item| {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok());
                let (Some(l), Some(acct), Some(exp)) = (
                    get(a::LICENSE_ARN),
                    get(a::CUSTOMER_AWS_ACCOUNT_ID),
                    get("deprovisioningExpiry"),
                ) else {
                    return Err(malformed(
                        &self.table,
                        "deprovisioning index item without its keys",
                    ));
                };
                let expiry = DateTime::parse_from_rfc3339(exp)
                    .map_err(|_| {
                        malformed(&self.table, format!("bad deprovisioningExpiry {exp:?}"))
                    })?
                    .with_timezone(&Utc);
                Ok(Deprovisioning {
                    license_arn: l.clone(),
                    customer_aws_account_id: acct.clone(),
                    expiry,
                })
            })
            .collect()
    }
}
