//! Time rules (docs/time-rules.md: metering lock, month-boundary grace, discoverer offsets,
//! submission expiry, the expedited deprovisioning flush).
//!
//! Everything is a function of an hour bucket, `now` (from the injected clock) and a validated
//! [`TimeConfig`]. Ages are whole hours: `age = floor(now, hour) − bucket`, so the current hour
//! has age 0 and meter-mode offset `k` looks at the bucket of age `k`.
//!
//! ```
//! use awsmp_contract::time::{meter_mode_bucket, TimeConfig};
//! use chrono::{TimeZone, Utc};
//! let cfg = TimeConfig::new(1, 24, 365).unwrap();
//! let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap();
//! // Lock 1: at 12:20 offset 1 aggregates 11:00–11:59:59.
//! assert_eq!(meter_mode_bucket(1, now, &cfg).unwrap().unwrap().to_string(), "2026-11-30T11");
//! ```

use chrono::{DateTime, Datelike, Duration, Timelike, Utc};

use crate::DomainError;
use crate::keys::HourBucket;

/// Smallest `MeteringLockHours` (docs/time-rules.md: validated 1–20).
pub const MIN_METERING_LOCK_HOURS: u32 = 1;
/// Largest `MeteringLockHours`: leaves ≥4 h of retry margin inside a 24 h window
/// (docs/time-rules.md).
pub const MAX_METERING_LOCK_HOURS: u32 = 20;
/// Default billable window: `BatchMeterUsage` accepts timestamps up to 24 h in the past
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>, `Timestamp`).
pub const DEFAULT_BILLABLE_WINDOW_HOURS: u32 = 24;
/// Largest billable window the API accepts (`UsageRecord.Timestamp`: "up to 24 hours in the
/// past", <https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>).
pub const MAX_BILLABLE_WINDOW_HOURS: u32 = 24;
/// Default raw-table TTL (`UsageTableTtlDays`, default 365; docs/time-rules.md).
pub const DEFAULT_USAGE_TTL_DAYS: u32 = 365;
/// Smallest non-zero raw-table TTL: ≥2 days, and greater than lock + 24 h (docs/time-rules.md).
pub const MIN_USAGE_TTL_DAYS: u32 = 2;
/// Meter-mode offsets run 1–23 (23 constant EventBridge targets; docs/time-rules.md).
pub const MAX_HOUR_OFFSET: u32 = 23;
/// Age-out runs as 7 shards (7 constant EventBridge targets; docs/time-rules.md).
pub const AGEOUT_SHARDS: u32 = 7;
/// Month-end grace: previous-month buckets switch to lock 0 at 03:00 UTC on the 1st
/// (docs/time-rules.md).
pub const GRACE_LOCK_ZERO_HOUR: u32 = 3;
/// Month-end grace: previous-month usage is accepted until 06:00 UTC on the 1st
/// (`UsageRecord.Timestamp`: "6-hour grace period", <https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>).
pub const GRACE_CLOSE_HOUR: u32 = 6;
/// The deprovisioning flush includes the current hour once `now ≥ expiry − 20 min`
/// (docs/time-rules.md): from that instant the hour still needs the fence's settle margin
/// (2 min), a heartbeat (1 min), a flush run and a submitter run (every 5 min each,
/// infra/main.yaml) — 13 minutes, 18 with one failed flush run — before the window closes.
pub const FLUSH_CURRENT_HOUR_LEAD_MINUTES: i64 = 20;
/// Default submission-expiry lookback: a month of hours, far beyond any "did not run" alarm.
pub const DEFAULT_EXPIRY_LOOKBACK_HOURS: u32 = 31 * 24;
/// Age-out lookback when the raw table has no TTL (rows never disappear on their own).
pub const NO_TTL_AGEOUT_LOOKBACK_HOURS: u32 = 366 * 24;

