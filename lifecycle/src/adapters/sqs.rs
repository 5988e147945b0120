//! [`DeadLetters`] over an SQS queue (the subscription queue's DLQ): the event as it came,
//! with its reason as message attributes.

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::MessageAttributeValue;

use crate::error::{LifecycleError, Result};
use crate::ports::DeadLetters;

/// Message attribute carrying the reason code.
pub const REASON_ATTRIBUTE: &str = "reason";
/// Message attribute carrying the detail.
pub const DETAIL_ATTRIBUTE: &str = "detail";
/// SQS message attribute values are bounded by the 256 KiB message size; the detail is cut
/// well below it (our bound).
const MAX_DETAIL_CHARS: usize = 1024;

/// An SQS dead-letter queue.
#[derive(Debug, Clone)]
pub struct SqsDeadLetters {
    client: Client,
    queue_url: String,
}

impl SqsDeadLetters {
    /// Over the queue at `queue_url`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

fn string_attr(v: &str) -> Result<MessageAttributeValue, aws_sdk_sqs::error::BuildError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
}

#[async_trait]
impl DeadLetters for SqsDeadLetters {
    async fn send(&self, body: &str, reason: &str, detail: &str) -> Result<()> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| LifecycleError::Sqs {
            operation: "SendMessage",
            queue: self.queue_url.clone(),
            source,
        };
        let detail: String = detail.chars().take(MAX_DETAIL_CHARS).collect();
        let detail = if detail.is_empty() {
            "-".to_owned()
        } else {
            detail
        };
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_attributes(
                REASON_ATTRIBUTE,
                string_attr(reason).map_err(|e| err(Box::new(e)))?,
            )
            .message_attributes(
                DETAIL_ATTRIBUTE,
                string_attr(&detail).map_err(|e| err(Box::new(e)))?,
            )
            .send()
            .await
            .map_err(|e| err(Box::new(e)))?;
        Ok(())
    }
}
