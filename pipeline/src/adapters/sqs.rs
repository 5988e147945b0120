//! SQS adapter: sending work and cleanup messages.

use crate::error::{PipelineError, Result};
use crate::ports::MessageQueue;
use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

pub use awsmp_contract::limits::sqs::MAX_BATCH_ENTRIES;

/// A queue, by URL.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
}

impl SqsQueue {
    /// The queue at `url`.
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }
}

#[async_trait]
impl MessageQueue for SqsQueue {
    async fn send_all(&self, bodies: &[String]) -> Result<()> {
        for chunk in bodies.chunks(MAX_BATCH_ENTRIES) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, body)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| PipelineError::Sqs {
                    operation: "SendMessageBatch",
                    queue: self.url.clone(),
                    detail: "building the batch".into(),
                    source: Some(Box::new(e)),
                })?;
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| PipelineError::Sqs {
                    operation: "SendMessageBatch",
                    queue: self.url.clone(),
                    detail: "call failed".into(),
                    source: Some(Box::new(e)),
                })?;
            // SendMessageBatch answers 200 with per-entry failures: surface them, never ignore.
            if !out.failed.is_empty() {
                let detail = out
                    .failed
                    .iter()
                    .map(|f| {
                        format!(
                            "entry {} ({}): {}",
                            f.id,
                            f.code,
                            f.message.as_deref().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(PipelineError::Sqs {
                    operation: "SendMessageBatch",
                    queue: self.url.clone(),
                    detail,
                    source: None,
                });
            }
        }
        Ok(())
    }
}
