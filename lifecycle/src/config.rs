//! Each Lambda's configuration, read once from the environment at start-up (fail fast: a
//! missing table is an init error, which API Gateway answers with a 500).

use crate::error::{LifecycleError, Result};

/// `AWSMP_SUBSCRIBERS_TABLE`.
pub const SUBSCRIBERS_TABLE: &str = "AWSMP_SUBSCRIBERS_TABLE";
/// `AWSMP_SUBSCRIPTION_DLQ_URL` (optional).
pub const SUBSCRIPTION_DLQ_URL: &str = "AWSMP_SUBSCRIPTION_DLQ_URL";
/// `AWSMP_CUSTOMER_PROFILE_TABLE`.
pub const CUSTOMER_PROFILE_TABLE: &str = "AWSMP_CUSTOMER_PROFILE_TABLE";
/// `AWSMP_PRODUCT_CODE`.
pub const PRODUCT_CODE: &str = "AWSMP_PRODUCT_CODE";
/// `AWSMP_RESOLVE_CUSTOMER_REGION` (optional; default: the Lambda's region).
pub const RESOLVE_CUSTOMER_REGION: &str = "AWSMP_RESOLVE_CUSTOMER_REGION";
/// `AWSMP_SUBSCRIBERS_REGION` (optional; default: the Lambda's region). The subscribers
/// table lives in the events stack's region, us-east-1.
pub const SUBSCRIBERS_REGION: &str = "AWSMP_SUBSCRIBERS_REGION";
/// `AWS_REGION`, set by Lambda.
pub const AWS_REGION: &str = "AWS_REGION";
/// `AWSMP_METRICS_NAMESPACE` (optional).
pub const METRICS_NAMESPACE: &str = "AWSMP_METRICS_NAMESPACE";

fn required(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Result<String> {
    lookup(name)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| LifecycleError::Config(format!("{name} is not set")))
}

fn optional(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name).filter(|v| !v.trim().is_empty())
}

fn namespace(lookup: &impl Fn(&str) -> Option<String>) -> String {
    optional(lookup, METRICS_NAMESPACE)
        .unwrap_or_else(|| awsmp_aws::emf::DEFAULT_NAMESPACE.to_owned())
}

/// The subscription and deprovision-cleanup Lambdas (events stack).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// The subscribers table.
    pub subscribers_table: String,
    /// The subscription queue's DLQ, where malformed events go with their reason.
    pub dead_letter_queue_url: Option<String>,
    /// CloudWatch namespace.
    pub metrics_namespace: String,
}

impl EventsConfig {
    /// From `lookup` (the environment in a Lambda).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        Ok(Self {
            subscribers_table: required(&lookup, SUBSCRIBERS_TABLE)?,
            dead_letter_queue_url: optional(&lookup, SUBSCRIPTION_DLQ_URL),
            metrics_namespace: namespace(&lookup),
        })
    }
    /// From the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

/// The register Lambda (main stack, in-region).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterConfig {
    /// The in-region customer-profile table.
    pub customer_profile_table: String,
    /// The subscribers table.
    pub subscribers_table: String,
    /// The region of the subscribers table.
    pub subscribers_region: String,
    /// This stack's product.
    pub product_code: String,
    /// The region `ResolveCustomer` is called in.
    pub resolve_customer_region: String,
    /// The region the Lambda runs in.
    pub region: String,
    /// CloudWatch namespace.
    pub metrics_namespace: String,
}

impl RegisterConfig {
    /// From `lookup` (the environment in a Lambda).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let region = required(&lookup, AWS_REGION)?;
        let product_code = required(&lookup, PRODUCT_CODE)?;
        if !awsmp_contract::ids::is_valid_product_code(&product_code) {
            return Err(LifecycleError::Config(format!(
                "{PRODUCT_CODE} {product_code:?} is not a product code"
            )));
        }
        Ok(Self {
            customer_profile_table: required(&lookup, CUSTOMER_PROFILE_TABLE)?,
            subscribers_table: required(&lookup, SUBSCRIBERS_TABLE)?,
            subscribers_region: optional(&lookup, SUBSCRIBERS_REGION)
                .unwrap_or_else(|| region.clone()),
            product_code,
            resolve_customer_region: optional(&lookup, RESOLVE_CUSTOMER_REGION)
                .unwrap_or_else(|| region.clone()),
            metrics_namespace: namespace(&lookup),
            region,
        })
    }
    /// From the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn register_fails_without_its_tables() {
        let base = [
            (AWS_REGION, "eu-west-1"),
            (PRODUCT_CODE, "prod1"),
            (SUBSCRIBERS_TABLE, "subs"),
        ];
        let e = RegisterConfig::from_lookup(lookup(&base)).unwrap_err();
        assert!(e.to_string().contains(CUSTOMER_PROFILE_TABLE), "{e}");
        let e = RegisterConfig::from_lookup(lookup(&[
            (AWS_REGION, "eu-west-1"),
            (PRODUCT_CODE, "prod1"),
            (CUSTOMER_PROFILE_TABLE, "p"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(SUBSCRIBERS_TABLE), "{e}");
        let e = RegisterConfig::from_lookup(lookup(&[
            (AWS_REGION, "eu-west-1"),
            (CUSTOMER_PROFILE_TABLE, "p"),
            (SUBSCRIBERS_TABLE, "s"),
            (PRODUCT_CODE, "Bad Code"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(PRODUCT_CODE), "{e}");
    }

    #[test]
    fn register_regions_default_to_the_lambdas() {
        let c = RegisterConfig::from_lookup(lookup(&[
            (AWS_REGION, "eu-west-1"),
            (PRODUCT_CODE, "prod1"),
            (SUBSCRIBERS_TABLE, "s"),
            (CUSTOMER_PROFILE_TABLE, "p"),
        ]))
        .unwrap();
        assert_eq!(c.resolve_customer_region, "eu-west-1");
        assert_eq!(c.subscribers_region, "eu-west-1");
        let c = RegisterConfig::from_lookup(lookup(&[
            (AWS_REGION, "eu-west-1"),
            (PRODUCT_CODE, "prod1"),
            (SUBSCRIBERS_TABLE, "s"),
            (CUSTOMER_PROFILE_TABLE, "p"),
            (RESOLVE_CUSTOMER_REGION, "us-east-1"),
            (SUBSCRIBERS_REGION, "us-east-1"),
        ]))
        .unwrap();
        assert_eq!(c.resolve_customer_region, "us-east-1");
        assert_eq!(c.subscribers_region, "us-east-1");
    }

    #[test]
    fn events_config_needs_the_subscribers_table() {
        assert!(EventsConfig::from_lookup(lookup(&[])).is_err());
        let c = EventsConfig::from_lookup(lookup(&[(SUBSCRIBERS_TABLE, "s")])).unwrap();
        assert_eq!(c.dead_letter_queue_url, None);
    }
}
