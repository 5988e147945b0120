//! The one definition of awsmp's tables, queues and streams (`infra/resources.json`), and
//! creating them idempotently against any endpoint (the local emulators, or AWS itself).

use anyhow::{Context, Result, bail};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType,
};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `infra/resources.json`, compiled in so `awsmp-local` works from any directory.
pub const RESOURCES_JSON: &str = include_str!("../../../infra/resources.json");

/// Every resource awsmp deploys.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// DynamoDB tables.
    pub tables: Vec<TableDef>,
    /// SQS queues (each optionally with a dead-letter queue).
    pub queues: Vec<QueueDef>,
    /// Kinesis data streams.
    pub streams: Vec<StreamDef>,
    /// S3 buckets.
    #[serde(default)]
    pub buckets: Vec<BucketDef>,
}

/// An S3 bucket.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketDef {
    /// CloudFormation logical id.
    pub logical_id: String,
    /// Which stack deploys it.
    pub stack: String,
    /// Bucket name.
    pub name: String,
    /// Environment variable carrying the bucket name.
    pub env: String,
    /// Versioning on.
    #[serde(default)]
    pub versioned: bool,
    /// Default Object Lock retention, if any.
    #[serde(default)]
    pub object_lock: Option<ObjectLockDef>,
}

/// A bucket's default Object Lock retention.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectLockDef {
    /// `COMPLIANCE` or `GOVERNANCE`.
    pub mode: String,
    /// Retention in days.
    pub retention_days: i32,
}

/// Create `bucket` if absent: versioned, with its default Object Lock retention (Object Lock is
/// only enabled at creation, <https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock.html>).
pub async fn ensure_bucket(client: &aws_sdk_s3::Client, bucket: &BucketDef) -> Result<()> {
    use aws_sdk_s3::types::{
        BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration,
        DefaultRetention, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockRetentionMode,
        ObjectLockRule, VersioningConfiguration,
    };
    if client
        .head_bucket()
        .bucket(&bucket.name)
        .send()
        .await
        .is_ok()
    {
        return Ok(());
    }
    // Outside us-east-1 a bucket is created with its region as location constraint
    // (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateBucket.html).
    let location = client
        .config()
        .region()
        .map(|r| r.as_ref().to_owned())
        .filter(|r| r != "us-east-1")
        .map(|r| {
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(r.as_str()))
                .build()
        });
    client
        .create_bucket()
        .bucket(&bucket.name)
        .set_create_bucket_configuration(location)
        .object_lock_enabled_for_bucket(bucket.object_lock.is_some())
        .send()
        .await
        .with_context(|| format!("creating bucket {}", bucket.name))?;
    if bucket.versioned {
        let on = VersioningConfiguration::builder()
            .status(BucketVersioningStatus::Enabled)
            .build();
        client
            .put_bucket_versioning()
            .bucket(&bucket.name)
            .versioning_configuration(on)
            .send()
            .await
            .with_context(|| format!("versioning bucket {}", bucket.name))?;
    }
    if let Some(lock) = &bucket.object_lock {
        let retention = DefaultRetention::builder()
            .mode(ObjectLockRetentionMode::from(lock.mode.as_str()))
            .days(lock.retention_days)
            .build();
        let config = ObjectLockConfiguration::builder()
            .object_lock_enabled(ObjectLockEnabled::Enabled)
            .rule(
                ObjectLockRule::builder()
                    .default_retention(retention)
                    .build(),
            )
            .build();
        client
            .put_object_lock_configuration()
            .bucket(&bucket.name)
            .object_lock_configuration(config)
            .send()
            .await
            .with_context(|| format!("object lock on bucket {}", bucket.name))?;
    }
    Ok(())
}

/// A DynamoDB key attribute.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct KeyAttr {
    /// Attribute name.
    pub name: String,
    /// `S`, `N` or `B`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A DynamoDB table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableDef {
    /// CloudFormation logical id the (planned) SAM templates will give it.
    pub logical_id: String,
    /// Which stack deploys it (`main`, `events`, `ingest`).
    pub stack: String,
    /// Physical (local/default) name.
    pub name: String,
    /// Environment variable carrying the name.
    pub env: String,
    /// Partition key.
    pub hash_key: KeyAttr,
    /// Sort key.
    #[serde(default)]
    pub range_key: Option<KeyAttr>,
    /// TTL attribute, enabled in AWS (dynalite has no TTL; nothing depends on it locally).
    #[serde(default)]
    pub ttl_attribute: Option<String>,
    /// Global secondary indexes.
    #[serde(default)]
    pub gsis: Vec<GsiDef>,
}

