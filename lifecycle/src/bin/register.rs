//! Lambda `register`: the registration page and `ResolveCustomer` (API Gateway).
use awsmp_aws::emf::MetricsSink;
use awsmp_lifecycle::adapters::dynamodb::{DynamoDbProfileStore, DynamoDbSubscriberStore};
use awsmp_lifecycle::adapters::resolver::MarketplaceCustomerResolver;
use awsmp_lifecycle::handlers::register::{RegisterService, lambda};
use awsmp_lifecycle::{aws, config::RegisterConfig};
use lambda_http::{Error, Request, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let c = awsmp_aws::lambda_init::init("register", async { RegisterConfig::from_env() }).await?;
    let sdk = awsmp_aws::sdk::sdk_config().await;
    let resolver =
        MarketplaceCustomerResolver::new(aws::metering(&sdk, &c.resolve_customer_region));
    let profiles = DynamoDbProfileStore::new(aws::dynamodb(&sdk, None), &c.customer_profile_table);
    let subscribers = DynamoDbSubscriberStore::new(
        aws::dynamodb(&sdk, Some(&c.subscribers_region)),
        &c.subscribers_table,
    );
    let metrics = MetricsSink::stdout(&c.metrics_namespace, "register");
    let svc = RegisterService {
        resolver: &resolver,
        profiles: &profiles,
        subscribers: &subscribers,
        product_code: &c.product_code,
        region: &c.region,
        metrics: &metrics,
    };
    let svc = &svc;
    lambda_http::run(service_fn(move |req: Request| async move {
        lambda(svc, req).await
    }))
    .await
}
