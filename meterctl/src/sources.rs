//! What the ledger reads for one group-hour, summed from the stores: the raw rows, the
//! consumer's rejections, the aggregated record and the audit trail. Pure summaries; the
//! reading is in `crate::read`.

use crate::trail::TrailRecord;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::status::RawStatus;
use awsmp_pipeline::ports::AggregatedItem;
use serde::Serialize;
use std::collections::BTreeMap;

/// The raw rows of one group-hour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RowSummary {
    /// Rows read.
    pub rows: u32,
    /// Their quantity (every row, whatever its status).
    pub quantity: u64,
    /// Rows still pending (`meteringPending` set).
    pub pending_rows: u32,
    /// Their quantity.
    pub pending_quantity: u64,
    /// Rows finalized `Aggregated`.
    pub aggregated_rows: u32,
    /// What was folded from them (`foldedQuantity` when a row grew after the fold, else the
    /// row's quantity).
    pub folded_quantity: u64,
    /// Late usage recorded on folded rows (`lateQuantity`).
    pub late_quantity: u64,
    /// Quantity of rows finalized with another status, by `status:reason`.
    pub terminal: BTreeMap<String, u64>,
}

impl RowSummary {
    /// Add one row: its quantity, status, reason, and `foldedQuantity` / `lateQuantity`.
    pub fn add(
        &mut self,
        quantity: u64,
        pending: bool,
        status: Option<RawStatus>,
        reason: &str,
        late_quantity: u64,
    ) {
        self.rows += 1;
        self.quantity += quantity;
        if pending {
            self.pending_rows += 1;
            self.pending_quantity += quantity;
            return;
        }
        match status {
            Some(RawStatus::Aggregated) => {
                self.aggregated_rows += 1;
                self.late_quantity += late_quantity;
                self.folded_quantity += quantity.saturating_sub(late_quantity);
            }
            Some(other) => {
                *self
                    .terminal
                    .entry(format!("{}:{reason}", other.as_str()))
                    .or_default() += quantity;
            }
            // Neither pending nor stamped: a finalized row whose stamp is missing.
            None => *self.terminal.entry("Unstamped".into()).or_default() += quantity,
        }
    }
}

/// Everything the ledger knows of one group-hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourSources {
    /// The group-hour.
    pub group: GroupKey,
    /// Its raw rows.
    pub rows: RowSummary,
    /// Quantity the consumer refused for it, by reason (the rejected-events store; late usage
    /// is `LateUsage`).
    pub consumer_rejected: BTreeMap<String, u64>,
    /// Its aggregated record.
    pub record: Option<AggregatedItem>,
    /// Every trail record of its key.
    pub trail: Vec<TrailRecord>,
}

impl HourSources {
    /// Nothing known yet of `group`.
    pub fn new(group: GroupKey) -> Self {
        Self {
            group,
            rows: RowSummary::default(),
            consumer_rejected: BTreeMap::new(),
            record: None,
            trail: Vec::new(),
        }
    }
}

/// Group `trail` by group-hour.
pub fn trail_by_group(trail: Vec<TrailRecord>) -> BTreeMap<GroupKey, Vec<TrailRecord>> {
    let mut out: BTreeMap<GroupKey, Vec<TrailRecord>> = BTreeMap::new();
    for r in trail {
        out.entry(r.group.clone()).or_default().push(r);
    }
    out
}
