//! The streamed group fold with the client-side guardrails and the VMT merge (docs/row-contract.md,
//! docs/architecture.md "Aggregator").
//!
//! Feed a group's rows one at a time as the adapter pages through its `begins_with` query;
//! memory stays O(distinct tag sets) — plus a fixed 450-byte bitmap of contributing seconds —
//! never O(rows).
//!
//! **Precedence.** Each row is checked in the exact order of [`RejectReason`]; the row's first
//! failing check is its reason. One bad row rejects the whole group-hour, and the group's
//! reason is the earliest-ranked reason over all its rows and the group-level checks
//! (`MixedAllocatedAndUnallocated`, `TooManyAllocations`, merged `AllocationSumMismatch`, a
//! total beyond the API maximum), ties broken by the smallest sort key. The outcome is
//! therefore independent of row order.
//!
//! ```
//! use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold};
//! use awsmp_pipeline::domain::keys::GroupKey;
//! use awsmp_pipeline::domain::row::conforming_row;
//! use awsmp_pipeline::domain::time::TimeConfig;
//! use chrono::{TimeZone, Utc};
//!
//! let group = GroupKey::new(
//!     "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
//!     "210987654321", "api_calls", "2026-11-30T11".parse().unwrap());
//! let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap();
//! let mut fold = GroupFold::new(group.clone(), now, &TimeConfig::default());
//! for second in [0, 59, 3599] {
//!     fold.push(&conforming_row(&group, second, 7, None)).unwrap();
//! }
//! let FoldOutcome::Valid(record) = fold.finish() else { panic!("valid group") };
//! assert_eq!(record.quantity, 21);
//! assert_eq!(record.raw_status_reason(), "Aggregated total quantity 21 from 3 raw usage records");
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};

use super::DomainError;
use super::keys::{
    GroupKey, Identity, RowKey, SECONDS_PER_HOUR, SortKeySegments, parse_usage_timestamp,
    split_usage_sort_key,
};
use super::row::{
    Allocation, AttrValue, NumberError, RawUsageRow, Tag, parse_non_negative_integer,
};
use super::time::{TimeConfig, is_billable, is_zero_finalize_edge};
use crate::contract::attrs;
use crate::contract::limits::{
    MAX_ALLOCATIONS_PER_RECORD, MAX_TAGS_PER_ALLOCATION, MAX_USAGE_QUANTITY,
};
use crate::contract::status::{RejectReason, aggregated_reason};
use crate::ids::{is_valid_account_id, is_valid_license_arn, is_valid_product_code};
/// Size of a stored [`SecondSet`]: one bit per second of the hour.
pub const SECOND_SET_BYTES: usize = (SECONDS_PER_HOUR / 8) as usize;

const SECOND_WORDS: usize = (SECONDS_PER_HOUR as usize).div_ceil(64);

/// The set of seconds of an hour (0–3599), as a fixed 3,600-bit bitmap.
///
/// An aggregated record stores the seconds that contributed to it, so a later re-visit can
/// tell a row whose cleanup was lost (its second is in the set) from a late row written after
/// aggregation (it is not). Since a well-formed raw row's sort key is determined by its group
/// and second, the set is also the exact list of raw keys to clean up.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecondSet {
    words: [u64; SECOND_WORDS],
}

impl Default for SecondSet {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SecondSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecondSet")
            .field("len", &self.len())
            .finish()
    }
}

impl SecondSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self {
            words: [0; SECOND_WORDS],
        }
    }

    /// Add `second`; true when it was not there yet.
    ///
    /// # Panics
    /// When `second` is 3600 or more (a caller bug, never data).
    pub fn insert(&mut self, second: u32) -> bool {
        assert!(
            second < SECONDS_PER_HOUR,
            "second {second} outside the hour"
        );
        let (w, bit) = ((second / 64) as usize, 1u64 << (second % 64));
        let fresh = self.words[w] & bit == 0;
        self.words[w] |= bit;
        fresh
    }

    /// True when `second` is in the set.
    pub fn contains(&self, second: u32) -> bool {
        second < SECONDS_PER_HOUR
            && self.words[(second / 64) as usize] & (1u64 << (second % 64)) != 0
    }

    /// Number of seconds in the set.
    pub fn len(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// True when no second is in the set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The seconds, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..SECONDS_PER_HOUR).filter(|&s| self.contains(s))
    }

    /// The stored form: 450 bytes, bit `s % 8` of byte `s / 8` set for second `s`.
    pub fn to_bytes(&self) -> Vec<u8> {
        (0..SECOND_SET_BYTES)
            .map(|i| (self.words[i / 8] >> ((i % 8) * 8)) as u8)
            .collect()
    }

    /// Read the stored form back; exactly [`SECOND_SET_BYTES`] bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DomainError> {
        if bytes.len() != SECOND_SET_BYTES {
            return Err(DomainError::InvalidSecondSet(bytes.len()));
        }
        let mut set = Self::new();
        for (i, &b) in bytes.iter().enumerate() {
            set.words[i / 8] |= u64::from(b) << ((i % 8) * 8);
        }
        Ok(set)
    }
}