/// Validated time configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeConfig {
    metering_lock_hours: u32,
    billable_window_hours: u32,
    usage_ttl_days: u32,
    ageout_lookback_hours: u32,
    expiry_lookback_hours: u32,
}

impl Default for TimeConfig {
    /// Lock 1 h, window 24 h, raw TTL 365 days (the defaults of docs/time-rules.md).
    fn default() -> Self {
        Self::new(
            MIN_METERING_LOCK_HOURS,
            DEFAULT_BILLABLE_WINDOW_HOURS,
            DEFAULT_USAGE_TTL_DAYS,
        )
        .unwrap_or_else(|_| unreachable!("the defaults are valid"))
    }
}

impl TimeConfig {
    /// Validate `MeteringLockHours` (1–20), `BillableWindowHours` (lock < window ≤ 24) and
    /// `UsageTableTtlDays` (0 = no TTL, else ≥ 2 days and > lock + window hours).
    ///
    /// The age-out lookback defaults to the raw TTL (older rows are deleted by DynamoDB
    /// anyway; [`NO_TTL_AGEOUT_LOOKBACK_HOURS`] without a TTL) and the expiry lookback to
    /// [`DEFAULT_EXPIRY_LOOKBACK_HOURS`].
    pub fn new(
        metering_lock_hours: u32,
        billable_window_hours: u32,
        usage_ttl_days: u32,
    ) -> Result<Self, DomainError> {
        let bad = |m: String| Err(DomainError::InvalidTimeConfig(m));
        if !(MIN_METERING_LOCK_HOURS..=MAX_METERING_LOCK_HOURS).contains(&metering_lock_hours) {
            return bad(format!(
                "MeteringLockHours {metering_lock_hours} outside {MIN_METERING_LOCK_HOURS}..={MAX_METERING_LOCK_HOURS}"
            ));
        }
        if billable_window_hours > MAX_BILLABLE_WINDOW_HOURS {
            return bad(format!(
                "BillableWindowHours {billable_window_hours} above {MAX_BILLABLE_WINDOW_HOURS}"
            ));
        }
        if metering_lock_hours >= billable_window_hours {
            return bad(format!(
                "MeteringLockHours {metering_lock_hours} must be below BillableWindowHours {billable_window_hours}"
            ));
        }
        if usage_ttl_days != 0
            && (usage_ttl_days < MIN_USAGE_TTL_DAYS
                || u64::from(usage_ttl_days) * 24
                    <= u64::from(metering_lock_hours + billable_window_hours))
        {
            return bad(format!(
                "UsageTableTtlDays {usage_ttl_days} must be 0 (off) or ≥ {MIN_USAGE_TTL_DAYS} days and longer than lock + window ({} h)",
                metering_lock_hours + billable_window_hours
            ));
        }
        let ageout_lookback_hours = if usage_ttl_days == 0 {
            NO_TTL_AGEOUT_LOOKBACK_HOURS
        } else {
            usage_ttl_days.saturating_mul(24)
        };
        Ok(Self {
            metering_lock_hours,
            billable_window_hours,
            usage_ttl_days,
            ageout_lookback_hours,
            expiry_lookback_hours: DEFAULT_EXPIRY_LOOKBACK_HOURS.max(billable_window_hours),
        })
    }

    /// Override the age-out lookback (hours back from now); must reach past the window.
    pub fn with_ageout_lookback_hours(mut self, hours: u32) -> Result<Self, DomainError> {
        if hours < self.billable_window_hours {
            return Err(DomainError::InvalidTimeConfig(format!(
                "age-out lookback {hours} h is shorter than the billable window {} h",
                self.billable_window_hours
            )));
        }
        self.ageout_lookback_hours = hours;
        Ok(self)
    }

    /// Override the submission-expiry lookback (hours back from now); must reach past the window.
    pub fn with_expiry_lookback_hours(mut self, hours: u32) -> Result<Self, DomainError> {
        if hours < self.billable_window_hours {
            return Err(DomainError::InvalidTimeConfig(format!(
                "expiry lookback {hours} h is shorter than the billable window {} h",
                self.billable_window_hours
            )));
        }
        self.expiry_lookback_hours = hours;
        Ok(self)
    }

