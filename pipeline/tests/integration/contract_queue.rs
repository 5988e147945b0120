//! The SQS queue contract, run against the in-memory queue (plain `cargo test`) and SQS on the
//! local stack (moto; `#[ignore]`d, `scripts/test` runs it) — the `MessageQueue` port's sends
//! plus what the event source mapping does with the queue: a received message is hidden until
//! its visibility lapses and then redelivered under the same id with a new receipt handle and
//! a higher receive count; the latest handle deletes it; after `maxReceiveCount` receives the
//! redrive policy moves it to the dead-letter queue. The stack queue is a fresh pair made with
//! the deployed work queue's visibility timeout and `maxReceiveCount`.
//!
//! Emulator gap, documented rather than asserted: a delete with an older receipt handle
//! "succeeds, but the message might not be deleted"
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>).
//! moto deletes it; the memory queue never does (the reading a consumer must survive). The
//! contract asserts only what both must do: the call succeeds, and the latest handle deletes.
//!
//! Run against the stack: `awsmp-local up && set -a && . $AWSMP_LOCAL_DIR/env && set +a &&
//! cargo test -p awsmp-pipeline --test integration contract_queue:: -- --include-ignored`

use crate::contract_support;

use async_trait::async_trait;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use awsmp_contract::clock::FixedClock;
use awsmp_pipeline::adapters::memory::{
    MemoryQueue, PIPELINE_QUEUE_MAX_RECEIVE_COUNT, PIPELINE_QUEUE_VISIBILITY_SECONDS,
};
use awsmp_pipeline::adapters::sqs::SqsQueue;
use awsmp_pipeline::ports::MessageQueue;
use contract_support::*;
use std::collections::BTreeSet;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct Received {
    id: String,
    receipt: String,
    body: String,
    receive_count: u32,
}

/// A queue under test: the port, plus the receive side the event source mapping uses.
#[async_trait]
trait QueueUnderTest: Send + Sync {
    fn port(&self) -> &dyn MessageQueue;
    fn max_receive_count(&self) -> u32;
    async fn receive(&self) -> Vec<Received>;
    async fn delete(&self, receipt: &str);
    async fn make_visible(&self, receipt: &str);
    async fn dead_letters(&self) -> Vec<String>;
}

struct Memory {
    queue: MemoryQueue,
    dlq: Arc<MemoryQueue>,
}

#[async_trait]
impl QueueUnderTest for Memory {
    fn port(&self) -> &dyn MessageQueue {
        &self.queue
    }
    fn max_receive_count(&self) -> u32 {
        PIPELINE_QUEUE_MAX_RECEIVE_COUNT
    }
    async fn receive(&self) -> Vec<Received> {
        self.queue
            .receive_messages(10)
            .into_iter()
            .map(|m| Received {
                id: m.message_id.unwrap_or_default(),
                receipt: m.receipt_handle.unwrap_or_default(),
                body: m.body.unwrap_or_default(),
                receive_count: m.attributes["ApproximateReceiveCount"].parse().unwrap(),
            })
            .collect()
    }
    async fn delete(&self, receipt: &str) {
        self.queue.delete(receipt);
    }
    async fn make_visible(&self, receipt: &str) {
        assert!(
            self.queue
                .change_visibility(receipt, chrono::Duration::zero())
        );
    }
    async fn dead_letters(&self) -> Vec<String> {
        self.dlq.messages()
    }
}

struct Sqs {
    port: SqsQueue,
    client: aws_sdk_sqs::Client,
    url: String,
    dlq_url: String,
    max_receive_count: u32,
}

impl Sqs {
    /// A fresh queue and dead-letter queue configured like the deployed work queue.
    async fn create(run: &str) -> Self {
        let client = sqs().await;
        let work = stack_var("AWSMP_WORK_QUEUE_URL");
        let attrs = client
            .get_queue_attributes()
            .queue_url(&work)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let attrs = attrs.attributes.unwrap_or_default();
        let visibility = attrs[&QueueAttributeName::VisibilityTimeout].clone();
        let redrive: serde_json::Value =
            serde_json::from_str(&attrs[&QueueAttributeName::RedrivePolicy]).unwrap();
        let max_receive_count = redrive["maxReceiveCount"]
            .as_u64()
            .or_else(|| redrive["maxReceiveCount"].as_str()?.parse().ok())
            .unwrap();
        let create = |name: String| client.create_queue().queue_name(name);
        let dlq_url = create(format!("awsmp-contract-{run}-dlq"))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        let dlq_arn = client
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap()[&QueueAttributeName::QueueArn]
            .clone();
        let policy = serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count});
        let url = create(format!("awsmp-contract-{run}"))
            .attributes(QueueAttributeName::VisibilityTimeout, visibility)
            .attributes(QueueAttributeName::RedrivePolicy, policy.to_string())
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        Self {
            port: SqsQueue::new(client.clone(), &url),
            client,
            url,
            dlq_url,
            max_receive_count: u32::try_from(max_receive_count).unwrap(),
        }
    }

    async fn delete_queues(&self) {
        for url in [&self.url, &self.dlq_url] {
            self.client
                .delete_queue()
                .queue_url(url)
                .send()
                .await
                .unwrap();
        }
    }

    async fn receive_from(&self, url: &str) -> Vec<Received> {
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .unwrap();
        out.messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| Received {
                receive_count: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_default(),
                id: m.message_id.unwrap_or_default(),
                receipt: m.receipt_handle.unwrap_or_default(),
                body: m.body.unwrap_or_default(),
            })
            .collect()
    }
}

