//! Lambda `stream-heartbeat` (scheduled every minute): a marker record into every open shard
//! of `AWSMP_USAGE_STREAM`, so idle shards' ingest watermarks advance; with
//! `AWSMP_INGEST_WATERMARK_TABLE`, shards without a watermark are registered and closed parents
//! a child took over are marked drained (`ListShards` against a `Query` of the stream's
//! partition of the table; `dynamodb:Query` and `dynamodb:UpdateItem`, `infra/ingest.yaml`).
use awsmp_aws::watermark::DynamoDbWatermarkStore;
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let stream = awsmp_aws::lambda_init::init("stream-heartbeat", async {
        std::env::var("AWSMP_USAGE_STREAM")
            .ok()
            .filter(|s| !s.is_empty())
            .ok_or("AWSMP_USAGE_STREAM is not set")
    })
    .await?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let client = aws_sdk_kinesis::Client::new(&sdk);
    let marks = std::env::var("AWSMP_INGEST_WATERMARK_TABLE")
        .ok()
        .map(|t| DynamoDbWatermarkStore::new(aws_sdk_dynamodb::Client::new(&sdk), t));
    let (client, stream, marks) = (&client, stream.as_str(), marks.as_ref());
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            let marks = marks.map(|m| m as &dyn awsmp_aws::watermark::WatermarkStore);
            let done = awsmp_consumer::heartbeat::scheduled(client, stream, marks).await?;
            Ok::<(usize, usize), Error>(done)
        },
    ))
    .await
}
