//! Building AWS SDK configuration once per process.

use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

/// The SDK's defaults with the workspace's one HTTP client: the SDK crates are compiled
/// without their default client (one TLS stack for the whole workspace; see the root
/// `Cargo.toml`), so every SDK configuration of awsmp starts here.
pub fn config_loader() -> aws_config::ConfigLoader {
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http_client)
}

/// Load the shared SDK configuration from the environment (region, credentials, and
/// `AWS_ENDPOINT_URL_<SERVICE>` endpoint overrides, which is how the local stack is reached).
pub async fn sdk_config() -> aws_config::SdkConfig {
    config_loader().load().await
}
