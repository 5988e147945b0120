//! Lambda `deprovision-cleanup`: finalize licenses whose flush window closed (every 15 min).
use awsmp_aws::emf::MetricsSink;
use awsmp_lifecycle::adapters::dynamodb::DynamoDbSubscriberStore;
use awsmp_lifecycle::handlers::deprovision_cleanup::{CleanupReport, run};
use awsmp_lifecycle::{aws, config::EventsConfig};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config =
        awsmp_aws::lambda_init::init("deprovision-cleanup", async { EventsConfig::from_env() })
            .await?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let store = DynamoDbSubscriberStore::new(aws::dynamodb(&sdk, None), &config.subscribers_table);
    let metrics = MetricsSink::stdout(&config.metrics_namespace, "deprovision-cleanup");
    let (store, metrics) = (&store, &metrics);
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            Ok::<CleanupReport, Error>(run(store, metrics, chrono::Utc::now()).await?)
        },
    ))
    .await
}
