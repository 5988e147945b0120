//! The simulation's SQS queues: the pipeline's in-memory SQS model (`MemoryQueue`,
//! `pipeline/src/adapters/memory/queue.rs`, the one the queue contract runs against moto) with
//! the deployed visibility timeout and redrive policy (`maxReceiveCount` → dead-letter queue),
//! read the way a Lambda SQS event source mapping reads it, with `ReportBatchItemFailures`
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>), its sends
//! under the fault plan.

use crate::faults::{Fault, FaultPlan};
use crate::interleave::Interleaver;
use crate::ports::{injected_sqs, preempt};
use async_trait::async_trait;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_contract::clock::FixedClock;
use awsmp_contract::limits::sqs::MAX_CLEANUP_KEYS_PER_MESSAGE;
use awsmp_pipeline::adapters::memory::MemoryQueue;
use awsmp_pipeline::error::Result;
use awsmp_pipeline::handlers::cleanup::CleanupMessage;
use awsmp_pipeline::ports::MessageQueue;
use chrono::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `maxReceiveCount` of every queue's redrive policy (infra/resources.json).
pub const MAX_RECEIVE_COUNT: u32 = 5;

/// One queue and its dead-letter queue.
#[derive(Debug)]
pub struct SimQueue {
    name: &'static str,
    queue: MemoryQueue,
    dead: Arc<MemoryQueue>,
    redeliveries: AtomicU64,
    faults: Arc<FaultPlan>,
    interleaver: Arc<Interleaver>,
}

impl SimQueue {
    /// On the cleanup queue: count each message that holds a full
    /// [`MAX_CLEANUP_KEYS_PER_MESSAGE`] keys (a group whose rows needed more than one).
    fn count_full_cleanup_messages(&self, bodies: &[String]) {
        if self.name != "cleanup" {
            return;
        }
        for body in bodies {
            let keys = serde_json::from_str::<CleanupMessage>(body).map_or(0, |m| m.keys.len());
            if keys == MAX_CLEANUP_KEYS_PER_MESSAGE {
                self.faults.count("limit-cleanup-chunk");
            }
        }
    }

    /// An empty queue whose messages stay invisible `visibility` after each receive.
    pub fn new(
        name: &'static str,
        visibility: Duration,
        clock: Arc<FixedClock>,
        faults: Arc<FaultPlan>,
        interleaver: Arc<Interleaver>,
    ) -> Self {
        let dead = Arc::new(MemoryQueue::new(format!("{name}-dlq")).with_clock(clock.clone()));
        let queue = MemoryQueue::new(name)
            .with_clock(clock)
            .with_visibility_timeout(visibility)
            .with_redrive(MAX_RECEIVE_COUNT, dead.clone());
        Self {
            name,
            queue,
            dead,
            redeliveries: AtomicU64::new(0),
            faults,
            interleaver,
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Receive up to `max` visible messages as one SQS event: each becomes invisible for the
    /// visibility timeout; one received `maxReceiveCount` times already moves to the DLQ.
    pub fn receive(&self, max: usize) -> Option<SqsEvent> {
        let event = self.queue.receive_event(max);
        let again = event
            .records
            .iter()
            .filter(|m| {
                m.attributes
                    .get("ApproximateReceiveCount")
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n > 1)
            })
            .count();
        self.redeliveries.fetch_add(again as u64, Ordering::Relaxed);
        (!event.records.is_empty()).then_some(event)
    }

    /// The mapping's end of an invocation: delete every message not reported failed (a
    /// crashed invocation deletes none; they reappear after the visibility timeout). A
    /// message received again meanwhile keeps its newer receipt, and the old one deletes
    /// nothing (`MemoryQueue::delete`).
    pub fn complete(&self, event: &SqsEvent, response: Option<&SqsBatchResponse>) {
        if let Some(response) = response {
            self.queue.complete(event, response);
        }
    }

    /// Messages still in the queue (visible or not).
    pub fn depth(&self) -> usize {
        self.queue.len()
    }

    /// Bodies moved to the dead-letter queue.
    pub fn dead_letters(&self) -> Vec<String> {
        self.dead.messages()
    }

    /// Deliveries of a message after its first.
    pub fn redeliveries(&self) -> u64 {
        self.redeliveries.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl MessageQueue for SimQueue {
    async fn send_all(&self, bodies: &[String]) -> Result<()> {
        let key = bodies.first().map_or("", String::as_str);
        let decided = self.faults.call(self.name, key, true);
        if decided.stopped {
            return Err(injected_sqs(self.name, Some(Fault::Crash)));
        }
        crate::ports::yield_times(decided.yields).await;
        let fault = decided.fault;
        match fault {
            Some(Fault::Throttle | Fault::FailBeforeApply | Fault::Crash) => {
                return Err(injected_sqs(self.name, fault));
            }
            Some(Fault::Preempt) => preempt(&self.interleaver, self.name).await,
            _ => {}
        }
        self.count_full_cleanup_messages(bodies);
        self.queue.send_all(bodies).await?;
        match fault {
            Some(Fault::LoseResponse | Fault::ApplyThenFail) => Err(injected_sqs(self.name, fault)),
            _ => Ok(()),
        }
    }
}