/// One valid group, ready for the conditional put (the commit point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatedRecord {
    /// The group (license / product code, account / customer identifier, dimension, hour).
    pub group: GroupKey,
    /// Exact sum of the rows' quantities (≤ [`MAX_USAGE_QUANTITY`]).
    pub quantity: u64,
    /// Merged VMT allocations (one per distinct tag set, ordered by tag set; each tag set's
    /// tags sorted by key then value); `None` when the group's non-zero rows carry none.
    pub allocations: Option<Vec<Allocation>>,
    /// Raw rows folded in.
    pub row_count: u32,
    /// Seconds of the hour that contributed.
    pub seconds: SecondSet,
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
    /// [`MAX_CLEANUP_KEYS_PER_MESSAGE`](crate::contract::limits::MAX_CLEANUP_KEYS_PER_MESSAGE) keys).
    pub fn raw_row_keys(&self) -> impl Iterator<Item = RowKey> + '_ {
        self.seconds.iter().map(|s| RowKey {
            license_arn: self.group.license_arn.clone(),
            sort_key: self.group.usage_sort_key_at(s),
        })
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

/// Where a row stands relative to a group.
enum Membership<'r> {
    NotPending,
    Foreign,
    /// Member with no string sort key at all (only possible outside DynamoDB).
    Unkeyed,
    /// Member whose sort key does not split into three segments.
    Malformed(&'r str),
    Member {
        sort_key: &'r str,
        segments: SortKeySegments<'r>,
        /// The whole-second timestamp and its second of the hour, when well-formed.
        timestamp: Option<(DateTime<Utc>, u32)>,
    },
}

fn present<'r>(row: &'r RawUsageRow, name: &str) -> Option<&'r AttrValue> {
    row.get(name).filter(|v| !matches!(v, AttrValue::Null))
}

fn membership<'r>(group: &GroupKey, prefix: &str, row: &'r RawUsageRow) -> Membership<'r> {
    if present(row, attrs::METERING_PENDING).is_none() {
        return Membership::NotPending;
    }
    if let Some(pk) = present(row, attrs::LICENSE_ARN)
        && pk.as_s() != Some(group.license_arn.as_str())
    {
        return Membership::Foreign;
    }
    let Some(sort_key) = present(row, attrs::USAGE_SORT_KEY).and_then(AttrValue::as_s) else {
        return Membership::Unkeyed;
    };
    let Some(segments) = split_usage_sort_key(sort_key) else {
        return Membership::Malformed(sort_key);
    };
    if !sort_key.starts_with(prefix)
        || segments.account != group.customer_aws_account_id
        || segments.dimension != group.dimension
    {
        return Membership::Foreign;
    }
    let timestamp = parse_usage_timestamp(segments.timestamp)
        .ok()
        .and_then(|t| group.hour.second_of(t).map(|s| (t, s)));
    Membership::Member {
        sort_key,
        segments,
        timestamp,
    }
}

/// A reason with its detail, as found on one row or the group.
#[derive(Debug)]
struct Finding {
    reason: RejectReason,
    detail: String,
}

fn finding(reason: RejectReason, detail: impl Into<String>) -> Finding {
    Finding {
        reason,
        detail: detail.into(),
    }
}

/// Per-row facts once the row passed every row-level check up to identity.
struct RowFacts<'r> {
    quantity: u64,
    allocations: Option<Vec<(BorrowedTags<'r>, u64)>>,
    /// The row's allocations do not sum to its quantity (ranked after the group-level checks).
    sum_mismatch: Option<String>,
}

/// Pre-computed identity verdict for the group's partition key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartitionKind {
    ConcurrentAgreements,
    Legacy,
    Invalid,
}

/// The streamed fold over one group's rows.
#[derive(Debug)]
pub struct GroupFold {
    group: GroupKey,
    prefix: String,
    now: DateTime<Utc>,
    kind: PartitionKind,
    bucket_billable: bool,
    finalize_zero: bool,

    row_count: u32,
    total: u64,
    seconds: SecondSet,
    irregular_sort_keys: BTreeSet<String>,
    nonzero_allocated: u32,
    nonzero_unallocated: u32,
    /// Merged quantity per tag set, keyed by [`encode_tag_set`] so lookups need no
    /// per-tag allocation.
    merged: BTreeMap<Vec<u8>, u64>,
    /// Reused buffer for encoding tag-set keys.
    scratch: Vec<u8>,
    /// More distinct tag sets than the API allows were seen; new ones are no longer stored.
    merged_overflowed_limit: bool,
    /// The earliest-ranked finding so far, with the sort key that produced it ("" = group).
    worst: Option<(RejectReason, String, String)>,
}

