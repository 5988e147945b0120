//! Building AWS SDK configuration once per process.

use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

/// Load the shared SDK configuration from the environment (region, credentials, and
/// `AWS_ENDPOINT_URL_<SERVICE>` endpoint overrides, which is how the local stack is reached).
///
/// Every awsmp binary builds one HTTP client here: the SDK crates are compiled without their
/// default client (one TLS stack for the whole workspace; see the root `Cargo.toml`).
pub async fn sdk_config() -> aws_config::SdkConfig {
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http_client)
        .load()
        .await
}
