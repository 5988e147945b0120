//! DynamoDB plumbing the Lambda crates share: one classification of DynamoDB errors
//! (retryable, failed condition) and the conversion between the SDK's `AttributeValue` and the
//! contract's [`AttrValue`] (`awsmp_contract::row`).

use crate::error::StoreError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::condition::Condition;
use awsmp_contract::row::{AttrValue, RawUsageRow};
use awsmp_contract::update::{RenderedUpdate, Update};
use std::collections::HashMap;

/// True when `e` is DynamoDB's `ConditionalCheckFailedException` (an expected outcome of a
/// conditional write, never an error to retry).
pub fn is_conditional_failure<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().and_then(|s| s.code()) == Some("ConditionalCheckFailedException")
}

/// DynamoDB error codes worth a retry of the same call: throttling and 5xx
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html>).
pub const RETRYABLE_CODES: [&str; 7] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "LimitExceededException",
    "TransactionConflictException",
];

/// True when a DynamoDB service error with code `code` may succeed if retried
/// ([`RETRYABLE_CODES`]); the deterministic simulation classifies its injected errors by it.
pub fn is_retryable_code(code: &str) -> bool {
    RETRYABLE_CODES.contains(&code)
}

/// True when a failed DynamoDB call may succeed if retried: throttling, 5xx, transport.
pub fn is_retryable<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    match e {
        SdkError::ServiceError(se) => se.err().code().is_some_and(is_retryable_code),
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        _ => false,
    }
}

/// Convert an SDK attribute value to the domain's.
pub fn to_domain(av: &Av) -> AttrValue {
    match av {
        Av::S(s) => AttrValue::S(s.clone()),
        Av::N(n) => AttrValue::N(n.clone()),
        Av::Bool(b) => AttrValue::Bool(*b),
        Av::Null(_) => AttrValue::Null,
        Av::L(l) => AttrValue::L(l.iter().map(to_domain).collect()),
        Av::M(m) => AttrValue::M(m.iter().map(|(k, v)| (k.clone(), to_domain(v))).collect()),
        _ => AttrValue::Other,
    }
}

/// Convert an SDK attribute value the caller owns to the domain's, moving its strings instead
/// of copying them ([`to_domain`] on an owned value, without an allocation per string).
pub fn into_domain(av: Av) -> AttrValue {
    match av {
        Av::S(s) => AttrValue::S(s),
        Av::N(n) => AttrValue::N(n),
        Av::Bool(b) => AttrValue::Bool(b),
        Av::Null(_) => AttrValue::Null,
        Av::L(l) => AttrValue::L(l.into_iter().map(into_domain).collect()),
        Av::M(m) => AttrValue::M(m.into_iter().map(|(k, v)| (k, into_domain(v))).collect()),
        _ => AttrValue::Other,
    }
}

/// Convert a domain attribute value to the SDK's. `Other` has no faithful SDK form and
/// becomes NULL; the pipeline never writes it.
pub fn to_sdk(v: &AttrValue) -> Av {
    match v {
        AttrValue::S(s) => Av::S(s.clone()),
        AttrValue::N(n) => Av::N(n.clone()),
        AttrValue::Bool(b) => Av::Bool(*b),
        AttrValue::Null | AttrValue::Other => Av::Null(true),
        AttrValue::L(l) => Av::L(l.iter().map(to_sdk).collect()),
        AttrValue::M(m) => Av::M(m.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()),
    }
}

/// A conditional put's request, given its [`Condition`]: the rendered expression, and the
/// names and values it uses (an in-memory twin evaluates the same `Condition`). An
/// `UpdateItem` takes its condition with its update ([`WithUpdate`]), so the two share one
/// map of names and one of values.
pub trait WithCondition: Sized {
    /// The request with `condition` as its `ConditionExpression`.
    fn with_condition(self, condition: &Condition) -> Self;
}

macro_rules! with_condition {
    ($($builder:ty),*) => {$(
        impl WithCondition for $builder {
            fn with_condition(self, condition: &Condition) -> Self {
                let r = condition.render();
                let mut req = self.condition_expression(r.expression);
                for (token, name) in r.names {
                    req = req.expression_attribute_names(token, name);
                }
                for (token, value) in r.values {
                    req = req.expression_attribute_values(token, to_sdk(&value));
                }
                req
            }
        }
    )*};
}

