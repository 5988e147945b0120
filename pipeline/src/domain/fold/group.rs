//! The streamed fold over one group's rows: membership, the row checks, the sums, the
//! group-level checks, and the outcome.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use super::RowView;
use super::allocations::TagSetMerge;
use super::checks::{RowChecks, RowFacts};
use super::compact::{CompactRow, UsageRow};
use super::conforming::Conforming;
use super::membership::{MemberPrefix, Membership, membership};
use super::overflow::{Overflow, split_at_api_maximum};
use super::seconds::{SecondQuantities, SecondSet};
use awsmp_contract::DomainError;
use awsmp_contract::keys::{GroupKey, Identity, RowKey};
use awsmp_contract::limits::marketplace::MAX_ALLOCATIONS_PER_RECORD;
use awsmp_contract::row::{Allocation, RawUsageRow};
use awsmp_contract::status::{RejectReason, aggregated_reason};
use awsmp_contract::time::{TimeConfig, is_zero_finalize_edge};

/// One valid group, ready for the conditional put (the commit point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatedRecord {
    /// The group (license / product code, account / customer identifier, dimension, hour).
    pub group: GroupKey,
    /// Quantity to bill: the exact sum of the rows' quantities, or [`MAX_USAGE_QUANTITY`](awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY) when
    /// the sum exceeds it (the rest is [`Self::overflow`]).
    pub quantity: u64,
    /// Merged VMT allocations (one per distinct tag set, ordered by tag set; each tag set's
    /// tags sorted by key then value); `None` when the group's non-zero rows carry none.
    pub allocations: Option<Vec<Allocation>>,
    /// Raw rows folded in.
    pub row_count: u32,
    /// Seconds of the hour that contributed.
    pub seconds: SecondSet,
    /// The quantity each contributing second folded in.
    pub quantities: SecondQuantities,
    /// The part of the sum above the API maximum, not billed.
    pub overflow: Option<Overflow>,
}

impl AggregatedRecord {
    /// Which kind of `UsageRecord` this becomes.
    pub fn identity(&self) -> Identity<'_> {
        self.group.identity()
    }

    /// `meteringStatusReason` for the raw rows (exact reference text).
    pub fn raw_status_reason(&self) -> String {
        aggregated_reason(self.quantity, self.row_count)
    }

    /// Keys of every raw row folded in, in second order (for cleanup messages of at most
    /// [`MAX_CLEANUP_KEYS_PER_MESSAGE`](awsmp_contract::limits::sqs::MAX_CLEANUP_KEYS_PER_MESSAGE) keys).
    pub fn raw_row_keys(&self) -> impl Iterator<Item = RowKey> + '_ {
        self.seconds.iter().map(|s| RowKey {
            license_arn: self.group.license_arn.clone(),
            sort_key: self.group.usage_sort_key_at(s),
        })
    }

    /// The quantity folded in from each raw row, in [`Self::raw_row_keys`] order.
    pub fn raw_row_quantities(&self) -> impl Iterator<Item = u64> + '_ {
        self.seconds.iter().map(|s| self.quantities.get(s))
    }
}

/// Every pending row of a group as seen by the fold, to stamp them all when the group is
/// rejected: rows with a well-formed whole-second key as a [`SecondSet`], the rest verbatim (sorted, so
/// the value does not depend on row order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRows {
    group: GroupKey,
    seconds: SecondSet,
    irregular_sort_keys: BTreeSet<String>,
}

impl GroupRows {
    /// Number of keyed rows.
    pub fn len(&self) -> usize {
        self.seconds.len() as usize + self.irregular_sort_keys.len()
    }

    /// True when no keyed row was seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every keyed row's primary key.
    pub fn row_keys(&self) -> impl Iterator<Item = RowKey> + '_ {
        let regular = self.seconds.iter().map(|s| self.group.usage_sort_key_at(s));
        regular
            .chain(self.irregular_sort_keys.iter().cloned())
            .map(|sort_key| RowKey {
                license_arn: self.group.license_arn.clone(),
                sort_key,
            })
    }
}

/// A rejected group: every row gets `RejectedClientSide` with `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The winning reason code.
    pub reason: RejectReason,
    /// Human-readable detail (which value, which limit).
    pub detail: String,
    /// The row that produced the reason; `None` for a group-level reason.
    pub row_key: Option<RowKey>,
    /// Every row of the group, to stamp.
    pub rows: GroupRows,
}

/// What the fold concluded for a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoldOutcome {
    /// Write this record with a conditional put; on a fresh write, clean up its rows.
    Valid(AggregatedRecord),
    /// Stamp every row `RejectedClientSide` + reason; emit `UsageRecordRejected`.
    Rejected(Rejection),
    /// No pending rows: nothing to do.
    Empty,
    /// The group sums to 0 and the bucket is not yet at the oldest processed edge: leave the
    /// rows pending (submitting 0 now would lock the hour at 0, first-write-wins).
    DeferredZero {
        /// Pending rows seen.
        row_count: u32,
    },
}

