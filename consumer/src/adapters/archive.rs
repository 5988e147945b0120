//! The billing archive over S3 (`PutObject` into the Object-Lock bucket of
//! `infra/resources.json`, `BillingArchiveBucket`), and in memory. Reading back (every object,
//! each event once) is here too: the reconciliation tests and an operator use it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use awsmp_aws::dynamodb::is_retryable;
use base64::Engine;
use md5::{Digest, Md5};

use crate::archive::{
    ArchiveObject, ArchivedEvent, BillingArchive, dedup_by_event_id, parse_object,
};
use crate::error::{ConsumerError, Result};

/// The store name in errors.
const STORE: &str = "billing archive";

fn store_err(e: impl std::error::Error + Send + Sync + 'static, retryable: bool) -> ConsumerError {
    ConsumerError::Store {
        store: STORE,
        source: Box::new(e),
        retryable,
    }
}

/// The archive bucket.
#[derive(Debug, Clone)]
pub struct S3BillingArchive {
    client: Client,
    bucket: String,
}

impl S3BillingArchive {
    /// Over `bucket`.
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    /// Every archived event (the current version of every object under `dt=`), each
    /// `eventId` once.
    pub async fn read_all(&self) -> Result<Vec<ArchivedEvent>> {
        let mut events = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix("dt=")
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| {
                    let r = is_retryable(&e);
                    store_err(e, r)
                })?;
            for o in page.contents() {
                let Some(key) = o.key() else { continue };
                let body = self
                    .client
                    .get_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| {
                        let r = is_retryable(&e);
                        store_err(e, r)
                    })?
                    .body
                    .collect()
                    .await
                    .map_err(|e| store_err(e, true))?
                    .into_bytes();
                events.extend(parse_object(&body).map_err(|e| store_err(e, false))?);
            }
            token = page.next_continuation_token().map(str::to_owned);
            if token.is_none() {
                return Ok(dedup_by_event_id(events));
            }
        }
    }
}

#[async_trait]
impl BillingArchive for S3BillingArchive {
    async fn put(&self, object: &ArchiveObject) -> Result<()> {
        // Object Lock buckets require an integrity header on PutObject
        // (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock-managing.html).
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&object.body));
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&object.key)
            .content_type("application/x-ndjson")
            .content_md5(md5)
            .body(ByteStream::from(object.body.clone()))
            .send()
            .await
            .map_err(|e| {
                let r = is_retryable(&e);
                store_err(e, r)
            })?;
        Ok(())
    }
}

/// The archive in memory: objects by key (a put of the same key replaces it, as S3's current
/// version does).
#[derive(Debug, Clone, Default)]
pub struct MemoryBillingArchive {
    objects: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl MemoryBillingArchive {
    /// An empty archive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keys written.
    pub fn keys(&self) -> Vec<String> {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Every archived event, each `eventId` once.
    pub fn read_all(&self) -> Vec<ArchivedEvent> {
        let objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        let events = objects
            .values()
            .flat_map(|b| parse_object(b).unwrap_or_default())
            .collect();
        dedup_by_event_id(events)
    }
}

#[async_trait]
impl BillingArchive for MemoryBillingArchive {
    async fn put(&self, object: &ArchiveObject) -> Result<()> {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(object.key.clone(), object.body.clone());
        Ok(())
    }
}
