//! An SQS standard queue in memory, on the pipeline's [`Clock`] (a virtual one in a
//! simulation): visibility timeout, redelivery once it lapses, receive counts, a redrive
//! policy's `maxReceiveCount` → dead-letter queue, deletes by receipt handle, and partial
//! `SendMessageBatch` failures.
//!
//! Semantics follow the SQS API reference: a received message stays in the queue, invisible
//! for the visibility timeout
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html>);
//! every receive gives a new receipt handle, and a delete with an older one "succeeds, but the
//! message might not be deleted"
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>)
//! — here it never is, the adversarial reading; a message received `maxReceiveCount` times is
//! moved to the dead-letter queue instead of being delivered again
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>).
//! Delivery order is send order (a standard queue promises none; a simulator reorders on its
//! own).

use super::{Faults, lock};
use crate::adapters::sqs::MAX_BATCH_ENTRIES;
use crate::error::{PipelineError, Result};
use crate::ports::MessageQueue;
use async_trait::async_trait;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use awsmp_contract::clock::{Clock, SystemClock};
use chrono::{DateTime, Duration, Utc};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

/// A queue's default visibility timeout: 30 seconds
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html>).
pub const DEFAULT_VISIBILITY_TIMEOUT_SECONDS: i64 = 30;

pub use awsmp_contract::limits::sqs::MAX_RECEIVE_MESSAGES;

/// One stored message.
#[derive(Debug, Clone)]
struct Message {
    id: String,
    body: String,
    sent_at: DateTime<Utc>,
    receive_count: u32,
    first_received_at: Option<DateTime<Utc>>,
    visible_at: DateTime<Utc>,
    /// The handle of the latest receive; only it deletes the message.
    receipt: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    messages: VecDeque<Message>,
    sent: u64,
    receipts: u64,
    /// Every handle ever issued, with its message's id: tells a stale handle from an
    /// invalid one.
    issued: BTreeMap<String, String>,
    /// Entries of the next sends that fail (`SendMessageBatch`'s `Failed` list).
    failing_entries: usize,
}

/// A redrive policy: after `max_receive_count` receives, a message moves to `dead_letter`.
#[derive(Debug, Clone)]
pub struct Redrive {
    /// `maxReceiveCount`.
    pub max_receive_count: u32,
    /// The dead-letter queue.
    pub dead_letter: Arc<MemoryQueue>,
}

/// What a delete by receipt handle did. SQS answers success to all but `Invalid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The handle was the message's latest: it is gone.
    Deleted,
    /// The message was received again since this handle was issued: it stays.
    Stale,
    /// The message was already deleted (or moved to the dead-letter queue).
    AlreadyGone,
    /// This queue never issued the handle (`ReceiptHandleIsInvalid`).
    Invalid,
}

/// A queue: messages in send order, received with visibility timeouts on a clock.
pub struct MemoryQueue {
    name: String,
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    visibility: Duration,
    redrive: Option<Redrive>,
    /// Faults to inject (`send_all`): the whole send fails and nothing is enqueued.
    pub faults: Faults,
}

impl std::fmt::Debug for MemoryQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("name", &self.name)
            .field("visibility", &self.visibility)
            .field("redrive", &self.redrive)
            .finish_non_exhaustive()
    }
}