impl GroupFold {
    /// Start folding `group` as of `now`. The zero-quantity edge and the billable window are
    /// evaluated once, at `now`.
    pub fn new(group: GroupKey, now: DateTime<Utc>, cfg: &TimeConfig) -> Self {
        let kind = if group
            .license_arn
            .starts_with(super::keys::LICENSE_ARN_PREFIX)
        {
            if is_valid_license_arn(&group.license_arn) {
                PartitionKind::ConcurrentAgreements
            } else {
                PartitionKind::Invalid
            }
        } else if is_valid_product_code(&group.license_arn) {
            PartitionKind::Legacy
        } else {
            PartitionKind::Invalid
        };
        Self {
            prefix: group.usage_prefix(),
            bucket_billable: is_billable(group.hour, now, cfg),
            finalize_zero: is_zero_finalize_edge(group.hour, now, cfg),
            group,
            now,
            kind,
            row_count: 0,
            total: 0,
            seconds: SecondSet::new(),
            irregular_sort_keys: BTreeSet::new(),
            nonzero_allocated: 0,
            nonzero_unallocated: 0,
            merged: BTreeMap::new(),
            scratch: Vec::new(),
            merged_overflowed_limit: false,
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
        match membership(&self.group, &self.prefix, row) {
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
                timestamp,
            } => {
                match timestamp {
                    Some((_, second)) => {
                        if !self.seconds.insert(second) {
                            return Err(DomainError::DuplicateRow(sort_key.to_owned()));
                        }
                    }
                    None => self.remember_irregular(sort_key)?,
                }
                self.row_count += 1;
                match self.check_row(row, &segments, timestamp.map(|(t, _)| t)) {
                    Ok(facts) => self.accumulate(sort_key, facts),
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

    /// The row-level checks, in reason order, up to (not including) the group-level ones.
    fn check_row<'r>(
        &self,
        row: &'r RawUsageRow,
        segments: &SortKeySegments<'_>,
        timestamp: Option<DateTime<Utc>>,
    ) -> Result<RowFacts<'r>, Finding> {
        use RejectReason::*;
        let legacy = self.kind == PartitionKind::Legacy;
        let account_attr = if legacy {
            attrs::CUSTOMER_IDENTIFIER
        } else {
            attrs::CUSTOMER_AWS_ACCOUNT_ID
        };

        // SortKeyMismatch: a present attribute must equal its segment (an absent one is
        // reported by its own Missing* reason further down).
        if let Some(v) = present(row, account_attr)
            && v.as_s() != Some(segments.account)
        {
            return Err(finding(
                SortKeyMismatch,
                format!(
                    "{account_attr} {v:?} differs from sort-key segment {:?}",
                    segments.account
                ),
            ));
        }
        if let Some(v) = present(row, attrs::DIMENSION)
            && v.as_s() != Some(segments.dimension)
        {
            return Err(finding(
                SortKeyMismatch,
                format!(
                    "dimension {v:?} differs from sort-key segment {:?}",
                    segments.dimension
                ),
            ));
        }

        let Some(timestamp) = timestamp else {
            return Err(finding(
                MalformedTimestamp,
                format!(
                    "timestamp segment {:?} is not whole-second YYYY-MM-DDTHH:MM:SS",
                    segments.timestamp
                ),
            ));
        };

        let quantity = match present(row, attrs::QUANTITY) {
            None => return Err(finding(NonNumericQuantity, "quantity is missing")),
            Some(AttrValue::N(n)) => match parse_non_negative_integer(n) {
                Ok(q) if q <= MAX_USAGE_QUANTITY => q,
                Ok(_) | Err(NumberError::Overflow) => {
                    return Err(finding(
                        QuantityOverflow,
                        format!(
                            "quantity {n} exceeds the BatchMeterUsage maximum {MAX_USAGE_QUANTITY}"
                        ),
                    ));
                }
                Err(NumberError::NonNumeric) => {
                    return Err(finding(
                        NonNumericQuantity,
                        format!("quantity {n:?} is not a number"),
                    ));
                }
                Err(NumberError::NonInteger) => {
                    return Err(finding(
                        NonIntegerQuantity,
                        format!("quantity {n} is not an integer"),
                    ));
                }
                Err(NumberError::Negative) => {
                    return Err(finding(
                        NegativeQuantity,
                        format!("quantity {n} is negative"),
                    ));
                }
            },
            Some(other) => {
                return Err(finding(
                    NonNumericQuantity,
                    format!("quantity {other:?} is not a number"),
                ));
            }
        };

        let allocations = match present(row, attrs::USAGE_ALLOCATIONS) {
            None => None,
            Some(v) => Some(parse_allocations(v)?),
        };

        if present(row, attrs::DIMENSION)
            .and_then(AttrValue::as_s)
            .is_none_or(str::is_empty)
        {
            return Err(finding(MissingDimension, "dimension is missing or empty"));
        }
        if timestamp > self.now {
            return Err(finding(
                TimestampInFuture,
                format!(
                    "timestamp {} is after now {}",
                    segments.timestamp,
                    self.now.format("%Y-%m-%dT%H:%M:%S")
                ),
            ));
        }
        if !self.bucket_billable {
            return Err(finding(
                TimestampOutOfWindow,
                format!(
                    "hour {} is outside the billable window at {}",
                    self.group.hour,
                    self.now.format("%Y-%m-%dT%H:%M:%S")
                ),
            ));
        }
        match self.kind {
            PartitionKind::Invalid => {
                return Err(finding(
                    InvalidLicenseArn,
                    format!(
                        "partition key {:?} is neither a license ARN nor a product code",
                        self.group.license_arn
                    ),
                ));
            }
            PartitionKind::ConcurrentAgreements => {
                let account =
                    present(row, attrs::CUSTOMER_AWS_ACCOUNT_ID).and_then(AttrValue::as_s);
                if !account.is_some_and(is_valid_account_id) {
                    return Err(finding(
                        MissingCustomerAWSAccountId,
                        format!("customerAWSAccountId {account:?} is not a 12-digit account id"),
                    ));
                }
            }
            PartitionKind::Legacy => {
                if present(row, attrs::CUSTOMER_IDENTIFIER)
                    .and_then(AttrValue::as_s)
                    .is_none_or(str::is_empty)
                {
                    return Err(finding(
                        MissingLegacyIdentifier,
                        "legacy (product-code) row without a customerIdentifier",
                    ));
                }
            }
        }

        let sum_mismatch = allocations.as_ref().and_then(|allocs| {
            let sum = allocs
                .iter()
                .try_fold(0u64, |acc, (_, q)| acc.checked_add(*q));
            (sum != Some(quantity)).then(|| match sum {
                Some(s) => format!("allocations sum to {s}, quantity is {quantity}"),
                None => format!("allocations overflow, quantity is {quantity}"),
            })
        });
        Ok(RowFacts {
            quantity,
            allocations,
            sum_mismatch,
        })
    }

    fn accumulate(&mut self, sort_key: &str, facts: RowFacts<'_>) {
        match self
            .total
            .checked_add(facts.quantity)
            .filter(|t| *t <= MAX_USAGE_QUANTITY)
        {
            Some(t) => self.total = t,
            None => {
                self.total = self.total.saturating_add(facts.quantity);
                self.note(
                    RejectReason::QuantityOverflow,
                    "",
                    format!("group total exceeds the BatchMeterUsage maximum {MAX_USAGE_QUANTITY}"),
                );
            }
        }
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
            encode_tag_set(&tags, &mut self.scratch);
            let len = self.merged.len();
            match self.merged.get_mut(self.scratch.as_slice()) {
                Some(sum) => *sum = sum.saturating_add(q),
                None if len < MAX_ALLOCATIONS_PER_RECORD => {
                    self.merged.insert(self.scratch.clone(), q);
                }
                // Memory stays bounded: one set past the limit already decides TooManyAllocations.
                None => self.merged_overflowed_limit = true,
            }
        }
    }

    /// Conclude the group.
    pub fn finish(mut self) -> FoldOutcome {
        if self.row_count == 0 {
            return FoldOutcome::Empty;
        }
        let allocated = self.nonzero_allocated > 0;
        if allocated && self.nonzero_unallocated > 0 {
            let detail = format!(
                "{} non-zero rows carry usageAllocations and {} do not",
                self.nonzero_allocated, self.nonzero_unallocated
            );
            self.note(RejectReason::MixedAllocatedAndUnallocated, "", detail);
        }
        if allocated && self.merged_overflowed_limit {
            self.note(
                RejectReason::TooManyAllocations,
                "",
                format!("more than {MAX_ALLOCATIONS_PER_RECORD} distinct tag sets"),
            );
        }
        if allocated {
            let merged_sum = self
                .merged
                .values()
                .try_fold(0u64, |acc, q| acc.checked_add(*q));
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
        let allocations = allocated.then(|| {
            let mut out: Vec<Allocation> = std::mem::take(&mut self.merged)
                .into_iter()
                .map(|(key, quantity)| Allocation {
                    quantity,
                    tags: decode_tag_set(&key),
                })
                .collect();
            out.sort_unstable_by(|a, b| a.tags.cmp(&b.tags));
            out
        });
        FoldOutcome::Valid(AggregatedRecord {
            group: self.group,
            quantity: self.total,
            allocations,
            row_count: self.row_count,
            seconds: self.seconds,
        })
    }
}

/// Parse a row's `usageAllocations`, returning the earliest-ranked problem if any.
/// Each allocation becomes (tags sorted by key then value, quantity).
fn parse_allocations(v: &AttrValue) -> Result<Vec<(BorrowedTags<'_>, u64)>, Finding> {
    use RejectReason::*;
    let Some(list) = v.as_l() else {
        return Err(finding(
            MalformedAllocations,
            "usageAllocations is not a list",
        ));
    };
    if list.is_empty() {
        return Err(finding(
            MalformedAllocations,
            "usageAllocations is an empty list",
        ));
    }
    let mut worst: Option<Finding> = None;
    let mut note = |f: Finding| {
        if worst.as_ref().is_none_or(|w| f.reason < w.reason) {
            worst = Some(f);
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let Some(m) = item.as_m() else {
            note(finding(
                MalformedAllocations,
                format!("allocation {i} is not a map"),
            ));
            continue;
        };
        if let Some(k) = m
            .keys()
            .find(|k| *k != attrs::ALLOCATED_USAGE_QUANTITY && *k != attrs::TAGS)
        {
            note(finding(
                MalformedAllocations,
                format!("allocation {i} has unknown field {k:?}"),
            ));
        }
        let quantity = match m.get(attrs::ALLOCATED_USAGE_QUANTITY) {
            None | Some(AttrValue::Null) => {
                note(finding(
                    MalformedAllocations,
                    format!("allocation {i} has no AllocatedUsageQuantity"),
                ));
                None
            }
            Some(AttrValue::N(n)) => match parse_non_negative_integer(n) {
                Ok(q) if q <= MAX_USAGE_QUANTITY => Some(q),
                Ok(_) | Err(NumberError::Overflow) => {
                    note(finding(
                        QuantityOverflow,
                        format!(
                            "allocation {i} quantity {n} exceeds the BatchMeterUsage maximum {MAX_USAGE_QUANTITY}"
                        ),
                    ));
                    None
                }
                Err(_) => {
                    note(finding(
                        NegativeOrNonIntegerAllocation,
                        format!("allocation {i} quantity {n:?} is not a non-negative integer"),
                    ));
                    None
                }
            },
            Some(other) => {
                note(finding(
                    MalformedAllocations,
                    format!("allocation {i} quantity {other:?} is not a number"),
                ));
                None
            }
        };
        let tags = match m.get(attrs::TAGS) {
            None | Some(AttrValue::Null) => Some(Vec::new()),
            Some(AttrValue::L(tags)) => parse_tags(i, tags, &mut note),
            Some(_) => {
                note(finding(
                    MalformedAllocations,
                    format!("allocation {i} Tags is not a list"),
                ));
                None
            }
        };
        if let (Some(q), Some(mut tags)) = (quantity, tags) {
            tags.sort_unstable();
            out.push((tags, q));
        }
    }
    match worst {
        Some(f) => Err(f),
        None => Ok(out),
    }
}

fn parse_tags<'r>(
    i: usize,
    tags: &'r [AttrValue],
    note: &mut impl FnMut(Finding),
) -> Option<BorrowedTags<'r>> {
    use RejectReason::*;
    if tags.is_empty() {
        note(finding(
            MalformedAllocations,
            format!("allocation {i} has an empty Tags list"),
        ));
        return None;
    }
    if tags.len() > MAX_TAGS_PER_ALLOCATION {
        note(finding(
            TooManyTags,
            format!(
                "allocation {i} has {} tags, at most {MAX_TAGS_PER_ALLOCATION}",
                tags.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(tags.len());
    let mut ok = true;
    for (j, tag) in tags.iter().enumerate() {
        let Some(m) = tag.as_m() else {
            note(finding(
                MalformedAllocations,
                format!("allocation {i} tag {j} is not a map"),
            ));
            ok = false;
            continue;
        };
        if let Some(k) = m
            .keys()
            .find(|k| *k != attrs::TAG_KEY && *k != attrs::TAG_VALUE)
        {
            note(finding(
                MalformedAllocations,
                format!("allocation {i} tag {j} has unknown field {k:?}"),
            ));
            ok = false;
        }
        let mut field = |name: &str| match m.get(name) {
            None | Some(AttrValue::Null) => {
                note(finding(
                    MissingTagKeyOrValue,
                    format!("allocation {i} tag {j} has no {name}"),
                ));
                None
            }
            Some(AttrValue::S(s)) if s.is_empty() => {
                note(finding(
                    MissingTagKeyOrValue,
                    format!("allocation {i} tag {j} has an empty {name}"),
                ));
                None
            }
            Some(AttrValue::S(s)) => Some(s.as_str()),
            Some(other) => {
                note(finding(
                    MalformedAllocations,
                    format!("allocation {i} tag {j} {name} {other:?} is not a string"),
                ));
                None
            }
        };
        let key = field(attrs::TAG_KEY);
        let value = field(attrs::TAG_VALUE);
        match (key, value) {
            (Some(key), Some(value)) => out.push((key, value)),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

/// A row's tags, borrowed from the row: `(key, value)` pairs.
type BorrowedTags<'r> = Vec<(&'r str, &'r str)>;

/// Encode a tag set, whose pairs are already sorted (so the key is order-insensitive), into
/// `out` (cleared first): each string length-prefixed, so distinct tag sets never share an
/// encoding.
fn encode_tag_set(sorted_tags: &[(&str, &str)], out: &mut Vec<u8>) {
    out.clear();
    for &(k, v) in sorted_tags {
        for part in [k, v] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part.as_bytes());
        }
    }
}

/// Inverse of [`encode_tag_set`]: the tags sorted by key then value.
fn decode_tag_set(mut bytes: &[u8]) -> Vec<Tag> {
    fn next(bytes: &mut &[u8]) -> String {
        let (len, rest) = bytes.split_at(8);
        let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8])) as usize;
        let (s, rest) = rest.split_at(len);
        *bytes = rest;
        // The bytes were copied from `&str`s, so they are valid UTF-8.
        String::from_utf8_lossy(s).into_owned()
    }
    let mut tags = Vec::new();
    while !bytes.is_empty() {
        let key = next(&mut bytes);
        let value = next(&mut bytes);
        tags.push(Tag { key, value });
    }
    tags
}

/// A raw row seen on a re-visit of a group whose aggregated record already exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevisitRow {
    /// Not pending: nothing to do.
    NotPending,
    /// Belongs to another group: ignore.
    Foreign,
    /// Its second is in the stored record: its cleanup was lost. Clear `meteringPending`
    /// (without restamping a sum from this visit).
    AlreadyAggregated(RowKey),
    /// Written after aggregation: terminal `RejectedClientSide` + [`LATE_USAGE`](crate::contract::reasons::LATE_USAGE),
    /// `LateUsage` metric carrying its quantity.
    Late(LateRow),
}

/// A late raw row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateRow {
    /// Its key.
    pub row_key: RowKey,
    /// Its second of the hour, when its key is well-formed.
    pub second: Option<u32>,
    /// Its quantity when it is a valid one; `None` for a non-numeric / invalid quantity (the
    /// row keeps its own attribute, nothing is defaulted).
    pub quantity: Option<u64>,
}

/// Classify a pending row found when re-visiting `group`, whose aggregated record stores the
/// contributing seconds `stored`. Rows without a sort key cannot exist in DynamoDB and are
/// reported as [`RevisitRow::Foreign`].
pub fn classify_revisit(group: &GroupKey, stored: &SecondSet, row: &RawUsageRow) -> RevisitRow {
    let prefix = group.usage_prefix();
    let (sort_key, second) = match membership(group, &prefix, row) {
        Membership::NotPending => return RevisitRow::NotPending,
        Membership::Foreign | Membership::Unkeyed => return RevisitRow::Foreign,
        Membership::Malformed(sk) => (sk, None),
        Membership::Member {
            sort_key,
            timestamp,
            ..
        } => (sort_key, timestamp.map(|(_, s)| s)),
    };
    let row_key = RowKey {
        license_arn: group.license_arn.clone(),
        sort_key: sort_key.to_owned(),
    };
    if second.is_some_and(|s| stored.contains(s)) {
        return RevisitRow::AlreadyAggregated(row_key);
    }
    let quantity = present(row, attrs::QUANTITY)
        .and_then(AttrValue::as_n)
        .and_then(|n| parse_non_negative_integer(n).ok())
        .filter(|q| *q <= MAX_USAGE_QUANTITY);
    RevisitRow::Late(LateRow {
        row_key,
        second,
        quantity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::row::conforming_row;
    use chrono::TimeZone;

    const LICENSE: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
    const ACCOUNT: &str = "210987654321";

    fn group() -> GroupKey {
        GroupKey::new(LICENSE, ACCOUNT, "api", "2026-11-30T11".parse().unwrap())
    }
    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap()
    }
    fn fold() -> GroupFold {
        GroupFold::new(group(), now(), &TimeConfig::default())
    }
    fn row(second: u32, q: u64) -> RawUsageRow {
        conforming_row(&group(), second, q, None)
    }
    fn alloc(q: u64, tags: &[(&str, &str)]) -> Allocation {
        Allocation {
            quantity: q,
            tags: tags.iter().map(|(k, v)| Tag::new(*k, *v)).collect(),
        }
    }
    fn vmt_row(second: u32, allocs: &[Allocation]) -> RawUsageRow {
        let q = allocs.iter().map(|a| a.quantity).sum();
        conforming_row(&group(), second, q, Some(allocs))
    }
    fn reject_reason(rows: &[RawUsageRow]) -> RejectReason {
        let mut f = fold();
        for r in rows {
            f.push(r).unwrap();
        }
        match f.finish() {
            FoldOutcome::Rejected(r) => r.reason,
            other => panic!("expected rejection, got {other:?}"),
        }
    }
    fn set(r: &mut RawUsageRow, name: &str, v: AttrValue) {
        r.insert(name.to_owned(), v);
    }

    #[test]
    fn tag_set_keys_are_unambiguous_and_reversible() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        encode_tag_set(&[("a", "bc")], &mut a);
        encode_tag_set(&[("ab", "c")], &mut b);
        assert_ne!(a, b);
        encode_tag_set(&[("k", "v"), ("k2", "")], &mut a);
        assert_eq!(
            decode_tag_set(&a),
            vec![Tag::new("k", "v"), Tag::new("k2", "")]
        );
        encode_tag_set(&[], &mut a);
        assert!(decode_tag_set(&a).is_empty());
    }

    #[test]
    fn second_set_round_trips() {
        let mut s = SecondSet::new();
        for x in [0, 1, 63, 64, 1799, 3599] {
            assert!(s.insert(x));
        }
        assert!(!s.insert(64));
        assert_eq!(s.len(), 6);
        let bytes = s.to_bytes();
        assert_eq!(bytes.len(), SECOND_SET_BYTES);
        assert_eq!(bytes[0], 0b11);
        assert_eq!(bytes[449], 0b1000_0000);
        let back = SecondSet::from_bytes(&bytes).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            vec![0, 1, 63, 64, 1799, 3599]
        );
        assert!(!back.contains(3600));
        assert!(SecondSet::from_bytes(&bytes[1..]).is_err());
    }

