//! Lambda `discoverer`: meter / ageout / flush-deprovisioning, per its constant target input.
use awsmp_pipeline::handlers::{DiscovererDeps, discoverer, services_from_env};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // Resolved once: a missing table or queue stops the process here, named.
    let deps = awsmp_aws::lambda_init::init("discoverer", async {
        Ok::<_, Error>(DiscovererDeps::from_services(
            &services_from_env("discoverer").await?,
        )?)
    })
    .await?;
    let svc = &deps;
    lambda_runtime::run(service_fn(
        move |ev: LambdaEvent<discoverer::DiscovererInput>| async move {
            discoverer::discover_with(svc, ev.payload).await
        },
    ))
    .await
}