    /// `MeteringLockHours`.
    pub fn metering_lock_hours(&self) -> u32 {
        self.metering_lock_hours
    }
    /// `BillableWindowHours`.
    pub fn billable_window_hours(&self) -> u32 {
        self.billable_window_hours
    }
    /// `UsageTableTtlDays` (0 = off).
    pub fn usage_ttl_days(&self) -> u32 {
        self.usage_ttl_days
    }
    /// How far back (hours) the age-out sweep looks.
    pub fn ageout_lookback_hours(&self) -> u32 {
        self.ageout_lookback_hours
    }
    /// How far back (hours) the submission-expiry sweep looks.
    pub fn expiry_lookback_hours(&self) -> u32 {
        self.expiry_lookback_hours
    }

    /// Oldest age (hours) the pipeline processes: the last meter offset inside the window.
    pub fn oldest_processed_age(&self) -> u32 {
        (self.billable_window_hours - 1).min(MAX_HOUR_OFFSET)
    }
}

/// Whole hours from `bucket` to the hour containing `now` (0 = current hour, negative = future).
pub fn age_hours(bucket: HourBucket, now: DateTime<Utc>) -> i64 {
    HourBucket::containing(now).hours_since(bucket)
}

/// Meter mode: `floor(now, hour) − offset`.
pub fn bucket_for_offset(now: DateTime<Utc>, hour_offset: u32) -> HourBucket {
    HourBucket::containing(now).minus_hours(i64::from(hour_offset))
}

/// Where a bucket stands relative to the month boundary at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonthPhase {
    /// Same UTC month as now (or later).
    CurrentMonth,
    /// Previous month, before 03:00 UTC on the 1st: the configured lock still applies.
    PreviousMonthLocked,
    /// Previous month, 03:00–05:59:59 UTC on the 1st: lock 0, submit everything now.
    PreviousMonthLockZero,
    /// Previous month from 06:00 UTC on the 1st, or any older month: no longer billable.
    Closed,
}

/// True while the month-end grace is open: before 06:00 UTC on the 1st.
pub fn grace_open(now: DateTime<Utc>) -> bool {
    now.day() == 1 && now.hour() < GRACE_CLOSE_HOUR
}

/// Classify `bucket` against the month boundary at `now`.
pub fn month_phase(bucket: HourBucket, now: DateTime<Utc>) -> MonthPhase {
    let current = HourBucket::containing(now);
    if bucket >= current || bucket.same_month_as(current) {
        MonthPhase::CurrentMonth
    } else if bucket.is_in_month_before(current) && grace_open(now) {
        if now.hour() < GRACE_LOCK_ZERO_HOUR {
            MonthPhase::PreviousMonthLocked
        } else {
            MonthPhase::PreviousMonthLockZero
        }
    } else {
        MonthPhase::Closed
    }
}

/// True when `BatchMeterUsage` still accepts usage for `bucket` at `now`: the hour has
/// started, is younger than the billable window, and its month has not closed (previous-month
/// buckets stay billable until 06:00 UTC on the 1st, never after).
pub fn is_billable(bucket: HourBucket, now: DateTime<Utc>, cfg: &TimeConfig) -> bool {
    let age = age_hours(bucket, now);
    (0..i64::from(cfg.billable_window_hours)).contains(&age)
        && month_phase(bucket, now) != MonthPhase::Closed
}

/// The lock that applies to a bucket at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectiveLock {
    /// Meter once the bucket's age reaches this many hours.
    Hours(u32),
    /// The bucket's month has closed: never meter it again.
    Closed,
}