    #[test]
    fn valid_group_sums_and_lists_its_keys() {
        let mut f = fold();
        f.push(&row(5, 3)).unwrap();
        f.push(&row(3599, 4)).unwrap();
        let FoldOutcome::Valid(rec) = f.finish() else {
            panic!()
        };
        assert_eq!(
            (rec.quantity, rec.row_count, rec.allocations.clone()),
            (7, 2, None)
        );
        let keys: Vec<_> = rec.raw_row_keys().map(|k| k.sort_key).collect();
        assert_eq!(
            keys,
            vec![
                format!("{ACCOUNT}#api#2026-11-30T11:00:05"),
                format!("{ACCOUNT}#api#2026-11-30T11:59:59")
            ]
        );
    }

    #[test]
    fn ignores_not_pending_and_foreign_rows() {
        let mut f = fold();
        let mut done = row(1, 5);
        done.remove(attrs::METERING_PENDING);
        assert_eq!(f.push(&done).unwrap(), Pushed::NotPending);
        let mut null_pending = row(2, 5);
        set(&mut null_pending, attrs::METERING_PENDING, AttrValue::Null);
        assert_eq!(f.push(&null_pending).unwrap(), Pushed::NotPending);
        let other_hour = conforming_row(
            &GroupKey {
                hour: "2026-11-30T10".parse().unwrap(),
                ..group()
            },
            1,
            5,
            None,
        );
        assert_eq!(f.push(&other_hour).unwrap(), Pushed::Foreign);
        // A dimension that itself contains "#<this hour>" matches the prefix but is not ours.
        let sneaky = GroupKey {
            dimension: "api#2026-11-30T11:00:00".into(),
            ..group()
        };
        assert_eq!(
            f.push(&conforming_row(&sneaky, 1, 5, None)).unwrap(),
            Pushed::Foreign
        );
        assert_eq!(f.finish(), FoldOutcome::Empty);
    }

