//! Building [`PipelineError`]s that keep the SDK error as their source (the classification
//! is `awsmp_aws::dynamodb`'s, one for every crate).

use crate::error::PipelineError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use awsmp_aws::dynamodb::is_retryable;

pub(super) fn ddb_err<E, R>(
    operation: &'static str,
    resource: &str,
    e: SdkError<E, R>,
) -> PipelineError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    PipelineError::DynamoDb {
        operation,
        resource: resource.to_owned(),
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}

pub(super) fn malformed(table: &str, detail: impl Into<String>) -> PipelineError {
    PipelineError::MalformedItem {
        table: table.to_owned(),
        detail: detail.into(),
    }
}
