//! Lambda `cleanup`: finalize aggregated groups' raw rows (SQS, partial batch failures).
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_pipeline::handlers::{cleanup, handle_sqs_batch, services_from_env};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let svc = services_from_env("cleanup").await?;
    let svc = &svc;
    lambda_runtime::run(service_fn(move |ev: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(
            handle_sqs_batch("cleanup", ev.payload, |body| async move {
                cleanup::cleanup(svc, &body).await.map(drop)
            })
            .await,
        )
    }))
    .await
}
