//! Lambda `aggregator`: one group per message from the work and deprovision-work queues
//! (partial batch failures).
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_pipeline::handlers::{AggregatorDeps, aggregator, handle_sqs_batch, services_from_env};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // Resolved once: a missing table or queue stops the process here, named.
    let deps = awsmp_aws::lambda_init::init("aggregator", async {
        Ok::<_, Error>(AggregatorDeps::from_services(
            &services_from_env("aggregator").await?,
        )?)
    })
    .await?;
    let svc = &deps;
    lambda_runtime::run(service_fn(move |ev: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(
            handle_sqs_batch("aggregator", ev.payload, |body| async move {
                aggregator::aggregate_with(svc, &body).await.map(drop)
            })
            .await,
        )
    }))
    .await
}