/// How the fold treated one pushed row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Part of the group and pending: checked and counted.
    Counted,
    /// No `meteringPending`: already finalized, ignored.
    NotPending,
    /// Its keys place it in another group (another license, hour, or a dimension containing
    /// `#`): ignored here, that group will fold it.
    Foreign,
}

/// The streamed fold over one group's rows.
#[derive(Debug)]
pub struct GroupFold {
    group: GroupKey,
    prefix: MemberPrefix,
    checks: RowChecks,
    /// The fast path's facts of the group (`None`: every row takes the general path).
    conforming: Option<Conforming>,
    finalize_zero: bool,

    row_count: u32,
    total: u64,
    seconds: SecondSet,
    quantities: SecondQuantities,
    irregular_sort_keys: BTreeSet<String>,
    nonzero_allocated: u32,
    nonzero_unallocated: u32,
    merge: TagSetMerge,
    /// The earliest-ranked finding so far, with the sort key that produced it ("" = group).
    worst: Option<(RejectReason, String, String)>,
}

impl GroupFold {
    /// Start folding `group` as of `now`. The zero-quantity edge and the billable window are
    /// evaluated once, at `now`.
    pub fn new(group: GroupKey, now: DateTime<Utc>, cfg: &TimeConfig) -> Self {
        let prefix = MemberPrefix::of(&group);
        let checks = RowChecks::new(&group, now, cfg);
        Self {
            conforming: Conforming::of(&group, &prefix, &checks),
            prefix,
            checks,
            finalize_zero: is_zero_finalize_edge(group.hour, now, cfg),
            group,
            row_count: 0,
            total: 0,
            seconds: SecondSet::new(),
            quantities: SecondQuantities::new(),
            irregular_sort_keys: BTreeSet::new(),
            nonzero_allocated: 0,
            nonzero_unallocated: 0,
            merge: TagSetMerge::default(),
            worst: None,
        }
    }

    /// Force (or forbid) finalizing a zero-sum group regardless of the edge rule, e.g. for an
    /// operator re-drive at the end of the window.
    pub fn finalize_zero(mut self, finalize: bool) -> Self {
        self.finalize_zero = finalize;
        self
    }

    /// The group being folded.
    pub fn group(&self) -> &GroupKey {
        &self.group
    }

    /// Fold one row. Rows that are not pending or belong to another group are ignored (see
    /// [`Pushed`]). The same sort key twice is refused ([`DomainError::DuplicateRow`]) rather
    /// than counted twice.
    pub fn push(&mut self, row: &RawUsageRow) -> Result<Pushed, DomainError> {
        let view = RowView::of(row);
        let conforming = self.conforming.as_ref().and_then(|c| c.row(&view));
        match conforming {
            Some((sort_key, second, quantity)) => self.count_conforming(sort_key, second, quantity),
            None => self.push_general(&view),
        }
    }

    /// Fold one row as a store hands it: [`Self::push`] for a row as read; a compact row is
    /// counted by the fast path when it takes it, and otherwise folded as the row it stands
    /// for (with the same result). A compact row must come from the group being folded.
    pub fn push_row(&mut self, row: &UsageRow) -> Result<Pushed, DomainError> {
        match row {
            UsageRow::Raw(raw) => self.push(raw),
            UsageRow::Compact(c) => self.push_compact(c),
        }
    }

    fn push_compact(&mut self, row: &CompactRow) -> Result<Pushed, DomainError> {
        let fast = self
            .conforming
            .as_ref()
            .is_some_and(|c| c.takes(row.second, row.quantity));
        if !fast {
            return self.push(&row.to_raw(&self.group));
        }
        if !self.count_second(row.second, row.quantity) {
            let sort_key = self.group.usage_sort_key_at(row.second);
            return Err(DomainError::DuplicateRow(sort_key));
        }
        Ok(Pushed::Counted)
    }

    /// A row the fast path recognised: counted as the general path counts a row with no finding.
    fn count_conforming(
        &mut self,
        sort_key: &str,
        second: u32,
        quantity: u64,
    ) -> Result<Pushed, DomainError> {
        if !self.count_second(second, quantity) {
            return Err(DomainError::DuplicateRow(sort_key.to_owned()));
        }
        Ok(Pushed::Counted)
    }

    /// Count a conforming row's second and quantity; false (nothing counted) for a second
    /// already seen.
    fn count_second(&mut self, second: u32, quantity: u64) -> bool {
        if !self.seconds.insert(second) {
            return false;
        }
        self.row_count += 1;
        self.quantities.set(second, quantity);
        self.total = self.total.saturating_add(quantity);
        if quantity > 0 {
            self.nonzero_unallocated += 1;
        }
        true
    }

    /// [`Self::push`] without the fast path: what every row took before it, and what the fast
    /// path is compared with.
    #[cfg(test)]
    pub(super) fn push_without_fast_path(
        &mut self,
        row: &RawUsageRow,
    ) -> Result<Pushed, DomainError> {
        self.push_general(&RowView::of(row))
    }

