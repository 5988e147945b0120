//! The ingest stack's three functions as processes on the local stack: kinesis-consumer fed by
//! the project's Kinesis event source mapping (Lambda's batch shape; `batchItemFailures` are its
//! checkpoints), stream-heartbeat on its scheduled event, meter-ingest invoked asynchronously
//! as an alias ARN.

use crate::common::{
    NEEDS_STACK, clients_env, delete_stream, fresh_license, own_stream, sample, start, start_with,
    uuid_hex,
};
use aws_lambda_events::event::streams::KinesisEventResponse;
use awsmp_consumer::adapters::ingest::DynamoDbMappingStore;
use awsmp_consumer::ingest::mapping::MappingFile;
use awsmp_consumer::ingest::ports::MappingStore;
use awsmp_lambda_host::local::LOCAL_ACCOUNT;
use awsmp_local_stack::kinesis_esm::{EsmOptions, KinesisEsm};
use serde_json::{Value, json};

/// Usage rows of `license` in the raw usage table.
pub async fn usage_rows(
    license: &str,
) -> Vec<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    let env = clients_env();
    let ddb = env.dynamodb().await.unwrap();
    ddb.query()
        .table_name(env.get("AWSMP_USAGE_TABLE").unwrap())
        .key_condition_expression("licenseArn = :l")
        .expression_attribute_values(
            ":l",
            aws_sdk_dynamodb::types::AttributeValue::S(license.into()),
        )
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default()
}

/// The summed quantity of `license`'s usage rows.
pub async fn usage_total(license: &str) -> u64 {
    usage_rows(license)
        .await
        .iter()
        .filter_map(|r| r.get("quantity")?.as_n().ok()?.parse::<u64>().ok())
        .sum()
}