impl MemoryQueue {
    /// An empty queue named `name` (the name appears in errors and message ids) on the system
    /// clock, with the default visibility timeout and no redrive policy.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            state: Mutex::new(State::default()),
            clock: Arc::new(SystemClock),
            visibility: Duration::seconds(DEFAULT_VISIBILITY_TIMEOUT_SECONDS),
            redrive: None,
            faults: Faults::default(),
        }
    }

    /// Tell time by `clock` (visibility timeouts, timestamps).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The queue's visibility timeout.
    pub fn with_visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility = timeout;
        self
    }

    /// A redrive policy to `dead_letter` after `max_receive_count` receives (at least 1).
    pub fn with_redrive(mut self, max_receive_count: u32, dead_letter: Arc<MemoryQueue>) -> Self {
        self.redrive = Some(Redrive {
            max_receive_count: max_receive_count.max(1),
            dead_letter,
        });
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bodies still in the queue (visible or in flight), oldest first.
    pub fn messages(&self) -> Vec<String> {
        lock(&self.state)
            .messages
            .iter()
            .map(|m| m.body.clone())
            .collect()
    }

    /// Messages still in the queue (visible or in flight).
    pub fn len(&self) -> usize {
        lock(&self.state).messages.len()
    }

    /// True when no message is left (none visible, none in flight).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages received and not yet deleted whose visibility timeout has not lapsed.
    pub fn in_flight(&self) -> usize {
        let now = self.clock.now();
        lock(&self.state)
            .messages
            .iter()
            .filter(|m| m.visible_at > now)
            .count()
    }

    /// Take every message out of the queue (purge), returning the bodies.
    pub fn take(&self) -> Vec<String> {
        let mut state = lock(&self.state);
        state.messages.drain(..).map(|m| m.body).collect()
    }

    /// Make the next `n` entries sent fail (as entries of `SendMessageBatch`'s `Failed`
    /// list), whatever calls they arrive in.
    pub fn fail_entries(&self, n: usize) {
        lock(&self.state).failing_entries += n;
    }

    /// `ReceiveMessage` with up to `max` (≤ 10) visible messages: each gets a new receipt
    /// handle, one more receive, and is hidden for the visibility timeout. A message already
    /// received `maxReceiveCount` times moves to the dead-letter queue instead.
    pub fn receive_messages(&self, max: usize) -> Vec<SqsMessage> {
        let now = self.clock.now();
        let max = max.min(MAX_RECEIVE_MESSAGES);
        let mut state = lock(&self.state);
        let mut out = Vec::new();
        let mut dead = Vec::new();
        let mut i = 0;
        while i < state.messages.len() && out.len() < max {
            let m = &state.messages[i];
            if m.visible_at > now {
                i += 1;
                continue;
            }
            if let Some(r) = &self.redrive
                && m.receive_count >= r.max_receive_count
            {
                dead.extend(state.messages.remove(i));
                continue;
            }
            state.receipts += 1;
            let receipt = format!("{}-receipt-{}", self.name, state.receipts);
            let id = state.messages[i].id.clone();
            state.issued.insert(receipt.clone(), id);
            let m = &mut state.messages[i];
            m.receive_count += 1;
            m.first_received_at.get_or_insert(now);
            m.visible_at = now + self.visibility;
            m.receipt = Some(receipt);
            out.push(self.to_sqs(m));
            i += 1;
        }
        drop(state);
        if let Some(r) = &self.redrive {
            r.dead_letter.enqueue_moved(dead);
        }
        out
    }

    /// [`receive_messages`](Self::receive_messages) as one SQS event, as an event source
    /// mapping delivers it; finish it with [`complete`](Self::complete).
    pub fn receive_event(&self, max: usize) -> SqsEvent {
        let mut event = SqsEvent::default();
        event.records = self.receive_messages(max);
        event
    }

    /// What the event source mapping does after an invocation that returned `response`
    /// (`ReportBatchItemFailures`): delete every message of `event` not reported failed; the
    /// failed ones stay hidden until their visibility timeout lapses, then redeliver. (After
    /// an invocation error, call nothing: the whole batch redelivers.)
    pub fn complete(&self, event: &SqsEvent, response: &SqsBatchResponse) -> Vec<DeleteOutcome> {
        let failed: BTreeSet<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        event
            .records
            .iter()
            .filter(|m| !failed.contains(m.message_id.as_deref().unwrap_or_default()))
            .filter_map(|m| m.receipt_handle.as_deref())
            .map(|h| self.delete(h))
            .collect()
    }

    /// Take up to `batch_size` visible messages as one SQS event and delete them at once (an
    /// event source mapping whose invocation is assumed to succeed). Message ids are
    /// `{queue}-{n}`, unique per queue.
    pub fn receive(&self, batch_size: usize) -> SqsEvent {
        let now = self.clock.now();
        let mut state = lock(&self.state);
        let mut records = Vec::new();
        let mut i = 0;
        while i < state.messages.len() && records.len() < batch_size {
            if state.messages[i].visible_at > now {
                i += 1;
                continue;
            }
            let mut m = state.messages.remove(i).unwrap_or_else(|| unreachable!());
            m.receive_count += 1;
            records.push(self.to_sqs(&m));
        }
        let mut event = SqsEvent::default();
        event.records = records;
        event
    }

    /// `DeleteMessage` by receipt handle.
    pub fn delete(&self, receipt: &str) -> DeleteOutcome {
        let mut state = lock(&self.state);
        let Some(id) = state.issued.get(receipt).cloned() else {
            return DeleteOutcome::Invalid;
        };
        match state.messages.iter().position(|m| m.id == id) {
            None => DeleteOutcome::AlreadyGone,
            Some(i) if state.messages[i].receipt.as_deref() == Some(receipt) => {
                state.messages.remove(i);
                DeleteOutcome::Deleted
            }
            Some(_) => DeleteOutcome::Stale,
        }
    }

    /// `ChangeMessageVisibility`: hide the message of `receipt` for `timeout` from now (0
    /// makes it visible at once). False when the handle is not the message's latest.
    pub fn change_visibility(&self, receipt: &str, timeout: Duration) -> bool {
        let now = self.clock.now();
        let mut state = lock(&self.state);
        match state
            .messages
            .iter_mut()
            .find(|m| m.receipt.as_deref() == Some(receipt))
        {
            Some(m) => {
                m.visible_at = now + timeout;
                true
            }
            None => false,
        }
    }

    fn to_sqs(&self, m: &Message) -> SqsMessage {
        let mut out = SqsMessage::default();
        out.message_id = Some(m.id.clone());
        out.receipt_handle = m.receipt.clone();
        out.body = Some(m.body.clone());
        out.event_source = Some("aws:sqs".into());
        out.event_source_arn = Some(format!("arn:aws:sqs:us-east-1:000000000000:{}", self.name));
        let attr = |k: &str, v: String| (k.to_owned(), v);
        out.attributes = [
            attr("ApproximateReceiveCount", m.receive_count.to_string()),
            attr("SentTimestamp", m.sent_at.timestamp_millis().to_string()),
            attr(
                "ApproximateFirstReceiveTimestamp",
                m.first_received_at
                    .unwrap_or(m.sent_at)
                    .timestamp_millis()
                    .to_string(),
            ),
        ]
        .into_iter()
        .collect();
        out
    }

    /// Messages moved here from a source queue's redrive: they keep their id, body and receive
    /// count (as SQS and moto keep them), visible at once.
    fn enqueue_moved(&self, moved: Vec<Message>) {
        let now = self.clock.now();
        let mut state = lock(&self.state);
        for m in moved {
            state.messages.push_back(Message {
                visible_at: now,
                receipt: None,
                ..m
            });
        }
    }

    /// Enqueue bodies as `SendMessageBatch` calls of ≤10 entries, as the SQS adapter sends
    /// them: a call with failed entries enqueues its other entries, then the send stops with
    /// an error naming the failed ones (later calls are not made).
    fn send_batches(&self, bodies: &[String]) -> Result<()> {
        let now = self.clock.now();
        let mut state = lock(&self.state);
        for chunk in bodies.chunks(MAX_BATCH_ENTRIES) {
            let mut failed = Vec::new();
            for (i, body) in chunk.iter().enumerate() {
                if state.failing_entries > 0 {
                    state.failing_entries -= 1;
                    failed.push(format!("entry {i} (InternalError): injected"));
                    continue;
                }
                state.sent += 1;
                let id = format!("{}-{}", self.name, state.sent);
                state.messages.push_back(Message {
                    id,
                    body: body.clone(),
                    sent_at: now,
                    receive_count: 0,
                    first_received_at: None,
                    visible_at: now,
                    receipt: None,
                });
            }
            if !failed.is_empty() {
                return Err(PipelineError::Sqs {
                    operation: "SendMessageBatch",
                    queue: self.name.clone(),
                    detail: failed.join("; "),
                    source: None,
                });
            }
        }
        Ok(())
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
        self.send_batches(bodies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_contract::clock::FixedClock;

    fn clock() -> FixedClock {
        FixedClock::new("2026-11-30T12:00:00Z".parse().unwrap())
    }

    fn queue(clock: &FixedClock, dlq: &Arc<MemoryQueue>) -> MemoryQueue {
        MemoryQueue::new("work")
            .with_clock(Arc::new(clock.clone()))
            .with_visibility_timeout(Duration::seconds(120))
            .with_redrive(2, dlq.clone())
    }

    fn bodies(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    #[tokio::test]
    async fn a_received_message_is_hidden_until_its_visibility_timeout_lapses() {
        let (c, dlq) = (clock(), Arc::new(MemoryQueue::new("dlq")));
        let q = queue(&c, &dlq);
        q.send_all(&bodies(1)).await.unwrap();
        let first = q.receive_messages(10);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].attributes["ApproximateReceiveCount"], "1");
        assert!(q.receive_messages(10).is_empty());
        assert_eq!((q.len(), q.in_flight()), (1, 1));
        c.advance(Duration::seconds(119));
        assert!(q.receive_messages(10).is_empty());
        c.advance(Duration::seconds(1));
        let again = q.receive_messages(10);
        assert_eq!(again[0].message_id, first[0].message_id);
        assert_ne!(again[0].receipt_handle, first[0].receipt_handle);
        assert_eq!(again[0].attributes["ApproximateReceiveCount"], "2");
    }

    #[tokio::test]
    async fn a_stale_receipt_handle_deletes_nothing() {
        let (c, dlq) = (clock(), Arc::new(MemoryQueue::new("dlq")));
        let q = queue(&c, &dlq);
        q.send_all(&bodies(1)).await.unwrap();
        let old = q.receive_messages(1)[0].receipt_handle.clone().unwrap();
        c.advance(Duration::seconds(121));
        let new = q.receive_messages(1)[0].receipt_handle.clone().unwrap();
        assert_eq!(q.delete(&old), DeleteOutcome::Stale);
        assert_eq!(q.len(), 1);
        assert_eq!(q.delete("nonsense"), DeleteOutcome::Invalid);
        assert_eq!(q.delete(&new), DeleteOutcome::Deleted);
        assert_eq!(q.delete(&new), DeleteOutcome::AlreadyGone);
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn after_max_receive_count_a_message_moves_to_the_dead_letter_queue() {
        let (c, dlq) = (clock(), Arc::new(MemoryQueue::new("dlq")));
        let q = queue(&c, &dlq);
        q.send_all(&bodies(2)).await.unwrap();
        for _ in 0..2 {
            assert_eq!(q.receive_messages(10).len(), 2);
            c.advance(Duration::seconds(120));
        }
        assert!(q.receive_messages(10).is_empty());
        assert!(q.is_empty());
        assert_eq!(dlq.messages(), ["m0", "m1"]);
        let moved = dlq.receive_messages(10);
        assert_eq!(moved[0].attributes["ApproximateReceiveCount"], "3");
        assert_eq!(moved[0].message_id.as_deref(), Some("work-1"));
    }

    #[tokio::test]
    async fn reported_failures_redeliver_and_the_rest_are_deleted() {
        let (c, dlq) = (clock(), Arc::new(MemoryQueue::new("dlq")));
        let q = queue(&c, &dlq);
        q.send_all(&bodies(3)).await.unwrap();
        let event = q.receive_event(10);
        let mut response = SqsBatchResponse::default();
        response.add_failure(event.records[1].message_id.clone().unwrap());
        let outcomes = q.complete(&event, &response);
        assert_eq!(outcomes, [DeleteOutcome::Deleted, DeleteOutcome::Deleted]);
        assert_eq!(q.messages(), ["m1"]);
        assert!(q.receive_event(10).records.is_empty());
        c.advance(Duration::seconds(120));
        assert_eq!(q.receive_event(10).records[0].body.as_deref(), Some("m1"));
    }

    #[tokio::test]
    async fn a_partial_batch_failure_is_an_error_naming_the_failed_entries() {
        let q = MemoryQueue::new("q");
        q.fail_entries(1);
        let e = q.send_all(&bodies(15)).await.unwrap_err();
        let PipelineError::Sqs { detail, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(detail.contains("entry 0"), "{detail}");
        // The first call's other nine entries were sent; the second call was not made.
        assert_eq!(q.messages(), bodies(10)[1..].to_vec());
        q.send_all(&bodies(2)).await.unwrap();
        assert_eq!(q.len(), 11);
    }

    #[tokio::test]
    async fn visibility_can_be_changed_by_the_latest_handle_only() {
        let (c, dlq) = (clock(), Arc::new(MemoryQueue::new("dlq")));
        let q = queue(&c, &dlq);
        q.send_all(&bodies(1)).await.unwrap();
        let h = q.receive_messages(1)[0].receipt_handle.clone().unwrap();
        assert!(q.change_visibility(&h, Duration::zero()));
        let h2 = q.receive_messages(1)[0].receipt_handle.clone().unwrap();
        assert!(!q.change_visibility(&h, Duration::zero()));
        assert!(q.change_visibility(&h2, Duration::zero()));
        // Received twice already: the next receive redrives it (maxReceiveCount 2).
        assert!(q.receive_messages(1).is_empty());
        assert_eq!(dlq.len(), 1);
    }
}