    #[test]
    fn duplicate_rows_are_refused_not_counted() {
        let mut f = fold();
        f.push(&row(1, 5)).unwrap();
        assert!(matches!(
            f.push(&row(1, 5)),
            Err(DomainError::DuplicateRow(_))
        ));
    }

    #[test]
    fn zero_groups_defer_until_the_edge() {
        let mut f = fold();
        f.push(&row(1, 0)).unwrap();
        assert_eq!(f.finish(), FoldOutcome::DeferredZero { row_count: 1 });
        let mid_month = GroupKey {
            hour: "2026-11-20T11".parse().unwrap(),
            ..group()
        };
        let edge_now = Utc.with_ymd_and_hms(2026, 11, 21, 10, 0, 0).unwrap();
        let mut f = GroupFold::new(mid_month.clone(), edge_now, &TimeConfig::default());
        f.push(&conforming_row(&mid_month, 1, 0, None)).unwrap();
        let FoldOutcome::Valid(rec) = f.finish() else {
            panic!()
        };
        assert_eq!(rec.quantity, 0);
        let mut forced = fold().finalize_zero(true);
        forced.push(&row(1, 0)).unwrap();
        assert!(matches!(forced.finish(), FoldOutcome::Valid(_)));
    }

    #[test]
    fn each_reason_on_its_own() {
        use RejectReason::*;
        let cases: Vec<(RejectReason, RawUsageRow)> = vec![
            (MalformedSortKey, {
                let mut r = row(1, 1);
                set(
                    &mut r,
                    attrs::USAGE_SORT_KEY,
                    AttrValue::s(format!("{ACCOUNT}#api")),
                );
                r
            }),
            (SortKeyMismatch, {
                let mut r = row(1, 1);
                set(&mut r, attrs::DIMENSION, AttrValue::s("other"));
                r
            }),
            (SortKeyMismatch, {
                let mut r = row(1, 1);
                set(
                    &mut r,
                    attrs::CUSTOMER_AWS_ACCOUNT_ID,
                    AttrValue::n(210987654321),
                );
                r
            }),
            (MalformedTimestamp, {
                let mut r = row(1, 1);
                set(
                    &mut r,
                    attrs::USAGE_SORT_KEY,
                    AttrValue::s(format!("{ACCOUNT}#api#2026-11-30T11:00:01.000Z")),
                );
                r
            }),
            (MalformedTimestamp, {
                let mut r = row(1, 1);
                set(
                    &mut r,
                    attrs::USAGE_SORT_KEY,
                    AttrValue::s(format!("{ACCOUNT}#api#2026-11-30T11")),
                );
                r
            }),
            (NonNumericQuantity, {
                let mut r = row(1, 1);
                set(&mut r, attrs::QUANTITY, AttrValue::s("1"));
                r
            }),
            (NonNumericQuantity, {
                let mut r = row(1, 1);
                r.remove(attrs::QUANTITY);
                r
            }),
            (NonIntegerQuantity, {
                let mut r = row(1, 1);
                set(&mut r, attrs::QUANTITY, AttrValue::N("-1.5".into()));
                r
            }),
            (NegativeQuantity, {
                let mut r = row(1, 1);
                set(&mut r, attrs::QUANTITY, AttrValue::N("-1".into()));
                r
            }),
            (QuantityOverflow, row(1, MAX_USAGE_QUANTITY + 1)),
            (MalformedAllocations, {
                let mut r = row(1, 1);
                set(&mut r, attrs::USAGE_ALLOCATIONS, AttrValue::s("x"));
                r
            }),
            (MalformedAllocations, {
                let mut r = row(1, 1);
                set(&mut r, attrs::USAGE_ALLOCATIONS, AttrValue::L(vec![]));
                r
            }),
            (NegativeOrNonIntegerAllocation, {
                let mut r = vmt_row(1, &[alloc(1, &[("k", "v")])]);
                let AttrValue::L(l) = r.get_mut(attrs::USAGE_ALLOCATIONS).unwrap() else {
                    panic!()
                };
                let AttrValue::M(m) = &mut l[0] else { panic!() };
                m.insert(
                    attrs::ALLOCATED_USAGE_QUANTITY.into(),
                    AttrValue::N("0.5".into()),
                );
                r
            }),
            (
                TooManyTags,
                vmt_row(
                    1,
                    &[alloc(
                        1,
                        &[
                            ("a", "1"),
                            ("b", "1"),
                            ("c", "1"),
                            ("d", "1"),
                            ("e", "1"),
                            ("f", "1"),
                        ],
                    )],
                ),
            ),
            (MissingTagKeyOrValue, vmt_row(1, &[alloc(1, &[("a", "")])])),
            (MissingDimension, {
                let mut r = row(1, 1);
                r.remove(attrs::DIMENSION);
                r
            }),
            (MissingCustomerAWSAccountId, {
                let mut r = row(1, 1);
                r.remove(attrs::CUSTOMER_AWS_ACCOUNT_ID);
                r
            }),
            (AllocationSumMismatch, {
                let mut r = vmt_row(1, &[alloc(2, &[("k", "v")])]);
                set(&mut r, attrs::QUANTITY, AttrValue::n(3));
                r
            }),
        ];
        for (expected, r) in cases {
            assert_eq!(reject_reason(std::slice::from_ref(&r)), expected, "{r:?}");
        }
    }

