//! Lambda `meter-ingest`: async invocations from untrusted modules, each through its own alias
//! (docs/meter-ingest.md). A malformed payload or a store failure is a function error: Lambda
//! retries, then sends the invocation to the on-failure destination, `errorType` the reason.
use awsmp_meter_ingest::adapters::dynamodb::meter_ingest_from_config;
use awsmp_meter_ingest::{IngestConfig, Invocation};
use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config =
        awsmp_aws::lambda_init::init("meter-ingest", async { IngestConfig::from_env() }).await?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let ingest = meter_ingest_from_config(
        &config,
        aws_sdk_dynamodb::Client::new(&sdk),
        aws_sdk_kinesis::Client::new(&sdk),
    );
    let ingest = &ingest;
    lambda_runtime::run(service_fn(
        move |ev: LambdaEvent<serde_json::Value>| async move {
            let inv = Invocation {
                invoked_arn: ev.context.invoked_function_arn,
                request_id: ev.context.request_id,
                payload: ev.payload,
            };
            let report = ingest.handle(&inv).await.map_err(|e| Diagnostic {
                error_type: e.failure_type().to_owned(),
                error_message: awsmp_consumer::error::ErrorChain(&e).to_string(),
            })?;
            serde_json::to_value(report).map_err(|e| Diagnostic {
                error_type: "SerializationFailure".into(),
                error_message: e.to_string(),
            })
        },
    ))
    .await
}