/// Month-aware lock: current month → configured lock; previous month before 03:00 on the 1st
/// → configured lock; previous month 03:00–06:00 → 0; afterwards closed.
pub fn effective_lock(bucket: HourBucket, now: DateTime<Utc>, cfg: &TimeConfig) -> EffectiveLock {
    match month_phase(bucket, now) {
        MonthPhase::CurrentMonth | MonthPhase::PreviousMonthLocked => {
            EffectiveLock::Hours(cfg.metering_lock_hours)
        }
        MonthPhase::PreviousMonthLockZero => EffectiveLock::Hours(0),
        MonthPhase::Closed => EffectiveLock::Closed,
    }
}

/// Meter mode: the bucket this `hour_offset` (1–23) target must aggregate at `now`, or `None`
/// when the run is a no-op (offset below the effective lock, or the bucket no longer billable).
pub fn meter_mode_bucket(
    hour_offset: u32,
    now: DateTime<Utc>,
    cfg: &TimeConfig,
) -> Result<Option<HourBucket>, DomainError> {
    if !(1..=MAX_HOUR_OFFSET).contains(&hour_offset) {
        return Err(DomainError::InvalidHourOffset(hour_offset));
    }
    let bucket = bucket_for_offset(now, hour_offset);
    let runs = is_billable(bucket, now, cfg)
        && match effective_lock(bucket, now, cfg) {
            EffectiveLock::Hours(lock) => hour_offset >= lock,
            EffectiveLock::Closed => false,
        };
    Ok(runs.then_some(bucket))
}

/// Zero-quantity deferral: a group summing to 0 is finalized as `Quantity 0` only at the
/// oldest processed edge (age ≥ the last meter offset in the window), or from 03:00 on the 1st
/// for a previous-month bucket (its last chance before the 06:00 cutoff). Earlier, submitting 0
/// would lock the hour at 0 (first-write-wins), so it is deferred.
pub fn is_zero_finalize_edge(bucket: HourBucket, now: DateTime<Utc>, cfg: &TimeConfig) -> bool {
    age_hours(bucket, now) >= i64::from(cfg.oldest_processed_age())
        || month_phase(bucket, now) == MonthPhase::PreviousMonthLockZero
}

/// Age-out: a raw bucket still pending at `now` may be expired when it is in the past, no
/// longer billable, and not a previous-month bucket while the month-end grace is open
/// (before 06:00 UTC on the 1st the sweep never expires what the grace preserves).
pub fn is_ageout_eligible(bucket: HourBucket, now: DateTime<Utc>, cfg: &TimeConfig) -> bool {
    let phase = month_phase(bucket, now);
    age_hours(bucket, now) >= 1
        && !is_billable(bucket, now, cfg)
        && !matches!(
            phase,
            MonthPhase::PreviousMonthLocked | MonthPhase::PreviousMonthLockZero
        )
}

/// Age-out shard `shard` (0–6): every bucket with `hours_back % 7 == shard` that is
/// age-out-eligible, from the first expired hour back to the configured lookback, newest
/// first. Shards are disjoint and together cover every eligible bucket in the lookback, so no
/// run of empty hours can hide an older pending row; each run costs at most
/// `lookback / 7 + 1` one-bucket GSI queries.
pub fn ageout_shard_buckets(
    shard: u32,
    now: DateTime<Utc>,
    cfg: &TimeConfig,
) -> Result<Vec<HourBucket>, DomainError> {
    if shard >= AGEOUT_SHARDS {
        return Err(DomainError::InvalidShard(shard));
    }
    let current = HourBucket::containing(now);
    Ok((1..=cfg.ageout_lookback_hours)
        .filter(|hours_back| hours_back % AGEOUT_SHARDS == shard)
        .map(|hours_back| current.minus_hours(i64::from(hours_back)))
        .filter(|&b| is_ageout_eligible(b, now, cfg))
        .collect())
}

