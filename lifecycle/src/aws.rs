//! SDK clients, built once per process over the workspace's one HTTP stack
//! ([`awsmp_aws::sdk::sdk_config`]), optionally in another region than the Lambda's.

use aws_config::{Region, SdkConfig};

/// A DynamoDB client, in `region` if given.
pub fn dynamodb(sdk: &SdkConfig, region: Option<&str>) -> aws_sdk_dynamodb::Client {
    let mut b = aws_sdk_dynamodb::config::Builder::from(sdk);
    if let Some(r) = region {
        b = b.region(Region::new(r.to_owned()));
    }
    aws_sdk_dynamodb::Client::from_conf(b.build())
}

/// A Marketplace Metering client (for `ResolveCustomer`) in `region`.
pub fn metering(sdk: &SdkConfig, region: &str) -> aws_sdk_marketplacemetering::Client {
    let conf = aws_sdk_marketplacemetering::config::Builder::from(sdk)
        .region(Region::new(region.to_owned()))
        .build();
    aws_sdk_marketplacemetering::Client::from_conf(conf)
}