    /// The general path: membership, then every check in reason order.
    fn push_general(&mut self, view: &RowView<'_>) -> Result<Pushed, DomainError> {
        match membership(&self.group, &self.prefix, view) {
            Membership::NotPending => Ok(Pushed::NotPending),
            Membership::Foreign => Ok(Pushed::Foreign),
            Membership::Unkeyed => {
                self.row_count += 1;
                self.note(
                    RejectReason::MalformedSortKey,
                    "",
                    "sort key is missing or not a string".to_owned(),
                );
                Ok(Pushed::Counted)
            }
            Membership::Malformed(sort_key) => {
                self.remember_irregular(sort_key)?;
                self.row_count += 1;
                self.note(
                    RejectReason::MalformedSortKey,
                    sort_key,
                    format!("sort key {sort_key:?} does not have three #-separated segments"),
                );
                Ok(Pushed::Counted)
            }
            Membership::Member {
                sort_key,
                segments,
                second,
            } => {
                match second {
                    Some(second) => {
                        if !self.seconds.insert(second) {
                            return Err(DomainError::DuplicateRow(sort_key.to_owned()));
                        }
                    }
                    None => self.remember_irregular(sort_key)?,
                }
                self.row_count += 1;
                let checked = self.checks.check(&self.group, view, &segments, second);
                match checked {
                    Ok(facts) => {
                        if let Some(second) = second {
                            self.quantities.set(second, facts.quantity);
                        }
                        self.accumulate(sort_key, facts)
                    }
                    Err(f) => self.note(f.reason, sort_key, f.detail),
                }
                Ok(Pushed::Counted)
            }
        }
    }

    fn remember_irregular(&mut self, sort_key: &str) -> Result<(), DomainError> {
        if !self.irregular_sort_keys.insert(sort_key.to_owned()) {
            return Err(DomainError::DuplicateRow(sort_key.to_owned()));
        }
        Ok(())
    }

    /// Keep the earliest-ranked finding; ties go to the smallest sort key ("" = group level).
    fn note(&mut self, reason: RejectReason, sort_key: &str, detail: String) {
        let better = match &self.worst {
            None => true,
            Some((r, k, _)) => (reason, sort_key) < (*r, k.as_str()),
        };
        if better {
            self.worst = Some((reason, sort_key.to_owned(), detail));
        }
    }

    fn accumulate(&mut self, sort_key: &str, facts: RowFacts<'_>) {
        // At most 3,600 rows of at most MAX_USAGE_QUANTITY each: far from u64's range. A total
        // above the API maximum is split in `finish`, never rejected.
        self.total = self.total.saturating_add(facts.quantity);
        if facts.quantity > 0 {
            if facts.allocations.is_some() {
                self.nonzero_allocated += 1;
            } else {
                self.nonzero_unallocated += 1;
            }
        }
        if let Some(detail) = facts.sum_mismatch {
            self.note(RejectReason::AllocationSumMismatch, sort_key, detail);
        }
        for (tags, q) in facts.allocations.into_iter().flatten() {
            self.merge.add(&tags, q);
        }
    }

    /// The group-level VMT checks of a group whose non-zero rows carry allocations.
    fn note_allocation_findings(&mut self) {
        if self.nonzero_unallocated > 0 {
            let detail = format!(
                "{} non-zero rows carry usageAllocations and {} do not",
                self.nonzero_allocated, self.nonzero_unallocated
            );
            self.note(RejectReason::MixedAllocatedAndUnallocated, "", detail);
        }
        if self.merge.overflowed_limit() {
            self.note(
                RejectReason::TooManyAllocations,
                "",
                format!("more than {MAX_ALLOCATIONS_PER_RECORD} distinct tag sets"),
            );
        }
        let merged_sum = self.merge.sum();
        if merged_sum != Some(self.total) {
            self.note(
                RejectReason::AllocationSumMismatch,
                "",
                format!(
                    "merged allocations sum to {merged_sum:?}, group total is {}",
                    self.total
                ),
            );
        }
    }

    /// Conclude the group.
    pub fn finish(mut self) -> FoldOutcome {
        if self.row_count == 0 {
            return FoldOutcome::Empty;
        }
        let allocated = self.nonzero_allocated > 0;
        if allocated {
            self.note_allocation_findings();
        }
        let rows = GroupRows {
            group: self.group.clone(),
            seconds: self.seconds.clone(),
            irregular_sort_keys: std::mem::take(&mut self.irregular_sort_keys),
        };
        if let Some((reason, sort_key, detail)) = self.worst.take() {
            let row_key = (!sort_key.is_empty()).then(|| RowKey {
                license_arn: self.group.license_arn.clone(),
                sort_key,
            });
            return FoldOutcome::Rejected(Rejection {
                reason,
                detail,
                row_key,
                rows,
            });
        }
        if self.total == 0 && !self.finalize_zero {
            return FoldOutcome::DeferredZero {
                row_count: self.row_count,
            };
        }
        let allocations: Option<Vec<Allocation>> =
            allocated.then(|| std::mem::take(&mut self.merge).into_allocations());
        let split = split_at_api_maximum(self.total, allocations);
        FoldOutcome::Valid(AggregatedRecord {
            group: self.group,
            quantity: split.billed,
            allocations: split.allocations,
            overflow: split.overflow,
            row_count: self.row_count,
            seconds: self.seconds,
            quantities: self.quantities,
        })
    }
}
