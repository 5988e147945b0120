//! Lambda `subscription`: AWS Marketplace lifecycle events (SQS, partial batch failures).
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_aws::emf::MetricsSink;
use awsmp_lifecycle::adapters::{dynamodb::DynamoDbSubscriberStore, sqs::SqsDeadLetters};
use awsmp_lifecycle::handlers::subscription::{SubscriptionService, handle_batch};
use awsmp_lifecycle::{aws, config::EventsConfig};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config =
        awsmp_aws::lambda_init::init("subscription", async { EventsConfig::from_env() }).await?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let store = DynamoDbSubscriberStore::new(aws::dynamodb(&sdk, None), &config.subscribers_table);
    let dlq = config
        .dead_letter_queue_url
        .as_ref()
        .map(|url| SqsDeadLetters::new(aws_sdk_sqs::Client::new(&sdk), url));
    let metrics = MetricsSink::stdout(&config.metrics_namespace, "subscription");
    let svc = SubscriptionService {
        store: &store,
        dead_letters: dlq.as_ref().map(|d| d as _),
        metrics: &metrics,
    };
    let svc = &svc;
    lambda_runtime::run(service_fn(move |ev: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(handle_batch(svc, ev.payload).await)
    }))
    .await
}
