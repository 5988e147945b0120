//! Lambda `submitter`: one per product and region, reserved concurrency 1.
use awsmp_pipeline::adapters::marketplace::MarketplaceMeteringApi;
use awsmp_pipeline::handlers::{SubmitterDeps, services_from_env, submitter};
use awsmp_pipeline::metering_client::metering_client;
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let svc = awsmp_aws::lambda_init::init("submitter", async {
        Ok::<_, Error>(SubmitterDeps::from_services(
            &services_from_env("submitter").await?,
        )?)
    })
    .await?;
    let api = MarketplaceMeteringApi::new(metering_client(&awsmp_aws::sdk::sdk_config().await));
    let (svc, api) = (&svc, &api);
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move { submitter::submit_with(svc, api).await },
    ))
    .await
}
