//! DynamoDB adapters: each holds a client and a table name.
//!
//! | module | adapter |
//! |---|---|
//! | `subscribers` | [`DynamoDbSubscriberStore`] over the subscribers table and its three indexes |
//! | `profiles` | [`DynamoDbProfileStore`] over the in-region customer-profile table |

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::dynamodb::is_retryable;
use awsmp_contract::attrs::{CUSTOMER_AWS_ACCOUNT_ID, LICENSE_ARN};

use crate::domain::event::LicenseKey;
use crate::error::LifecycleError;

mod profiles;
mod subscribers;

pub use profiles::DynamoDbProfileStore;
pub use subscribers::DynamoDbSubscriberStore;

fn s_val(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

fn key_item(key: &LicenseKey) -> HashMap<String, Av> {
    HashMap::from([
        (LICENSE_ARN.to_owned(), s_val(key.license_arn.clone())),
        (
            CUSTOMER_AWS_ACCOUNT_ID.to_owned(),
            s_val(key.customer_aws_account_id.clone()),
        ),
    ])
}

fn ddb_err<E, R>(operation: &'static str, table: &str, e: SdkError<E, R>) -> LifecycleError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    LifecycleError::DynamoDb {
        operation,
        table: table.to_owned(),
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}
