//! The Marketplace Metering adapter: `BatchMeterUsage` over `aws-sdk-marketplacemetering`,
//! through [`crate::metering_client`] so Concurrent-Agreements records never carry the empty
//! `CustomerIdentifier` the SDK would otherwise send.

use crate::domain::batch::{CallKind, SubmitRecord};
use crate::domain::results::{ApiResponse, ApiResult, ApiStatus};
use crate::ports::{MeterCallError, MeteringApi};
use async_trait::async_trait;
use aws_sdk_marketplacemetering::Client;
use aws_sdk_marketplacemetering::config::retry::RetryConfig;
use aws_sdk_marketplacemetering::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_marketplacemetering::operation::batch_meter_usage::BatchMeterUsageError;
use aws_sdk_marketplacemetering::primitives::DateTime as SmithyTime;
use aws_sdk_marketplacemetering::types::{Tag, UsageAllocation, UsageRecord, UsageRecordResult};
use awsmp_contract::keys::Identity;

/// `BatchMeterUsage` over the SDK.
#[derive(Debug, Clone)]
pub struct MarketplaceMeteringApi {
    client: Client,
}

impl MarketplaceMeteringApi {
    /// Over a client built by [`crate::metering_client::metering_client`], with the SDK's own
    /// retries turned off: the submitter owns retrying (pacing at the quota, full-jitter
    /// backoff, replay recognition, its time budget), and SDK retries underneath would hide
    /// throttling from it and stack a second backoff on top of its own.
    pub fn new(client: Client) -> Self {
        let conf = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        Self {
            client: Client::from_conf(conf),
        }
    }
}

fn quantity_i32(q: u64) -> i32 {
    // The fold caps quantities at i32::MAX (the API's Integer), so this never saturates.
    i32::try_from(q).unwrap_or(i32::MAX)
}

/// The SDK usage record for `r`.
pub fn usage_record(
    r: &SubmitRecord,
) -> Result<UsageRecord, aws_sdk_marketplacemetering::error::BuildError> {
    let mut b = UsageRecord::builder()
        .timestamp(SmithyTime::from_secs(r.group.hour.start().timestamp()))
        .dimension(&r.group.dimension)
        .quantity(quantity_i32(r.quantity));
    b = match r.group.identity() {
        Identity::ConcurrentAgreements {
            license_arn,
            customer_aws_account_id,
        } => b
            .license_arn(license_arn)
            .customer_aws_account_id(customer_aws_account_id),
        Identity::Legacy {
            customer_identifier,
            ..
        } => b.customer_identifier(customer_identifier),
    };
    for a in r.allocations.iter().flatten() {
        let mut ua = UsageAllocation::builder().allocated_usage_quantity(quantity_i32(a.quantity));
        for t in &a.tags {
            ua = ua.tags(Tag::builder().key(&t.key).value(&t.value).build()?);
        }
        b = b.usage_allocations(ua.build()?);
    }
    b.build()
}

/// Identity of an echoed record, to match results back to the call's records.
fn echo_key(u: &UsageRecord) -> (String, String, String, i64) {
    (
        u.license_arn().unwrap_or_default().to_owned(),
        u.customer_aws_account_id()
            .map(str::to_owned)
            .unwrap_or_else(|| u.customer_identifier().to_owned()),
        u.dimension().to_owned(),
        u.timestamp().secs(),
    )
}

fn record_key(r: &SubmitRecord) -> (String, String, String, i64) {
    let (license, customer) = match r.group.identity() {
        Identity::ConcurrentAgreements {
            license_arn,
            customer_aws_account_id,
        } => (license_arn.to_owned(), customer_aws_account_id.to_owned()),
        Identity::Legacy {
            customer_identifier,
            ..
        } => (String::new(), customer_identifier.to_owned()),
    };
    (
        license,
        customer,
        r.group.dimension.clone(),
        r.group.hour.start().timestamp(),
    )
}

