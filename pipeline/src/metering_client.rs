//! A Marketplace Metering client that sends what AWS expects.
//!
//! `aws-sdk-marketplacemetering` models `UsageRecord.CustomerIdentifier` as a plain `String`,
//! so it always serializes `"CustomerIdentifier": ""` — also for Concurrent-Agreements records
//! that carry only `CustomerAWSAccountId` + `LicenseArn`. AWS documents the two identifiers as
//! mutually exclusive, so such a record is invalid on the wire (docs/metering-api.md,
//! "The SDK's empty CustomerIdentifier"; the awsmp simulator answers it with `ValidationException`).
//! [`metering_client`] installs [`OmitEmptyCustomerIdentifier`], which removes the empty member
//! from each record of a BatchMeterUsage body before the request is signed. A non-empty
//! (legacy) CustomerIdentifier is left alone.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use serde_json::Value;

/// The awsJson1.1 target of the one operation whose body is rewritten.
const BATCH_METER_USAGE_TARGET: &str = "AWSMPMeteringService.BatchMeterUsage";

/// A metering client built from `config` with [`OmitEmptyCustomerIdentifier`] installed.
/// Use this, never `aws_sdk_marketplacemetering::Client::new`, to call BatchMeterUsage.
pub fn metering_client(config: &aws_config::SdkConfig) -> aws_sdk_marketplacemetering::Client {
    let conf = aws_sdk_marketplacemetering::config::Builder::from(config)
        .interceptor(OmitEmptyCustomerIdentifier)
        .build();
    aws_sdk_marketplacemetering::Client::from_conf(conf)
}

/// Request interceptor: drops `"CustomerIdentifier": ""` from BatchMeterUsage records (see the
/// module docs for why) and fixes `Content-Length`. Runs before signing, so the signature
/// covers the body actually sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct OmitEmptyCustomerIdentifier;

impl Intercept for OmitEmptyCustomerIdentifier {
    fn name(&self) -> &'static str {
        "OmitEmptyCustomerIdentifier"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        if request.headers().get("x-amz-target") != Some(BATCH_METER_USAGE_TARGET) {
            return Ok(());
        }
        let Some(rewritten) = request
            .body()
            .bytes()
            .and_then(omit_empty_customer_identifier)
        else {
            return Ok(());
        };
        let len = rewritten.len();
        *request.body_mut() = SdkBody::from(rewritten);
        request
            .headers_mut()
            .insert("Content-Length", len.to_string());
        Ok(())
    }
}

/// Rewrite a BatchMeterUsage JSON body without empty `CustomerIdentifier` members.
/// Returns `None` when there is nothing to change (or the body is not a BatchMeterUsage JSON
/// object, which is then sent as is for the service to judge).
pub fn omit_empty_customer_identifier(body: &[u8]) -> Option<Vec<u8>> {
    let mut doc: Value = serde_json::from_slice(body).ok()?;
    let records = doc.get_mut("UsageRecords")?.as_array_mut()?;
    let mut changed = false;
    for record in records.iter_mut().filter_map(Value::as_object_mut) {
        if record.get("CustomerIdentifier").and_then(Value::as_str) == Some("") {
            record.remove("CustomerIdentifier");
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    serde_json::to_vec(&doc).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rewrite(v: Value) -> Option<Value> {
        omit_empty_customer_identifier(&serde_json::to_vec(&v).unwrap())
            .map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn removes_only_empty_customer_identifiers() {
        let body = json!({"UsageRecords":[
            {"Timestamp":1764500000.25,"CustomerIdentifier":"","Dimension":"d","Quantity":3,
             "CustomerAWSAccountId":"111122223333","LicenseArn":"arn:x"},
            {"Timestamp":1764500000,"CustomerIdentifier":"legacy-1","Dimension":"d","Quantity":4}
        ]});
        let out = rewrite(body).expect("changed");
        assert_eq!(
            out,
            json!({"UsageRecords":[
                {"Timestamp":1764500000.25,"Dimension":"d","Quantity":3,
                 "CustomerAWSAccountId":"111122223333","LicenseArn":"arn:x"},
                {"Timestamp":1764500000,"CustomerIdentifier":"legacy-1","Dimension":"d","Quantity":4}
            ]})
        );
    }

    #[test]
    fn leaves_bodies_without_empty_identifiers_untouched() {
        assert_eq!(
            rewrite(json!({"UsageRecords":[{"CustomerIdentifier":"c","Dimension":"d"}]})),
            None
        );
        assert_eq!(rewrite(json!({"UsageRecords":[]})), None);
        assert_eq!(rewrite(json!({"RegistrationToken":"t"})), None);
        assert_eq!(omit_empty_customer_identifier(b"not json"), None);
    }

    #[test]
    fn keeps_every_other_member_and_number_exactly() {
        let body = br#"{"UsageRecords":[{"CustomerIdentifier":"","Quantity":2147483647,"Timestamp":1764500000.123,
            "UsageAllocations":[{"AllocatedUsageQuantity":2147483647,"Tags":[{"Key":"k","Value":"v"}]}]}]}"#;
        let out: Value =
            serde_json::from_slice(&omit_empty_customer_identifier(body).unwrap()).unwrap();
        let rec = &out["UsageRecords"][0];
        assert!(rec.get("CustomerIdentifier").is_none());
        assert_eq!(rec["Quantity"], 2147483647);
        assert_eq!(rec["Timestamp"].as_f64(), Some(1764500000.123));
        assert_eq!(rec["UsageAllocations"][0]["Tags"][0]["Key"], "k");
    }
}
