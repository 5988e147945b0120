//! Classifying DynamoDB errors (one classification, used by the consumer too) and building
//! [`PipelineError`]s that keep the SDK error as their source.

use crate::error::PipelineError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// True when `e` is DynamoDB's `ConditionalCheckFailedException` (an expected outcome of a
/// conditional write, never an error to retry).
pub fn is_conditional_failure<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().and_then(|s| s.code()) == Some("ConditionalCheckFailedException")
}

/// True when a failed DynamoDB call may succeed if retried: throttling, 5xx, transport.
pub fn is_retryable<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    match e {
        SdkError::ServiceError(se) => matches!(
            se.err().code(),
            Some(
                "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "InternalServerError"
                    | "ServiceUnavailable"
                    | "LimitExceededException"
                    | "TransactionConflictException"
            )
        ),
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        _ => false,
    }
}

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

/// Every item `query` finds in `table`, page by page (the SDK's paginator).
pub(super) async fn query_all(
    query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    table: &str,
) -> Result<Vec<HashMap<String, AttributeValue>>, PipelineError> {
    query
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| ddb_err("Query", table, e))
}