/// Match a response's results and unprocessed records to the call's records by identity.
/// A result that matches no record is ignored (and logged); a record with no result and not
/// unprocessed is left unmatched — the caller keeps it pending.
pub fn match_response(
    records: &[SubmitRecord],
    results: &[UsageRecordResult],
    unprocessed: &[UsageRecord],
) -> ApiResponse {
    let index: std::collections::HashMap<_, _> =
        records.iter().map(|r| (record_key(r), r)).collect();
    let mut out = ApiResponse::default();
    for res in results {
        match res.usage_record().and_then(|u| index.get(&echo_key(u))) {
            Some(r) => out.results.push(ApiResult {
                group: r.group.clone(),
                status: ApiStatus::parse(res.status().map(|s| s.as_str()).unwrap_or_default()),
                metering_record_id: res.metering_record_id().map(str::to_owned),
            }),
            None => tracing::warn!(?res, "BatchMeterUsage result matches no submitted record"),
        }
    }
    for u in unprocessed {
        if let Some(r) = index.get(&echo_key(u)) {
            out.unprocessed.push(r.group.clone());
        }
    }
    out
}

/// A failed call: an exception AWS answered with (named, the SDK error kept as its source), or
/// no answer at all.
fn call_error<R>(e: SdkError<BatchMeterUsageError, R>) -> MeterCallError
where
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let answered = e.as_service_error().map(|se| {
        (
            se.code().unwrap_or("UnknownException").to_owned(),
            se.message().unwrap_or_default().to_owned(),
        )
    });
    match answered {
        Some((name, message)) => MeterCallError::Exception {
            name,
            message,
            source: Some(Box::new(e)),
        },
        None => MeterCallError::Transport(Box::new(e)),
    }
}

#[async_trait]
impl MeteringApi for MarketplaceMeteringApi {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        let usage: Vec<UsageRecord> = records
            .iter()
            .map(usage_record)
            .collect::<Result<_, _>>()
            .map_err(|e| MeterCallError::Build(Box::new(e)))?;
        let mut req = self
            .client
            .batch_meter_usage()
            .set_usage_records(Some(usage));
        if let CallKind::Legacy { product_code } = kind {
            req = req.product_code(product_code);
        }
        match req.send().await {
            Ok(out) => Ok(match_response(
                records,
                out.results(),
                out.unprocessed_records(),
            )),
            Err(e) => Err(call_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_marketplacemetering::types::UsageRecordResultStatus;
    use awsmp_contract::keys::GroupKey;

    fn rec(dim: &str) -> SubmitRecord {
        SubmitRecord::new(
            GroupKey::new(
                "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
                "111122223333",
                dim,
                "2026-11-30T10".parse().unwrap(),
            ),
            7,
            None,
        )
    }

    #[test]
    fn an_answered_exception_is_named_and_keeps_the_sdk_error() {
        use aws_sdk_marketplacemetering::error::ErrorMetadata;
        use aws_smithy_runtime_api::http::{Response, StatusCode};
        use aws_smithy_types::body::SdkBody;
        let modeled = BatchMeterUsageError::generic(
            ErrorMetadata::builder()
                .code("ThrottlingException")
                .message("slow down")
                .build(),
        );
        let raw = Response::new(StatusCode::try_from(400).unwrap(), SdkBody::empty());
        let e = call_error(SdkError::service_error(modeled, raw));
        let MeterCallError::Exception {
            name,
            message,
            source,
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(
            (name.as_str(), message.as_str()),
            ("ThrottlingException", "slow down")
        );
        assert!(source.is_some());
        assert_eq!(e.exception_name(), Some("ThrottlingException"));

        let timeout = call_error(SdkError::<BatchMeterUsageError, Response>::timeout_error(
            "no answer in 3 s",
        ));
        assert!(matches!(timeout, MeterCallError::Transport(_)));
        assert_eq!(timeout.exception_name(), None);
    }

    #[test]
    fn results_are_matched_by_identity_not_position() {
        let records = [rec("a"), rec("b"), rec("c")];
        let echo = |r: &SubmitRecord| usage_record(r).unwrap();
        let results = [
            UsageRecordResult::builder()
                .usage_record(echo(&records[2]))
                .status(UsageRecordResultStatus::Success)
                .metering_record_id("m3")
                .build(),
            UsageRecordResult::builder()
                .usage_record(echo(&records[0]))
                .status(UsageRecordResultStatus::DuplicateRecord)
                .build(),
        ];
        let out = match_response(&records, &results, &[echo(&records[1])]);
        assert_eq!(
            out.results[0],
            ApiResult {
                group: records[2].group.clone(),
                status: ApiStatus::Success,
                metering_record_id: Some("m3".into())
            }
        );
        assert_eq!(out.results[1].group, records[0].group);
        assert_eq!(out.results[1].status, ApiStatus::DuplicateRecord);
        assert_eq!(out.unprocessed, [records[1].group.clone()]);
    }
}