    #[test]
    fn group_specific_reasons() {
        use RejectReason::*;
        let cfg = TimeConfig::default();
        let run = |g: GroupKey, now: DateTime<Utc>, rows: Vec<RawUsageRow>| {
            let mut f = GroupFold::new(g, now, &cfg);
            for r in &rows {
                f.push(r).unwrap();
            }
            match f.finish() {
                FoldOutcome::Rejected(r) => r.reason,
                other => panic!("{other:?}"),
            }
        };
        let empty_dim = GroupKey {
            dimension: String::new(),
            ..group()
        };
        assert_eq!(
            run(
                empty_dim.clone(),
                now(),
                vec![conforming_row(&empty_dim, 1, 1, None)]
            ),
            MissingDimension
        );
        let current = GroupKey {
            hour: "2026-11-30T12".parse().unwrap(),
            ..group()
        };
        assert_eq!(
            run(
                current.clone(),
                now(),
                vec![conforming_row(&current, 1800, 1, None)]
            ),
            TimestampInFuture
        );
        let old = GroupKey {
            hour: "2026-11-29T12".parse().unwrap(),
            ..group()
        };
        assert_eq!(
            run(old.clone(), now(), vec![conforming_row(&old, 1, 1, None)]),
            TimestampOutOfWindow
        );
        let bad_arn = GroupKey {
            license_arn: "arn:aws:license-manager::1:license:l-x".into(),
            ..group()
        };
        assert_eq!(
            run(
                bad_arn.clone(),
                now(),
                vec![conforming_row(&bad_arn, 1, 1, None)]
            ),
            InvalidLicenseArn
        );
        let not_a_code = GroupKey {
            license_arn: "Not A Code".into(),
            ..group()
        };
        assert_eq!(
            run(
                not_a_code.clone(),
                now(),
                vec![conforming_row(&not_a_code, 1, 1, None)]
            ),
            InvalidLicenseArn
        );
        let legacy = GroupKey::new("prodcode1", "cust-1", "api", group().hour);
        let mut legacy_row = conforming_row(&legacy, 1, 1, None);
        legacy_row.remove(attrs::CUSTOMER_AWS_ACCOUNT_ID);
        assert_eq!(
            run(legacy.clone(), now(), vec![legacy_row.clone()]),
            MissingLegacyIdentifier
        );
        legacy_row.insert(attrs::CUSTOMER_IDENTIFIER.into(), AttrValue::s("cust-2"));
        assert_eq!(
            run(legacy.clone(), now(), vec![legacy_row.clone()]),
            SortKeyMismatch
        );
        legacy_row.insert(attrs::CUSTOMER_IDENTIFIER.into(), AttrValue::s("cust-1"));
        let mut f = GroupFold::new(legacy.clone(), now(), &cfg);
        f.push(&legacy_row).unwrap();
        let FoldOutcome::Valid(rec) = f.finish() else {
            panic!()
        };
        assert!(!rec.identity().is_concurrent_agreements());
    }

