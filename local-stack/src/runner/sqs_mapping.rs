//! The runner's SQS event source mappings: batches of the work, deprovision-work, cleanup and
//! subscription queues to their Lambdas, the successes deleted and the failures left to
//! reappear, as Lambda's mapping with `ReportBatchItemFailures` does.

use super::{Consumer, DRAIN_TIMEOUT, DrainCount, LOCAL_VISIBILITY_SECS, RECEIVE_BATCH, Runner};
use anyhow::{Context, Result, bail};
use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName,
};
use awsmp_pipeline::handlers::{aggregator, cleanup, handle_sqs_batch};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl Runner {
    /// Deliver queued messages to their handlers, as an SQS event source mapping does, until
    /// every queue is empty (nothing visible, nothing in flight).
    pub async fn drain(&self) -> Result<BTreeMap<String, DrainCount>> {
        let started = Instant::now();
        let mut counts: BTreeMap<String, DrainCount> = BTreeMap::new();
        loop {
            let mut delivered = false;
            for (name, url, consumer) in &self.queues {
                let c = self
                    .deliver_once(url, *consumer)
                    .await
                    .with_context(|| format!("draining {name}"))?;
                let entry = counts.entry(name.clone()).or_default();
                entry.succeeded += c.succeeded;
                entry.failed += c.failed;
                delivered |= c.succeeded + c.failed > 0;
            }
            if !delivered {
                if self.all_empty().await? {
                    return Ok(counts);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if started.elapsed() > DRAIN_TIMEOUT {
                bail!("queues did not drain within {DRAIN_TIMEOUT:?}: {counts:?}");
            }
        }
    }

    async fn deliver_once(&self, url: &str, consumer: Consumer) -> Result<DrainCount> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(RECEIVE_BATCH)
            .visibility_timeout(LOCAL_VISIBILITY_SECS)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(DrainCount::default());
        }
        let (event, handles) = sqs_event(&messages);
        let svc = &self.svc;
        let response = match self.hosted.as_deref() {
            Some(h) => {
                let function = match consumer {
                    Consumer::Aggregator => "aggregator",
                    Consumer::Cleanup => "cleanup",
                    Consumer::Subscription => "subscription",
                };
                h.sqs_batch(function, &event, 1 + usize::from(self.redeliver))
                    .await?
            }
            None => match consumer {
                Consumer::Aggregator => {
                    handle_sqs_batch("aggregator", event, |body| async move {
                        aggregator::aggregate(svc, &body).await.map(drop)
                    })
                    .await
                }
                Consumer::Cleanup => {
                    handle_sqs_batch("cleanup", event, |body| async move {
                        cleanup::cleanup(svc, &body).await.map(drop)
                    })
                    .await
                }
                Consumer::Subscription => match &self.lifecycle {
                    Some(l) => l.handle(event).await,
                    None => bail!("no subscription Lambda on this stack"),
                },
            },
        };
        let failed: std::collections::BTreeSet<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        // As Lambda does with ReportBatchItemFailures: delete the successes, leave the failures
        // to reappear after the visibility timeout (and move to the DLQ after maxReceiveCount).
        let deletes: Vec<DeleteMessageBatchRequestEntry> = handles
            .iter()
            .filter(|(id, _)| !failed.contains(id.as_str()))
            .enumerate()
            .map(|(i, (_, handle))| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
            })
            .collect::<Result<_, _>>()?;
        let succeeded = deletes.len() as u64;
        if !deletes.is_empty() {
            let out = self
                .sqs
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(deletes))
                .send()
                .await?;
            if !out.failed.is_empty() {
                bail!("DeleteMessageBatch failed for {} entries", out.failed.len());
            }
        }
        Ok(DrainCount {
            succeeded,
            failed: failed.len() as u64,
        })
    }

    async fn all_empty(&self) -> Result<bool> {
        for (_, url, _) in &self.queues {
            let attrs = self
                .sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                .send()
                .await?
                .attributes
                .unwrap_or_default();
            let n = |k: QueueAttributeName| {
                attrs
                    .get(&k)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if n(QueueAttributeName::ApproximateNumberOfMessages)
                + n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                > 0
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The Lambda event for received messages, as SQS's event source mapping builds it, and each
/// message's receipt handle by message id.
fn sqs_event(messages: &[aws_sdk_sqs::types::Message]) -> (SqsEvent, BTreeMap<String, String>) {
    let mut event = SqsEvent::default();
    let mut handles = BTreeMap::new();
    for m in messages {
        let mut msg = SqsMessage::default();
        msg.message_id = m.message_id.clone();
        msg.receipt_handle = m.receipt_handle.clone();
        msg.body = m.body.clone();
        msg.attributes = m
            .attributes
            .as_ref()
            .map(|a| {
                a.iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        msg.event_source = Some("aws:sqs".into());
        handles.insert(
            m.message_id.clone().unwrap_or_default(),
            m.receipt_handle.clone().unwrap_or_default(),
        );
        event.records.push(msg);
    }
    (event, handles)
}
