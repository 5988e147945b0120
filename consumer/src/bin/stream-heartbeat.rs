//! Lambda `stream-heartbeat` (scheduled every minute): a marker record into every open shard
//! of `AWSMP_USAGE_STREAM`, so idle shards' ingest watermarks advance.
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let stream =
        std::env::var("AWSMP_USAGE_STREAM").map_err(|_| "AWSMP_USAGE_STREAM is not set")?;
    let sdk = awsmp_pipeline::aws::sdk_config().await;
    let client = aws_sdk_kinesis::Client::new(&sdk);
    let (client, stream) = (&client, stream.as_str());
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            Ok::<usize, Error>(awsmp_consumer::heartbeat::beat(client, stream).await?.len())
        },
    ))
    .await
}
