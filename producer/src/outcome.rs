//! What the producer hands back: undelivered events, why, and what `flush()`/`shutdown()` return.

use std::sync::Arc;

use awsmp_contract::event::Event;

/// Why events came back undelivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UndeliveredReason {
    /// The record TTL ran out (or the retry policy's `max_attempts` were used up) before
    /// Kinesis acknowledged the event.
    Expired {
        /// The last failure seen (throttling, transient error…), if any attempt was made.
        last_error: Option<String>,
    },
    /// Kinesis refused the records permanently (access denied, stream missing, …).
    Rejected {
        /// Error code.
        code: String,
        /// Error message.
        message: String,
    },
}

impl UndeliveredReason {
    /// Stable reason code: `RecordTtlExpired` or `Rejected`.
    pub fn code(&self) -> &'static str {
        match self {
            UndeliveredReason::Expired { .. } => "RecordTtlExpired",
            UndeliveredReason::Rejected { .. } => "Rejected",
        }
    }
}

/// An event the producer could not deliver, handed back to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    /// The event as it was sent (a collapsed event stands for `constituents` recorded ones).
    pub event: Event,
    /// Its partition key.
    pub partition_key: String,
    /// Why it came back.
    pub reason: UndeliveredReason,
    /// PutRecords attempts made.
    pub attempts: u32,
    /// A call carrying it may have been applied although no success was seen (lost response):
    /// re-sending it may create a duplicate, which downstream de-duplication must absorb.
    pub maybe_delivered: bool,
    /// Recorded events this one stands for (1 unless collapsed).
    pub constituents: usize,
}

/// What `flush()` or `shutdown()` could not deliver.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FlushOutcome {
    /// Events handed back since the last flush (empty when everything was delivered or an
    /// undelivered callback is installed).
    pub undelivered: Vec<Undelivered>,
}

impl FlushOutcome {
    /// True when every event was delivered.
    pub fn is_complete(&self) -> bool {
        self.undelivered.is_empty()
    }

    /// Recorded events not delivered (collapsed events count their constituents).
    pub fn undelivered_events(&self) -> usize {
        self.undelivered.iter().map(|u| u.constituents).sum()
    }
}

/// Receives undelivered events as soon as they are known (instead of holding them for the next
/// `flush()`). Runs on the producer's task: keep it short (e.g. send to a channel).
pub type UndeliveredCallback = Arc<dyn Fn(Vec<Undelivered>) + Send + Sync>;
