//! The subscribers table's deprovisioning index: the lifecycle functions write it
//! (`License Deprovisioned`) and read it (deprovision-cleanup), the discoverer's flush reads it;
//! the port and its DynamoDB adapter live here, once.

use crate::dynamodb::{malformed, query_all, s};
use crate::error::Result;
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use awsmp_contract::attrs as a;
use awsmp_contract::subscribers::{DEPROVISIONING_INDEX, DEPROVISIONING_PENDING_VALUE};
use chrono::{DateTime, Utc};

/// A license in its deprovisioning flush window (the subscribers table's sparse index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deprovisioning {
    /// License ARN.
    pub license_arn: String,
    /// Buyer account.
    pub customer_aws_account_id: String,
    /// When AWS stops accepting usage for it.
    pub expiry: DateTime<Utc>,
}

/// The subscribers table's `deprovisioning-pending-index`.
#[async_trait]
pub trait DeprovisioningIndex: Send + Sync {
    /// Every license currently in its flush window.
    async fn active(&self) -> Result<Vec<Deprovisioning>>;
}

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
            .expression_attribute_values(":f", s(DEPROVISIONING_PENDING_VALUE));
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