    #[test]
    fn group_level_vmt_reasons() {
        use RejectReason::*;
        assert_eq!(
            reject_reason(&[vmt_row(1, &[alloc(1, &[("k", "v")])]), row(2, 1)]),
            MixedAllocatedAndUnallocated
        );
        // Zero rows are ignored for the mixed check, and their allocations are not billed.
        let mut f = fold();
        f.push(&vmt_row(1, &[alloc(0, &[("z", "z")])])).unwrap();
        f.push(&row(2, 4)).unwrap();
        let FoldOutcome::Valid(rec) = f.finish() else {
            panic!()
        };
        assert_eq!((rec.quantity, rec.allocations), (4, None));
        let many: Vec<_> = (0..MAX_ALLOCATIONS_PER_RECORD as u32 + 1)
            .map(|i| vmt_row(i, &[alloc(1, &[("k", &i.to_string())])]))
            .collect();
        assert_eq!(reject_reason(&many), TooManyAllocations);
        assert!(matches!(
            {
                let mut f = fold();
                for r in &many[..MAX_ALLOCATIONS_PER_RECORD] {
                    f.push(r).unwrap();
                }
                f.finish()
            },
            FoldOutcome::Valid(_)
        ));
    }

    #[test]
    fn vmt_merge_is_tag_order_insensitive_and_sorted() {
        let mut f = fold();
        f.push(&vmt_row(
            1,
            &[alloc(2, &[("b", "2"), ("a", "1")]), alloc(1, &[])],
        ))
        .unwrap();
        f.push(&vmt_row(
            2,
            &[alloc(3, &[("a", "1"), ("b", "2")]), alloc(4, &[("c", "3")])],
        ))
        .unwrap();
        let FoldOutcome::Valid(rec) = f.finish() else {
            panic!()
        };
        assert_eq!(rec.quantity, 10);
        assert_eq!(
            rec.allocations.unwrap(),
            vec![
                alloc(1, &[]),
                alloc(5, &[("a", "1"), ("b", "2")]),
                alloc(4, &[("c", "3")])
            ]
        );
    }

