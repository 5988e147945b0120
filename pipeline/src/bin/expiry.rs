//! Lambda `expiry`: expire aggregated records that can no longer be billed.
use awsmp_pipeline::handlers::{ExpiryDeps, expiry, services_from_env};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let deps = awsmp_aws::lambda_init::init("expiry", async {
        Ok::<_, Error>(ExpiryDeps::from_services(
            &services_from_env("expiry").await?,
        )?)
    })
    .await?;
    let svc = &deps;
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move { expiry::expire_with(svc).await },
    ))
    .await
}
