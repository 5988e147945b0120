//! Lambda `kinesis-consumer`: Kinesis batches in (ReportBatchItemFailures), usage rows out.
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use awsmp_consumer::{Config, adapters::dynamodb::consumer_from_config};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config =
        awsmp_aws::lambda_init::init("kinesis-consumer", async { Config::from_env() }).await?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let mut consumer = consumer_from_config(&config, aws_sdk_dynamodb::Client::new(&sdk));
    consumer.archive = config.archive_bucket.as_ref().map(|b| {
        let s3 = aws_sdk_s3::Client::new(&sdk);
        std::sync::Arc::new(awsmp_consumer::adapters::archive::S3BillingArchive::new(
            s3, b,
        )) as _
    });
    let consumer = &consumer;
    lambda_runtime::run(service_fn(
        move |ev: LambdaEvent<KinesisEvent>| async move {
            Ok::<KinesisEventResponse, Error>(consumer.handle(ev.payload).await)
        },
    ))
    .await
}
