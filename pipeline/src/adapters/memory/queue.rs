//! An SQS queue in memory.

use super::{Faults, lock};
use crate::error::{PipelineError, Result};
use crate::ports::MessageQueue;
use async_trait::async_trait;
use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use std::sync::Mutex;

/// A queue: sent bodies in order, handed to a consumer as SQS events.
#[derive(Debug)]
pub struct MemoryQueue {
    name: String,
    messages: Mutex<Vec<String>>,
    sent: Mutex<u64>,
    /// Faults to inject (`send_all`): the whole send fails and nothing is enqueued.
    pub faults: Faults,
}

impl MemoryQueue {
    /// An empty queue named `name` (the name appears in errors and message ids).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            messages: Mutex::new(Vec::new()),
            sent: Mutex::new(0),
            faults: Faults::default(),
        }
    }

    /// The bodies waiting, oldest first.
    pub fn messages(&self) -> Vec<String> {
        lock(&self.messages).clone()
    }

    /// Take every waiting body.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.messages))
    }

    /// Take up to `batch_size` waiting bodies as one SQS event, as an event source mapping
    /// delivers them (message ids `{queue}-{n}`, unique per queue).
    pub fn receive(&self, batch_size: usize) -> SqsEvent {
        let mut messages = lock(&self.messages);
        let n = batch_size.min(messages.len());
        let bodies: Vec<String> = messages.drain(..n).collect();
        drop(messages);
        let mut sent = lock(&self.sent);
        let records = bodies
            .into_iter()
            .map(|body| {
                *sent += 1;
                let mut m = SqsMessage::default();
                m.message_id = Some(format!("{}-{}", self.name, *sent));
                m.body = Some(body);
                m.event_source = Some("aws:sqs".into());
                m
            })
            .collect();
        let mut event = SqsEvent::default();
        event.records = records;
        event
    }
}

#[async_trait]
impl MessageQueue for MemoryQueue {
    async fn send_all(&self, bodies: &[String]) -> Result<()> {
        if let Some(fault) = self.faults.take("send_all", "RequestThrottled") {
            return Err(PipelineError::Sqs {
                operation: "SendMessageBatch",
                queue: self.name.clone(),
                detail: "call failed".into(),
                source: Some(Box::new(fault)),
            });
        }
        lock(&self.messages).extend_from_slice(bodies);
        Ok(())
    }
}