with_condition!(PutItemFluentBuilder);

/// A conditional `UpdateItem` request, given its [`Update`] and its [`Condition`]: both
/// rendered expressions, and the names and values they use merged into the one map of each
/// the request sends (a token bound to two different values is caught in debug builds, where
/// two separate calls would let the second silently replace the first). An in-memory twin
/// applies the same `Update` where the same `Condition` holds.
pub trait WithUpdate: Sized {
    /// The request with `update` as its `UpdateExpression` and `condition` as its
    /// `ConditionExpression`.
    fn with_update(self, update: &Update, condition: &Condition) -> Self;

    /// The request with `update` as its `UpdateExpression`, unconditional.
    fn with_unconditional_update(self, update: &Update) -> Self;
}

impl WithUpdate for UpdateItemFluentBuilder {
    fn with_update(self, update: &Update, condition: &Condition) -> Self {
        self.rendered(update.render_with(condition))
    }

    fn with_unconditional_update(self, update: &Update) -> Self {
        self.rendered(update.render())
    }
}

trait Rendered {
    fn rendered(self, r: RenderedUpdate) -> Self;
}

impl Rendered for UpdateItemFluentBuilder {
    fn rendered(self, r: RenderedUpdate) -> Self {
        let mut req = self.update_expression(r.expression);
        if let Some(c) = r.condition {
            req = req.condition_expression(c);
        }
        for (token, name) in r.names {
            req = req.expression_attribute_names(token, name);
        }
        for (token, value) in r.values {
            req = req.expression_attribute_values(token, to_sdk(&value));
        }
        req
    }
}

/// A row (SDK item) in domain form.
pub fn row_from_item(item: &HashMap<String, Av>) -> RawUsageRow {
    item.iter()
        .map(|(k, v)| (k.clone(), to_domain(v)))
        .collect()
}

/// An SDK item the caller owns in domain form: [`row_from_item`] without copying a name or a
/// value (what the aggregator's group read does with each page it receives).
pub fn row_from_owned_item(item: HashMap<String, Av>) -> RawUsageRow {
    // Inserted one by one: the names are distinct, so this is `collect` without its buffer and
    // sort.
    let mut row = RawUsageRow::new();
    for (k, v) in item {
        row.insert(k, into_domain(v));
    }
    row
}

/// A string attribute value.
pub fn s(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

/// A number attribute value, from its decimal text.
pub fn n(v: impl ToString) -> Av {
    Av::N(v.to_string())
}

/// A [`StoreError`] of a failed DynamoDB call, the SDK error kept as its source.
pub(crate) fn ddb_err<E, R>(
    operation: &'static str,
    resource: &str,
    e: SdkError<E, R>,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    StoreError::DynamoDb {
        operation,
        resource: resource.to_owned(),
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}

pub(crate) fn malformed(table: &str, detail: impl Into<String>) -> StoreError {
    StoreError::MalformedItem {
        table: table.to_owned(),
        detail: detail.into(),
    }
}

/// Every item `query` finds in `table`, page by page (the SDK's paginator).
pub(crate) async fn query_all(
    query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    table: &str,
) -> Result<Vec<HashMap<String, Av>>, StoreError> {
    query
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| ddb_err("Query", table, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn attribute_values_round_trip() {
        let v = AttrValue::M(BTreeMap::from([
            (
                "a".into(),
                AttrValue::L(vec![
                    AttrValue::N("1".into()),
                    AttrValue::Bool(true),
                    AttrValue::Null,
                ]),
            ),
            ("b".into(), AttrValue::S("x".into())),
        ]));
        assert_eq!(to_domain(&to_sdk(&v)), v);
        assert_eq!(to_domain(&Av::Ss(vec!["a".into()])), AttrValue::Other);
        assert_eq!(into_domain(to_sdk(&v)), v);
        assert_eq!(into_domain(Av::Ss(vec!["a".into()])), AttrValue::Other);
        let item: HashMap<String, Av> = [
            ("k".to_owned(), to_sdk(&v)),
            ("n".to_owned(), Av::N("7".into())),
        ]
        .into();
        assert_eq!(row_from_owned_item(item.clone()), row_from_item(&item));
    }
}