/// A global secondary index.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GsiDef {
    /// Index name.
    pub name: String,
    /// Index partition key.
    pub hash_key: KeyAttr,
    /// Index sort key.
    #[serde(default)]
    pub range_key: Option<KeyAttr>,
    /// Projection.
    pub projection: ProjectionDef,
}

/// A GSI projection.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectionDef {
    /// `ALL`, `KEYS_ONLY` or `INCLUDE`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Projected attributes for `INCLUDE`.
    #[serde(default)]
    pub non_key_attributes: Vec<String>,
}

/// An SQS queue.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueDef {
    /// CloudFormation logical id.
    pub logical_id: String,
    /// Which stack deploys it.
    pub stack: String,
    /// Queue name.
    pub name: String,
    /// Environment variable carrying the queue URL.
    pub env: String,
    /// Visibility timeout in seconds.
    pub visibility_timeout_seconds: u32,
    /// Dead-letter queue, if any.
    #[serde(default)]
    pub dlq: Option<DlqDef>,
}

/// A dead-letter queue and its redrive policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqDef {
    /// Queue name.
    pub name: String,
    /// Environment variable carrying the queue URL.
    pub env: String,
    /// Receives before a message moves to the DLQ.
    pub max_receive_count: u32,
}

/// A Kinesis data stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamDef {
    /// CloudFormation logical id.
    pub logical_id: String,
    /// Which stack deploys it.
    pub stack: String,
    /// Stream name.
    pub name: String,
    /// Environment variable carrying the stream name.
    pub env: String,
    /// Shard count (provisioned mode; locally always).
    pub shards: i32,
}

impl Resources {
    /// The compiled-in definitions.
    pub fn load() -> Result<Self> {
        serde_json::from_str(RESOURCES_JSON).context("parsing infra/resources.json")
    }

    /// Table definition by logical id.
    pub fn table(&self, logical_id: &str) -> Option<&TableDef> {
        self.tables.iter().find(|t| t.logical_id == logical_id)
    }
}

fn attr_type(kind: &str) -> Result<ScalarAttributeType> {
    Ok(match kind {
        "S" => ScalarAttributeType::S,
        "N" => ScalarAttributeType::N,
        "B" => ScalarAttributeType::B,
        other => bail!("unknown attribute type {other}"),
    })
}

fn key_schema(hash: &KeyAttr, range: Option<&KeyAttr>) -> Result<Vec<KeySchemaElement>> {
    let mut keys = vec![
        KeySchemaElement::builder()
            .attribute_name(&hash.name)
            .key_type(KeyType::Hash)
            .build()?,
    ];
    if let Some(r) = range {
        keys.push(
            KeySchemaElement::builder()
                .attribute_name(&r.name)
                .key_type(KeyType::Range)
                .build()?,
        );
    }
    Ok(keys)
}

/// How long `up` waits for a stream it created to become ACTIVE.
const STREAM_ACTIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Create `table` unless it exists. Returns true when it was created.
pub async fn ensure_table(client: &aws_sdk_dynamodb::Client, table: &TableDef) -> Result<bool> {
    // Every key attribute of the table and its indexes, declared once each.
    let mut attrs: BTreeMap<&str, &str> = BTreeMap::new();
    for k in std::iter::once(&table.hash_key)
        .chain(table.range_key.iter())
        .chain(
            table
                .gsis
                .iter()
                .flat_map(|g| std::iter::once(&g.hash_key).chain(g.range_key.iter())),
        )
    {
        if let Some(prev) = attrs.insert(&k.name, &k.kind)
            && prev != k.kind
        {
            bail!(
                "{}: attribute {} declared as {prev} and {}",
                table.name,
                k.name,
                k.kind
            );
        }
    }
    let mut req = client
        .create_table()
        .table_name(&table.name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_key_schema(Some(key_schema(&table.hash_key, table.range_key.as_ref())?));
    for (name, kind) in attrs {
        req = req.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(attr_type(kind)?)
                .build()?,
        );
    }
    for g in &table.gsis {
        let mut projection =
            Projection::builder().projection_type(ProjectionType::from(g.projection.kind.as_str()));
        for a in &g.projection.non_key_attributes {
            projection = projection.non_key_attributes(a);
        }
        req = req.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(&g.name)
                .set_key_schema(Some(key_schema(&g.hash_key, g.range_key.as_ref())?))
                .projection(projection.build())
                .build()?,
        );
    }
    match req.send().await {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("creating table {}", table.name))),
    }
}

