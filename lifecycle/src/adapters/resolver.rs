//! [`CustomerResolver`] over `ResolveCustomer`
//! (<https://docs.aws.amazon.com/marketplace/latest/APIReference/API_marketplace-metering_ResolveCustomer.html>).

use async_trait::async_trait;
use aws_sdk_marketplacemetering::Client;
use aws_sdk_marketplacemetering::operation::resolve_customer::{
    ResolveCustomerError, ResolveCustomerOutput,
};
use awsmp_contract::ids::{is_valid_account_id, is_valid_license_arn};

use crate::domain::event::LicenseKey;
use crate::domain::registration::ResolvedCustomer;
use crate::ports::{CustomerResolver, ResolveError};

/// `ResolveCustomer` in the region of its client (`AWSMP_RESOLVE_CUSTOMER_REGION`).
#[derive(Debug, Clone)]
pub struct MarketplaceCustomerResolver {
    client: Client,
}

impl MarketplaceCustomerResolver {
    /// Over `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// Check a `ResolveCustomer` answer: a Concurrent Agreements customer has a license ARN and
/// an account id; `CustomerIdentifier` is deprecated and not used.
pub fn interpret(out: &ResolveCustomerOutput) -> Result<ResolvedCustomer, ResolveError> {
    let (Some(license_arn), Some(account), Some(product_code)) = (
        out.license_arn(),
        out.customer_aws_account_id(),
        out.product_code(),
    ) else {
        return Err(ResolveError::Failed(
            "ResolveCustomer answered without LicenseArn, CustomerAWSAccountId or ProductCode"
                .into(),
        ));
    };
    if !is_valid_license_arn(license_arn) || !is_valid_account_id(account) {
        return Err(ResolveError::Failed(
            "ResolveCustomer answered a malformed LicenseArn or CustomerAWSAccountId".into(),
        ));
    }
    Ok(ResolvedCustomer {
        key: LicenseKey {
            license_arn: license_arn.to_owned(),
            customer_aws_account_id: account.to_owned(),
        },
        product_code: product_code.to_owned(),
    })
}

#[async_trait]
impl CustomerResolver for MarketplaceCustomerResolver {
    async fn resolve(&self, token: &str) -> Result<ResolvedCustomer, ResolveError> {
        match self
            .client
            .resolve_customer()
            .registration_token(token)
            .send()
            .await
        {
            Ok(out) => interpret(&out),
            Err(e) => Err(match e.as_service_error() {
                Some(ResolveCustomerError::ExpiredTokenException(_)) => ResolveError::Expired,
                Some(ResolveCustomerError::InvalidTokenException(_)) => ResolveError::Invalid,
                _ => ResolveError::Failed(Box::new(e)),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    #[test]
    fn a_concurrent_agreements_answer_resolves() {
        let out = ResolveCustomerOutput::builder()
            .license_arn(ARN)
            .customer_aws_account_id("111122223333")
            .product_code("prod1")
            .build();
        let c = interpret(&out).unwrap();
        assert_eq!(c.key.license_arn, ARN);
        assert_eq!(c.key.customer_aws_account_id, "111122223333");
        assert_eq!(c.product_code, "prod1");
    }

    #[test]
    fn a_legacy_or_malformed_answer_is_a_failure() {
        let legacy = ResolveCustomerOutput::builder()
            .customer_identifier("abc")
            .product_code("prod1")
            .build();
        assert!(matches!(interpret(&legacy), Err(ResolveError::Failed(_))));
        let bad = ResolveCustomerOutput::builder()
            .license_arn("arn:aws:s3:::x")
            .customer_aws_account_id("111122223333")
            .product_code("prod1")
            .build();
        assert!(matches!(interpret(&bad), Err(ResolveError::Failed(_))));
    }
}
