//! What one invocation did: the handler's JSON result (what `awsmp-local invoke meter-ingest`
//! prints), and the per-module metrics it emits.

use std::collections::BTreeMap;

use awsmp_aws::emf::{Metric, MetricsSink};
use awsmp_contract::metrics;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// The fate of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// On the usage stream.
    Accepted,
    /// Already applied (a Lambda async retry, a module's replay, a repeat in the payload).
    Duplicate,
    /// Not billed, kept with its reason until released.
    Held,
    /// Refused for good, kept with its reason.
    Rejected,
}

/// One event's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventResult {
    /// The module's event id.
    pub event_id: String,
    /// What became of it.
    pub outcome: Outcome,
    /// Reason code, when held or rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// Detail, when held or rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The id the consumer sees, when accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_event_id: Option<String>,
}

/// One invocation's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestReport {
    /// The invoked ARN.
    pub invoked_arn: String,
    /// The module label (the ARN's qualifier).
    pub module: String,
    /// The invocation's request id.
    pub request_id: String,
    /// The receive time (the billing time's authority).
    pub received_at: DateTime<Utc>,
    /// Events accepted.
    pub accepted: usize,
    /// Events already applied.
    pub duplicates: usize,
    /// Events held.
    pub held: usize,
    /// Events rejected.
    pub rejected: usize,
    /// Every event, in payload order.
    pub events: Vec<EventResult>,
}

impl IngestReport {
    /// A report of `events`, counted.
    pub fn new(
        invoked_arn: &str,
        module: &str,
        request_id: &str,
        received_at: DateTime<Utc>,
        events: Vec<EventResult>,
    ) -> Self {
        let count = |o: Outcome| events.iter().filter(|e| e.outcome == o).count();
        Self {
            invoked_arn: invoked_arn.to_owned(),
            module: module.to_owned(),
            request_id: request_id.to_owned(),
            received_at,
            accepted: count(Outcome::Accepted),
            duplicates: count(Outcome::Duplicate),
            held: count(Outcome::Held),
            rejected: count(Outcome::Rejected),
            events,
        }
    }

    /// Emit the module's metrics: events received, accepted, dedup hits, rejects and holds by
    /// reason (docs/operations.md).
    pub fn emit(&self, sink: &MetricsSink) {
        let module = || self.module.clone();
        let counted = |name, n: usize| {
            if n > 0 {
                sink.emit(Metric::counts(name, n as u64).with(metrics::MODULE, module()));
            }
        };
        counted(metrics::INGEST_EVENTS_RECEIVED, self.events.len());
        counted(metrics::INGEST_EVENTS_ACCEPTED, self.accepted);
        counted(metrics::INGEST_DEDUP_HIT, self.duplicates);
        let mut by_reason: BTreeMap<(bool, &str), u64> = BTreeMap::new();
        for e in &self.events {
            if let (Some(r), true) = (
                e.reason,
                matches!(e.outcome, Outcome::Held | Outcome::Rejected),
            ) {
                *by_reason
                    .entry((e.outcome == Outcome::Held, r))
                    .or_default() += 1;
            }
        }
        for ((held, reason), n) in by_reason {
            let name = if held {
                metrics::INGEST_EVENT_HELD
            } else {
                metrics::INGEST_EVENT_REJECTED
            };
            sink.emit(
                Metric::counts(name, n)
                    .with(metrics::MODULE, module())
                    .with(metrics::REASON, reason),
            );
        }
    }
}
