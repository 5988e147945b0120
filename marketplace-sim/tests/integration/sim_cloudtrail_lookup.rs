//! The CloudTrail adapter (`CloudTrailMeteringTrail`, what `meterctl` and the load run's ledger
//! read) through the unmodified `aws-sdk-cloudtrail` client against the simulator's
//! `LookupEvents`: the 2 requests/s limit is the account's, shared by every caller, so a second
//! reader running at the same moment is throttled — and must still read every call. Each test
//! runs its own simulator on 127.0.0.1:0; no emulator stack.

use aws_config::{Region, retry::RetryConfig};
use aws_credential_types::Credentials;
use aws_sdk_marketplacemetering::types::UsageRecord;
use aws_smithy_types::DateTime as SdkTime;
use awsmp_contract::keys::HourBucket;
use awsmp_marketplace_sim::{Catalog, SimConfig, spawn_on};
use awsmp_meterctl::cloudtrail::CloudTrailMeteringTrail;
use awsmp_meterctl::trail::{MeteringTrail, TrailWindow};
use awsmp_pipeline::metering_client::metering_client;
use chrono::{Duration, Utc};

const ACCOUNT: &str = "111111111111";

fn license(i: usize) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{i:032}")
}

async fn sdk_config(url: &str) -> aws_config::SdkConfig {
    awsmp_aws::sdk::config_loader()
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::from_keys("awsmp-test", "awsmp-test", None))
        .endpoint_url(url)
        // The SDK's own retries off: what keeps the reader going is the adapter's.
        .retry_config(RetryConfig::disabled())
        .load()
        .await
}

#[tokio::test]
async fn readers_sharing_the_accounts_rate_limit_are_throttled_and_still_read_every_call() {
    // GIVEN a simulator whose trail shows calls at once, and 60 billed records in 3 calls
    // (more than one 50-event page is not needed: the throttle is per request)
    let licenses: Vec<String> = (0..60).map(license).collect();
    let products = format!(
        r#"{{"requestsPerSecond":1000,"products":[{{"productCode":"prod1","dimensions":["requests"],"licenses":[{}]}}]}}"#,
        licenses
            .iter()
            .map(|l| format!(
                r#"{{"licenseArn":"{l}","customerAWSAccountId":"{ACCOUNT}","status":"active"}}"#
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    let sim = spawn_on(
        "127.0.0.1:0".parse().unwrap(),
        SimConfig::new(Catalog::from_json(&products).unwrap()),
    )
    .await
    .unwrap();
    let admin = reqwest::Client::new();
    let r = admin
        .post(format!("{}/_sim/cloudtrail", sim.url()))
        .json(&serde_json::json!({"lagSeconds": 0}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let cfg = sdk_config(&sim.url()).await;
    let metering = metering_client(&cfg);
    let hour = HourBucket::containing(Utc::now() - Duration::hours(1));
    for chunk in licenses.chunks(20) {
        let records: Vec<UsageRecord> = chunk
            .iter()
            .map(|l| {
                UsageRecord::builder()
                    .timestamp(SdkTime::from_secs(hour.start().timestamp()))
                    .license_arn(l)
                    .customer_aws_account_id(ACCOUNT)
                    .dimension("requests")
                    .quantity(3)
                    .build()
                    .unwrap()
            })
            .collect();
        metering
            .batch_meter_usage()
            .set_usage_records(Some(records))
            .send()
            .await
            .unwrap();
    }

    // WHEN six readers look up the same window at the same moment (each paces itself at the
    // limit, so together they ask at six times it)
    let window = TrailWindow::for_hours(hour, hour, 6, Utc::now() + Duration::seconds(5));
    let readers = (0..6).map(|_| {
        let trail = CloudTrailMeteringTrail::new(aws_sdk_cloudtrail::Client::new(&cfg));
        async move { trail.batch_meter_usage_records(window).await }
    });
    let results = futures::future::join_all(readers).await;

    // THEN every reader read all 60 records: the throttled requests were asked again
    for r in results {
        let records = r.expect("a throttled lookup is retried, not failed");
        assert_eq!(records.len(), 60);
        assert!(records.iter().all(|r| r.billed_id().is_some()));
    }
    sim.shutdown().await.unwrap();
}
