//! What the background task keeps per user record and per Kinesis record.

use tokio::time::Instant;

use crate::handoff::Reservation;
use crate::outcome::UndeliveredReason;
use crate::sink::PutEntry;

/// Bookkeeping of one user record (a collapsed one stands for several recorded events).
pub(super) struct UserMeta {
    pub enqueued_at: Instant,
    pub epoch: u64,
    pub constituents: u64,
    /// Buffer bytes it was charged (released with its record's reservation).
    pub bytes: usize,
}

/// What is kept per user record once packed (its bytes are charged to the record).
pub(super) struct UserAck {
    pub enqueued_at: Instant,
    pub epoch: u64,
    pub constituents: u64,
}

/// One Kinesis record on its way.
pub(super) struct KRecord {
    pub entry: PutEntry,
    pub route_hash: u128,
    pub size: usize,
    pub users: Vec<UserAck>,
    /// The buffer bytes of every user record inside: one release per record, not per event.
    pub reservation: Reservation,
    pub attempts: u32,
    pub deadline: Instant,
    pub maybe_delivered: bool,
    pub last_error: Option<String>,
    pub predicted_shard: Option<String>,
}

impl KRecord {
    /// Why the record comes back when its TTL (or its retry policy) runs out.
    pub fn expired(&self) -> UndeliveredReason {
        UndeliveredReason::Expired {
            last_error: self.last_error.clone(),
        }
    }
}
