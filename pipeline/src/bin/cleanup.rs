//! Lambda `cleanup`: finalize aggregated groups' raw rows (SQS, partial batch failures).
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_pipeline::handlers::{CleanupDeps, cleanup, handle_sqs_batch, services_from_env};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // Resolved once: a missing table stops the process here, named.
    let deps = awsmp_aws::lambda_init::init("cleanup", async {
        Ok::<_, Error>(CleanupDeps::from_services(
            &services_from_env("cleanup").await?,
        )?)
    })
    .await?;
    let svc = &deps;
    lambda_runtime::run(service_fn(move |ev: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(
            handle_sqs_batch("cleanup", ev.payload, |body| async move {
                cleanup::cleanup_with(svc, &body).await.map(drop)
            })
            .await,
        )
    }))
    .await
}