/// Submission expiry: an aggregated record for `bucket` can no longer be billed at `now`.
pub fn is_submission_expired(bucket: HourBucket, now: DateTime<Utc>, cfg: &TimeConfig) -> bool {
    age_hours(bucket, now) >= 1 && !is_billable(bucket, now, cfg)
}

/// Submission expiry sweep: every expired bucket from the first expired hour back to the
/// expiry lookback, newest first.
pub fn expiry_buckets(now: DateTime<Utc>, cfg: &TimeConfig) -> Vec<HourBucket> {
    let current = HourBucket::containing(now);
    (1..=cfg.expiry_lookback_hours)
        .map(|hours_back| current.minus_hours(i64::from(hours_back)))
        .filter(|&b| is_submission_expired(b, now, cfg))
        .collect()
}

/// Buckets of the completed hours inside the window, oldest first: `now − (window−1)h …
/// now − 1h`, dropping any whose month has closed.
fn completed_window_buckets(now: DateTime<Utc>, cfg: &TimeConfig) -> Vec<HourBucket> {
    let current = HourBucket::containing(now);
    (1..=cfg.oldest_processed_age())
        .rev()
        .map(|age| current.minus_hours(i64::from(age)))
        .filter(|&b| is_billable(b, now, cfg))
        .collect()
}

/// Deprovisioning flush (lock bypassed): `now − 23h … now − 1h`, plus the current hour once
/// `now ≥ expiry − 20 min`; oldest first.
pub fn deprovisioning_flush_buckets(
    now: DateTime<Utc>,
    expiry: DateTime<Utc>,
    cfg: &TimeConfig,
) -> Vec<HourBucket> {
    let mut buckets = completed_window_buckets(now, cfg);
    if flush_includes_current_hour(now, expiry) {
        buckets.push(HourBucket::containing(now));
    }
    buckets
}

/// True once the current hour must be flushed for a license deprovisioning at `expiry`.
pub fn flush_includes_current_hour(now: DateTime<Utc>, expiry: DateTime<Utc>) -> bool {
    now >= expiry - Duration::minutes(FLUSH_CURRENT_HOUR_LEAD_MINUTES)
}