    #[test]
    fn earliest_reason_wins_across_rows_and_names_its_row() {
        let mut neg = row(7, 1);
        set(&mut neg, attrs::QUANTITY, AttrValue::N("-1".into()));
        let mut bad_ts = row(9, 1);
        set(
            &mut bad_ts,
            attrs::USAGE_SORT_KEY,
            AttrValue::s(format!("{ACCOUNT}#api#2026-11-30T11:00:09Z")),
        );
        for rows in [
            vec![neg.clone(), bad_ts.clone(), row(3, 1)],
            vec![row(3, 1), bad_ts.clone(), neg.clone()],
        ] {
            let mut f = fold();
            for r in &rows {
                f.push(r).unwrap();
            }
            let FoldOutcome::Rejected(rej) = f.finish() else {
                panic!()
            };
            assert_eq!(rej.reason, RejectReason::MalformedTimestamp);
            assert_eq!(
                rej.row_key.unwrap().sort_key,
                format!("{ACCOUNT}#api#2026-11-30T11:00:09Z")
            );
            let mut keys: Vec<_> = rej.rows.row_keys().map(|k| k.sort_key).collect();
            keys.sort();
            assert_eq!(keys.len(), 3);
            assert!(keys.contains(&format!("{ACCOUNT}#api#2026-11-30T11:00:09Z")));
        }
    }

    #[test]
    fn revisit_tells_lost_cleanup_from_late_usage() {
        let mut stored = SecondSet::new();
        stored.insert(5);
        assert!(matches!(
            classify_revisit(&group(), &stored, &row(5, 3)),
            RevisitRow::AlreadyAggregated(_)
        ));
        let RevisitRow::Late(late) = classify_revisit(&group(), &stored, &row(6, 3)) else {
            panic!()
        };
        assert_eq!((late.second, late.quantity), (Some(6), Some(3)));
        let mut junk = row(7, 1);
        set(&mut junk, attrs::QUANTITY, AttrValue::s("x"));
        let RevisitRow::Late(late) = classify_revisit(&group(), &stored, &junk) else {
            panic!()
        };
        assert_eq!(late.quantity, None);
        let mut done = row(8, 1);
        done.remove(attrs::METERING_PENDING);
        assert_eq!(
            classify_revisit(&group(), &stored, &done),
            RevisitRow::NotPending
        );
    }
}