#[async_trait]
impl QueueUnderTest for Sqs {
    fn port(&self) -> &dyn MessageQueue {
        &self.port
    }
    fn max_receive_count(&self) -> u32 {
        self.max_receive_count
    }
    async fn receive(&self) -> Vec<Received> {
        self.receive_from(&self.url).await
    }
    async fn delete(&self, receipt: &str) {
        let call = self.client.delete_message().queue_url(&self.url);
        call.receipt_handle(receipt).send().await.unwrap();
    }
    async fn make_visible(&self, receipt: &str) {
        let call = self.client.change_message_visibility().queue_url(&self.url);
        call.receipt_handle(receipt)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    async fn dead_letters(&self) -> Vec<String> {
        let got = self.receive_from(&self.dlq_url).await;
        got.into_iter().map(|m| m.body).collect()
    }
}

/// Receive until a receive returns nothing.
async fn receive_all(q: &dyn QueueUnderTest) -> Vec<Received> {
    let mut all = Vec::new();
    loop {
        let got = q.receive().await;
        if got.is_empty() {
            return all;
        }
        all.extend(got);
    }
}

async fn contract(q: &dyn QueueUnderTest) {
    // GIVEN twelve messages (two SendMessageBatch calls).
    let bodies: Vec<String> = (0..12).map(|i| format!("body-{i}")).collect();
    q.port().send_all(&bodies).await.unwrap();
    q.port().send_all(&[]).await.unwrap();
    let first = receive_all(q).await;
    let got: BTreeSet<&str> = first.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(got, bodies.iter().map(String::as_str).collect());
    assert!(first.iter().all(|m| m.receive_count == 1));
    assert!(
        q.receive().await.is_empty(),
        "received messages are in flight"
    );
    // WHEN one's visibility lapses THEN it redelivers: same id, new handle, count 2.
    let m0 = first[0].clone();
    q.make_visible(&m0.receipt).await;
    let again = q.receive().await;
    assert_eq!(again.len(), 1);
    assert_eq!(
        (&again[0].id, &again[0].body, again[0].receive_count),
        (&m0.id, &m0.body, 2)
    );
    assert_ne!(again[0].receipt, m0.receipt);
    q.delete(&m0.receipt).await; // stale: succeeds; whether it deletes is the gap above
    q.delete(&again[0].receipt).await;
    for m in &first[2..] {
        q.delete(&m.receipt).await;
    }
    // Only the second message is left, in flight.
    let m1 = first[1].clone();
    q.make_visible(&m1.receipt).await;
    let mut last = receive_all(q).await;
    assert_eq!(last.len(), 1, "every deleted message is gone");
    assert_eq!(last[0].id, m1.id);
    // Received maxReceiveCount times, it moves to the dead-letter queue on the next receive.
    while last[0].receive_count < q.max_receive_count() {
        q.make_visible(&last[0].receipt).await;
        last = q.receive().await;
        assert_eq!(last.len(), 1);
    }
    q.make_visible(&last[0].receipt).await;
    assert!(q.receive().await.is_empty(), "redriven, not delivered");
    assert_eq!(q.dead_letters().await, [m1.body]);
}

#[tokio::test]
async fn the_memory_queue_keeps_the_contract() {
    let clock = Arc::new(FixedClock::new(now()));
    let dlq = Arc::new(MemoryQueue::new("dlq").with_clock(clock.clone()));
    let queue = MemoryQueue::new("work")
        .with_clock(clock)
        .with_visibility_timeout(chrono::Duration::seconds(PIPELINE_QUEUE_VISIBILITY_SECONDS))
        .with_redrive(PIPELINE_QUEUE_MAX_RECEIVE_COUNT, dlq.clone());
    contract(&Memory { queue, dlq }).await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn sqs_on_the_local_stack_keeps_the_contract() {
    let q = Sqs::create(&run_id()).await;
    contract(&q).await;
    q.delete_queues().await;
}
