//! [`CustomerProfileStore`] over the in-region customer-profile table (buyer PII; never in
//! the subscribers table).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::attrs::{CREATED_AT, UPDATED_AT, audit_timestamp};
use awsmp_contract::subscribers as s;
use chrono::{DateTime, Utc};

use super::{ddb_err, key_item, s_val};
use crate::domain::registration::{Registration, ResolvedCustomer};
use crate::error::Result;
use crate::ports::CustomerProfileStore;

/// The customer-profile table.
#[derive(Debug, Clone)]
pub struct DynamoDbProfileStore {
    client: Client,
    table: String,
}

impl DynamoDbProfileStore {
    /// Over the customer-profile `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

#[async_trait]
impl CustomerProfileStore for DynamoDbProfileStore {
    async fn put(
        &self,
        customer: &ResolvedCustomer,
        registration: &Registration,
        region: &str,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let data: HashMap<String, Av> = registration
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), s_val(v.clone())))
            .collect();
        let values = HashMap::from([
            (":pc".to_owned(), s_val(customer.product_code.clone())),
            (":data".to_owned(), Av::M(data)),
            (":region".to_owned(), s_val(region)),
            (":now".to_owned(), s_val(audit_timestamp(now))),
        ]);
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&customer.key)))
            .update_expression(format!(
                "SET {pc} = :pc, {data} = :data, {region} = :region, \
                 {CREATED_AT} = if_not_exists({CREATED_AT}, :now), {UPDATED_AT} = :now",
                pc = s::PRODUCT_CODE,
                data = s::REGISTRATION_DATA,
                region = s::REGISTRATION_REGION,
            ))
            .set_expression_attribute_values(Some(values))
            .send()
            .await
            .map_err(|e| ddb_err("UpdateItem", &self.table, e))?;
        Ok(())
    }
}