/// Create `queue` (and its DLQ with the redrive policy) unless they exist. Returns the queue
/// URLs as `(env var, url)` pairs.
pub async fn ensure_queue(
    client: &aws_sdk_sqs::Client,
    queue: &QueueDef,
) -> Result<Vec<(String, String)>> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let mut out = Vec::new();
    let mut req = client.create_queue().queue_name(&queue.name).attributes(
        QueueAttributeName::VisibilityTimeout,
        queue.visibility_timeout_seconds.to_string(),
    );
    if let Some(dlq) = &queue.dlq {
        let dlq_url = client
            .create_queue()
            .queue_name(&dlq.name)
            // 14 days: the SQS maximum retention, so nothing ages out of a DLQ unseen.
            .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
            .send()
            .await
            .with_context(|| format!("creating queue {}", dlq.name))?
            .queue_url
            .context("CreateQueue returned no URL")?;
        let arn = client
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await?
            .attributes
            .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
            .context("no QueueArn for the DLQ")?;
        let redrive = serde_json::json!({"deadLetterTargetArn": arn, "maxReceiveCount": dlq.max_receive_count});
        req = req.attributes(QueueAttributeName::RedrivePolicy, redrive.to_string());
        out.push((dlq.env.clone(), dlq_url));
    }
    let url = req
        .send()
        .await
        .with_context(|| format!("creating queue {}", queue.name))?
        .queue_url
        .context("CreateQueue returned no URL")?;
    out.insert(0, (queue.env.clone(), url));
    Ok(out)
}

/// Create `stream` unless it exists, and wait until it is ACTIVE.
pub async fn ensure_stream(client: &aws_sdk_kinesis::Client, stream: &StreamDef) -> Result<()> {
    match client
        .create_stream()
        .stream_name(&stream.name)
        .shard_count(stream.shards)
        .send()
        .await
    {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) => {}
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("creating stream {}", stream.name)));
        }
    }
    // Kinesalite makes a stream ACTIVE after a delay of its own; on a loaded machine its event
    // loop may take much longer than that to answer.
    let deadline = std::time::Instant::now() + STREAM_ACTIVE_TIMEOUT;
    while std::time::Instant::now() < deadline {
        let desc = client
            .describe_stream_summary()
            .stream_name(&stream.name)
            .send()
            .await?;
        if desc
            .stream_description_summary
            .is_some_and(|s| s.stream_status == aws_sdk_kinesis::types::StreamStatus::Active)
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    bail!("stream {} did not become ACTIVE", stream.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_parse_and_are_consistent() {
        let r = Resources::load().unwrap();
        let usage = r.table("UsageTable").unwrap();
        assert_eq!(usage.hash_key.name, "licenseArn");
        assert_eq!(
            usage.range_key.as_ref().unwrap().name,
            "customerAWSAccountId_dimension_timestamp"
        );
        let gsi = &usage.gsis[0];
        assert_eq!(gsi.name, "metering_pending");
        assert_eq!(gsi.projection.kind, "INCLUDE");
        let subs = r.table("SubscribersTable").unwrap();
        let names: Vec<_> = subs.gsis.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "customerAWSAccountId-index",
                "agreementId-index",
                "deprovisioning-pending-index"
            ]
        );
        // Every env var is unique: each binary reads one name from one variable.
        let mut envs: Vec<&str> = r.tables.iter().map(|t| t.env.as_str()).collect();
        envs.extend(r.queues.iter().map(|q| q.env.as_str()));
        envs.extend(
            r.queues
                .iter()
                .filter_map(|q| q.dlq.as_ref())
                .map(|d| d.env.as_str()),
        );
        envs.extend(r.streams.iter().map(|s| s.env.as_str()));
        let n = envs.len();
        envs.sort();
        envs.dedup();
        assert_eq!(envs.len(), n, "duplicate env var in resources.json");
    }
}