/// A producer's record (the v1 JSON of `infra/events/kinesis-consumer.json`).
pub fn usage_record(license: &str, account: &str, id: &str, quantity: u64) -> Value {
    json!({"v": 1, "eventId": id, "licenseArn": license, "customerAWSAccountId": account,
           "dimension": "api", "quantity": quantity,
           "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
           "producerId": "lambda-host-test"})
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn the_consumer_takes_the_mappings_batches_and_writes_every_row() {
    let _ = NEEDS_STACK;
    let env = clients_env();
    let kinesis = env.kinesis().await.unwrap();
    let stream = own_stream(2).await;
    let license = fresh_license();
    let account = "210000000042";
    for i in 0..6u64 {
        let rec = usage_record(&license, account, &format!("e-{i}-{license}"), i + 1);
        kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(format!("{license}|{account}|api"))
            .data(aws_sdk_kinesis::primitives::Blob::new(rec.to_string()))
            .send()
            .await
            .unwrap();
    }
    let consumer = start("kinesis-consumer").await;
    let dir = std::env::temp_dir().join(format!("lambda-host-esm-{}", uuid_hex()));
    std::fs::create_dir_all(&dir).unwrap();
    let options = EsmOptions {
        batch_size: 4,
        ..EsmOptions::default()
    };
    let mut esm = KinesisEsm::new(kinesis, &stream, options, dir.join("checkpoints.json"))
        .await
        .unwrap();
    let f = &consumer;
    let report = esm
        .drain(|event| async move {
            let payload = serde_json::to_value(&event).map_err(|e| e.to_string())?;
            let answer = f.invoke(&payload, None).await.map_err(|e| e.to_string())?;
            serde_json::from_value::<KinesisEventResponse>(answer).map_err(|e| e.to_string())
        })
        .await
        .unwrap();
    consumer.stop().await;
    std::fs::remove_dir_all(&dir).ok();
    delete_stream(&stream).await;
    assert_eq!(report.function_errors, 0, "{report:?}");
    assert!(report.records_done >= 6, "{report:?}");
    // Rows are per account, dimension and second: the six events sum into them exactly.
    assert_eq!(usage_total(&license).await, 21);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn the_heartbeat_registers_every_shard_of_the_stream() {
    let env = clients_env();
    let stream = own_stream(3).await;
    let heartbeat = start_with("stream-heartbeat", &[("AWSMP_USAGE_STREAM", &stream)]).await;
    let answer = heartbeat
        .invoke(&sample("stream-heartbeat.json"), None)
        .await
        .unwrap();
    heartbeat.stop().await;
    let marks = env
        .dynamodb()
        .await
        .unwrap()
        .query()
        .table_name(env.get("AWSMP_INGEST_WATERMARK_TABLE").unwrap())
        .key_condition_expression("#s = :s")
        .expression_attribute_names("#s", "stream")
        .expression_attribute_values(
            ":s",
            aws_sdk_dynamodb::types::AttributeValue::S(stream.clone()),
        )
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let markers = stream_records(&stream).await;
    delete_stream(&stream).await;
    // A marker into each of the three shards, each shard registered in the watermark table.
    assert_eq!(answer[0], json!(3), "{answer}");
    assert_eq!(marks.len(), 3, "{marks:?}");
    assert_eq!(markers.len(), 3, "{markers:?}");
}

/// Every record's data on `stream`, every shard read from its start.
pub async fn stream_records(stream: &str) -> Vec<String> {
    let kinesis = clients_env().kinesis().await.unwrap();
    let shards = kinesis
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .unwrap();
    let mut out = Vec::new();
    for shard in shards.shards() {
        let it = kinesis
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap();
        let got = kinesis
            .get_records()
            .shard_iterator(it.shard_iterator().unwrap())
            .send()
            .await
            .unwrap();
        out.extend(
            got.records()
                .iter()
                .map(|r| String::from_utf8_lossy(r.data().as_ref()).into_owned()),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn meter_ingest_takes_an_async_invoke_as_its_alias() {
    let env = clients_env();
    let function = format!("arn:aws:lambda:us-east-1:{LOCAL_ACCOUNT}:function:meter-ingest");
    let module = format!("module-{}", &uuid_hex()[..8]);
    let alias = format!("{function}:{module}");
    let license = fresh_license();
    let mapping = json!({
        "environment": "local",
        "allowedAccounts": [LOCAL_ACCOUNT],
        "modules": [{"invokedArn": alias, "appId": "app-x",
                     "licenses": [{"licenseArn": license, "customerAWSAccountId": "210000000043"}],
                     "dimensions": ["api_calls"], "maxEventsPerSecond": 100, "maxQuantity": 1000}]
    });
    let mapping = MappingFile::parse(&mapping.to_string()).unwrap();
    let store = DynamoDbMappingStore::new(
        env.dynamodb().await.unwrap(),
        env.get("AWSMP_INGEST_MAPPING_TABLE").unwrap(),
    );
    for m in &mapping.modules {
        store.put(m).await.unwrap();
    }
    let stream = own_stream(1).await;
    let ingest = start_with("meter-ingest", &[("AWSMP_USAGE_STREAM", &stream)]).await;
    let event = |id: &str| {
        json!({"events": [{"eventId": id, "dimension": "api_calls", "quantity": 3,
                           "recordedAtHint": chrono::Utc::now().to_rfc3339()}]})
    };
    let accepted = ingest
        .invoke(&event(&format!("{module}-1")), Some(&alias))
        .await
        .unwrap();
    let unqualified = ingest
        .invoke(&event(&format!("{module}-2")), Some(&function))
        .await
        .unwrap();
    let replayed = ingest
        .invoke(&event(&format!("{module}-1")), Some(&alias))
        .await
        .unwrap();
    ingest.stop().await;
    let on_stream = stream_records(&stream).await;
    delete_stream(&stream).await;
    // The accepted event, and only it, went onto the stream, as the module's license.
    assert_eq!(on_stream.len(), 1, "{on_stream:?}");
    assert!(on_stream[0].contains(&license), "{on_stream:?}");
    assert_eq!(accepted["events"][0]["outcome"], "Accepted", "{accepted}");
    assert_eq!(
        unqualified["events"][0]["outcome"], "Rejected",
        "{unqualified}"
    );
    assert_eq!(
        unqualified["events"][0]["reason"], "UnqualifiedInvoker",
        "{unqualified}"
    );
    assert_eq!(replayed["events"][0]["outcome"], "Duplicate", "{replayed}");
}