/// Submitter pending window, oldest first: `now − 23h … now − 1h`, plus the current hour when
/// `include_current_hour` (deprovisioning licenses only).
pub fn submitter_pending_buckets(
    now: DateTime<Utc>,
    cfg: &TimeConfig,
    include_current_hour: bool,
) -> Vec<HourBucket> {
    let mut buckets = completed_window_buckets(now, cfg);
    if include_current_hour {
        buckets.push(HourBucket::containing(now));
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }
    fn b(s: &str) -> HourBucket {
        s.parse().unwrap()
    }

    #[test]
    fn config_validation() {
        assert!(TimeConfig::new(0, 24, 365).is_err());
        assert!(TimeConfig::new(21, 24, 365).is_err());
        assert!(TimeConfig::new(20, 24, 365).is_ok());
        assert!(
            TimeConfig::new(6, 6, 365).is_err(),
            "lock must be below the window"
        );
        assert!(TimeConfig::new(5, 6, 365).is_ok());
        assert!(TimeConfig::new(1, 25, 365).is_err());
        assert!(TimeConfig::new(1, 24, 1).is_err());
        assert!(TimeConfig::new(1, 24, 0).is_ok());
        assert!(TimeConfig::new(20, 24, 2).is_ok(), "48 h > 44 h");
        let cfg = TimeConfig::new(1, 24, 30).unwrap();
        assert_eq!(cfg.ageout_lookback_hours(), 720);
        assert_eq!(
            TimeConfig::new(1, 24, 0).unwrap().ageout_lookback_hours(),
            NO_TTL_AGEOUT_LOOKBACK_HOURS
        );
        assert!(cfg.with_ageout_lookback_hours(23).is_err());
        assert_eq!(
            cfg.with_expiry_lookback_hours(48)
                .unwrap()
                .expiry_lookback_hours(),
            48
        );
        assert_eq!(TimeConfig::default().metering_lock_hours(), 1);
        assert_eq!(TimeConfig::new(1, 6, 0).unwrap().oldest_processed_age(), 5);
    }

    #[test]
    fn lock_examples_from_the_reference() {
        let now = utc(2026, 11, 30, 12, 20, 0);
        let lock1 = TimeConfig::new(1, 24, 365).unwrap();
        assert_eq!(
            meter_mode_bucket(1, now, &lock1).unwrap(),
            Some(b("2026-11-30T11"))
        );
        assert_eq!(
            meter_mode_bucket(23, now, &lock1).unwrap(),
            Some(b("2026-11-29T13"))
        );
        let lock6 = TimeConfig::new(6, 24, 365).unwrap();
        for offset in 1..6 {
            assert_eq!(meter_mode_bucket(offset, now, &lock6).unwrap(), None);
        }
        assert_eq!(
            meter_mode_bucket(6, now, &lock6).unwrap(),
            Some(b("2026-11-30T06"))
        );
        assert!(meter_mode_bucket(0, now, &lock1).is_err());
        assert!(meter_mode_bucket(24, now, &lock1).is_err());
    }

    #[test]
    fn month_boundary_instants() {
        let cfg = TimeConfig::new(6, 24, 365).unwrap();
        let prev = b("2028-02-29T22");
        let at = |h, m, s| utc(2028, 3, 1, h, m, s);
        assert_eq!(
            effective_lock(prev, at(2, 59, 59), &cfg),
            EffectiveLock::Hours(6)
        );
        assert_eq!(
            effective_lock(prev, at(3, 0, 0), &cfg),
            EffectiveLock::Hours(0)
        );
        assert_eq!(
            effective_lock(prev, at(5, 59, 59), &cfg),
            EffectiveLock::Hours(0)
        );
        assert_eq!(
            effective_lock(prev, at(6, 0, 0), &cfg),
            EffectiveLock::Closed
        );
        // 02:59: age 4 < lock 6 → no-op; 03:00: age 5 ≥ 0 → runs; 06:00: closed.
        assert_eq!(meter_mode_bucket(4, at(2, 59, 0), &cfg).unwrap(), None);
        assert_eq!(meter_mode_bucket(5, at(3, 0, 0), &cfg).unwrap(), Some(prev));
        assert_eq!(
            meter_mode_bucket(7, at(5, 59, 59), &cfg).unwrap(),
            Some(prev)
        );
        assert_eq!(meter_mode_bucket(8, at(6, 0, 0), &cfg).unwrap(), None);
        assert!(is_billable(prev, at(5, 59, 59), &cfg));
        assert!(!is_billable(prev, at(6, 0, 0), &cfg));
        // Age-out: never before 06:00 for the previous month, even past the window.
        let old_prev = b("2028-02-28T03");
        assert!(!is_billable(old_prev, at(5, 0, 0), &cfg));
        assert!(!is_ageout_eligible(old_prev, at(5, 59, 59), &cfg));
        assert!(is_ageout_eligible(old_prev, at(6, 0, 0), &cfg));
        assert!(is_ageout_eligible(prev, at(6, 0, 0), &cfg));
        // Expiry follows billability: the old bucket is past the window already.
        assert!(is_submission_expired(old_prev, at(5, 0, 0), &cfg));
        assert!(!is_submission_expired(prev, at(5, 59, 59), &cfg));
        assert!(is_submission_expired(prev, at(6, 0, 0), &cfg));
        // Zero groups finalize at once from 03:00 for the previous month.
        assert!(!is_zero_finalize_edge(prev, at(2, 59, 59), &cfg));
        assert!(is_zero_finalize_edge(prev, at(3, 0, 0), &cfg));
        // Current-month buckets are untouched by the boundary.
        assert_eq!(
            effective_lock(b("2028-03-01T00"), at(3, 0, 0), &cfg),
            EffectiveLock::Hours(6)
        );
    }

    #[test]
    fn year_boundary_is_a_month_boundary() {
        let cfg = TimeConfig::default();
        let dec = b("2027-12-31T23");
        assert_eq!(
            month_phase(dec, utc(2028, 1, 1, 4, 0, 0)),
            MonthPhase::PreviousMonthLockZero
        );
        assert_eq!(
            month_phase(dec, utc(2028, 1, 1, 6, 0, 0)),
            MonthPhase::Closed
        );
        assert!(is_submission_expired(dec, utc(2028, 1, 1, 6, 0, 0), &cfg));
    }

    #[test]
    fn zero_edge_is_the_oldest_offset() {
        let cfg = TimeConfig::default();
        let now = utc(2026, 11, 30, 12, 20, 0);
        assert!(!is_zero_finalize_edge(
            bucket_for_offset(now, 22),
            now,
            &cfg
        ));
        assert!(is_zero_finalize_edge(bucket_for_offset(now, 23), now, &cfg));
    }

    #[test]
    fn windows_for_submitter_and_flush() {
        let cfg = TimeConfig::default();
        let now = utc(2026, 11, 30, 12, 20, 0);
        let w = submitter_pending_buckets(now, &cfg, false);
        assert_eq!(w.len(), 23);
        assert_eq!(w[0], b("2026-11-29T13"));
        assert_eq!(*w.last().unwrap(), b("2026-11-30T11"));
        assert_eq!(
            submitter_pending_buckets(now, &cfg, true).last(),
            Some(&b("2026-11-30T12"))
        );
        let expiry = utc(2026, 11, 30, 12, 40, 0);
        assert_eq!(deprovisioning_flush_buckets(now, expiry, &cfg).len(), 24);
        assert_eq!(
            deprovisioning_flush_buckets(utc(2026, 11, 30, 12, 19, 59), expiry, &cfg).len(),
            23
        );
        // Month closed after 06:00 on the 1st: previous-month hours leave the window.
        let first = utc(2026, 12, 1, 6, 0, 0);
        let w = submitter_pending_buckets(first, &cfg, false);
        assert_eq!(w.len(), 6);
        assert_eq!(w[0], b("2026-12-01T00"));
        assert_eq!(w.first().unwrap().start().day(), 1);
    }

    #[test]
    fn a_license_deprovisioned_early_in_an_hour_has_it_flushed_before_its_window_closes() {
        // A license deprovisioned at 10:05 (window closes 11:05): its hour 10 is flushed as
        // the current hour from 10:45, twenty minutes before the close, not from 10:55.
        let expiry = utc(2026, 11, 30, 11, 5, 0);
        assert!(!flush_includes_current_hour(
            utc(2026, 11, 30, 10, 44, 59),
            expiry
        ));
        assert!(flush_includes_current_hour(
            utc(2026, 11, 30, 10, 45, 0),
            expiry
        ));
        let w = deprovisioning_flush_buckets(
            utc(2026, 11, 30, 10, 45, 0),
            expiry,
            &TimeConfig::default(),
        );
        assert_eq!(w.last(), Some(&b("2026-11-30T10")));
    }

    #[test]
    fn expiry_sweep_has_no_blind_spot() {
        let cfg = TimeConfig::new(1, 24, 30)
            .unwrap()
            .with_expiry_lookback_hours(100)
            .unwrap();
        let now = utc(2026, 11, 30, 12, 20, 0);
        let e = expiry_buckets(now, &cfg);
        assert_eq!(e.len(), 100 - 23);
        assert_eq!(e[0], b("2026-11-29T12"));
        assert_eq!(
            *e.last().unwrap(),
            HourBucket::containing(now).minus_hours(100)
        );
    }

    #[test]
    fn shards_validate() {
        assert!(ageout_shard_buckets(7, Utc::now(), &TimeConfig::default()).is_err());
    }
}
