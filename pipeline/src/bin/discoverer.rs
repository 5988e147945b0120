//! Lambda `discoverer`: meter / ageout / flush-deprovisioning, per its constant target input.
use awsmp_pipeline::handlers::{discoverer, services_from_env};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let svc = services_from_env("discoverer").await?;
    let svc = &svc;
    lambda_runtime::run(service_fn(
        move |ev: LambdaEvent<discoverer::DiscovererInput>| async move {
            discoverer::discover(svc, ev.payload).await
        },
    ))
    .await
}
