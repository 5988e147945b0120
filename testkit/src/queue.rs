//! An SQS standard queue with a visibility timeout, redelivery and a redrive policy
//! (`maxReceiveCount` → dead-letter queue), read the way a Lambda SQS event source mapping
//! reads it, with `ReportBatchItemFailures`
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>).

use crate::faults::{Fault, FaultPlan};
use crate::interleave::Interleaver;
use crate::ports::{injected_sqs, preempt};
use async_trait::async_trait;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use awsmp_contract::clock::{Clock, FixedClock};
use awsmp_contract::limits::sqs::MAX_CLEANUP_KEYS_PER_MESSAGE;
use awsmp_pipeline::error::Result;
use awsmp_pipeline::handlers::cleanup::CleanupMessage;
use awsmp_pipeline::ports::MessageQueue;
use chrono::{DateTime, Duration, Utc};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// `maxReceiveCount` of every queue's redrive policy (infra/resources.json).
pub const MAX_RECEIVE_COUNT: u32 = 5;

#[derive(Debug, Clone)]
struct Message {
    body: String,
    receives: u32,
    visible_at: DateTime<Utc>,
}

#[derive(Debug, Default)]
struct State {
    messages: BTreeMap<u64, Message>,
    dead: Vec<String>,
    next_id: u64,
    redeliveries: u64,
}

/// One queue and its dead-letter queue.
#[derive(Debug)]
pub struct SimQueue {
    name: &'static str,
    visibility: Duration,
    state: Mutex<State>,
    clock: Arc<FixedClock>,
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
        Self {
            name,
            visibility,
            state: Mutex::new(State::default()),
            clock,
            faults,
            interleaver,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The queue's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Receive up to `max` visible messages as one SQS event: each becomes invisible for the
    /// visibility timeout; one received `maxReceiveCount` times already moves to the DLQ.
    pub fn receive(&self, max: usize) -> Option<SqsEvent> {
        let now = self.clock.now();
        let visibility = self.visibility;
        let mut s = self.lock();
        let due: Vec<u64> = s
            .messages
            .iter()
            .filter(|(_, m)| m.visible_at <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut records = Vec::new();
        for id in due {
            if records.len() >= max {
                break;
            }
            let m = s.messages.get_mut(&id).expect("listed");
            if m.receives >= MAX_RECEIVE_COUNT {
                let body = m.body.clone();
                s.messages.remove(&id);
                s.dead.push(body);
                continue;
            }
            if m.receives > 0 {
                s.redeliveries += 1;
            }
            let m = s.messages.get_mut(&id).expect("listed");
            m.receives += 1;
            m.visible_at = now + visibility;
            let mut msg = SqsMessage::default();
            msg.message_id = Some(format!("{}-{id}", self.name));
            msg.body = Some(m.body.clone());
            msg.event_source = Some("aws:sqs".into());
            records.push(msg);
        }
        if records.is_empty() {
            return None;
        }
        let mut event = SqsEvent::default();
        event.records = records;
        Some(event)
    }

    /// The mapping's end of an invocation: delete every message not reported failed (a
    /// crashed invocation deletes none; they reappear after the visibility timeout).
    pub fn complete(&self, event: &SqsEvent, response: Option<&SqsBatchResponse>) {
        let Some(response) = response else {
            return;
        };
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        let mut s = self.lock();
        for m in &event.records {
            let id = m.message_id.as_deref().unwrap_or_default();
            if failed.contains(&id) {
                continue;
            }
            if let Some(n) = id.rsplit_once('-').and_then(|(_, n)| n.parse::<u64>().ok()) {
                s.messages.remove(&n);
            }
        }
    }

    /// Messages still in the queue (visible or not).
    pub fn depth(&self) -> usize {
        self.lock().messages.len()
    }

    /// Bodies moved to the dead-letter queue.
    pub fn dead_letters(&self) -> Vec<String> {
        self.lock().dead.clone()
    }

    /// Deliveries of a message after its first.
    pub fn redeliveries(&self) -> u64 {
        self.lock().redeliveries
    }

    /// The earliest instant a message becomes visible.
    pub fn next_visible(&self) -> Option<DateTime<Utc>> {
        self.lock().messages.values().map(|m| m.visible_at).min()
    }

    fn enqueue(&self, bodies: &[String]) {
        let now = self.clock.now();
        let mut s = self.lock();
        for body in bodies {
            let id = s.next_id;
            s.next_id += 1;
            s.messages.insert(
                id,
                Message {
                    body: body.clone(),
                    receives: 0,
                    visible_at: now,
                },
            );
        }
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
        self.enqueue(bodies);
        match fault {
            Some(Fault::LoseResponse | Fault::ApplyThenFail) => Err(injected_sqs(self.name, fault)),
            _ => Ok(()),
        }
    }
}
