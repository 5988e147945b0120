//! Property and exhaustive tests of the time rules (docs/time-rules.md): every hour of a leap year with
//! every lock, the month-boundary instants, and age-out / expiry sweeps without blind spots.

use std::collections::{BTreeMap, BTreeSet};

use awsmp_contract::keys::HourBucket;
use awsmp_contract::time::{
    AGEOUT_SHARDS, EffectiveLock, MAX_HOUR_OFFSET, MonthPhase, TimeConfig, age_hours,
    ageout_shard_buckets, effective_lock, expiry_buckets, is_ageout_eligible, is_billable,
    is_submission_expired, is_zero_finalize_edge, meter_mode_bucket, month_phase,
    submitter_pending_buckets,
};
use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc};
use proptest::prelude::*;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

/// Start of the calendar month after the one containing `b`.
fn next_month_start(b: HourBucket) -> DateTime<Utc> {
    let s = b.start();
    let (y, m) = if s.month() == 12 {
        (s.year() + 1, 1)
    } else {
        (s.year(), s.month() + 1)
    };
    utc(y, m, 1, 0, 0, 0)
}

/// GIVEN every hour of 2028 (a leap year: Feb 29, every month end, the year end) and every
/// lock 1..=20, WHEN the meter-mode targets run once an hour, THEN each bucket is metered by
/// exactly one offset at a time (the offset equal to its age), first at age = lock (or at
/// 03:00 on the 1st for a previous-month bucket), then on every run until its window closes
/// (age 23, or 06:00 on the 1st), and never outside the billable window.
#[test]
fn every_hour_of_a_leap_year_is_metered_exactly_in_its_window() {
    let first_bucket = HourBucket::containing(utc(2028, 1, 1, 0, 0, 0));
    let last_bucket = HourBucket::containing(utc(2028, 12, 31, 23, 0, 0));
    for lock in 1..=20u32 {
        let cfg = TimeConfig::new(lock, 24, 365).unwrap();
        // bucket → instants (as hour index) at which it was metered
        let mut runs: BTreeMap<HourBucket, Vec<i64>> = BTreeMap::new();
        let mut hour = first_bucket.minus_hours(30);
        while hour <= last_bucket.plus_hours(30) {
            let now = hour.start() + Duration::minutes(17);
            let mut seen_this_instant = BTreeSet::new();
            for offset in 1..=MAX_HOUR_OFFSET {
                if let Some(b) = meter_mode_bucket(offset, now, &cfg).unwrap() {
                    assert_eq!(age_hours(b, now), i64::from(offset));
                    assert!(
                        seen_this_instant.insert(b),
                        "bucket {b} metered twice at {now}"
                    );
                    assert!(
                        is_billable(b, now, &cfg),
                        "metered {b} outside its window at {now}"
                    );
                    runs.entry(b).or_default().push(hour.index());
                }
            }
            hour = hour.plus_hours(1);
        }
        let mut b = first_bucket;
        while b <= last_bucket {
            let at = runs
                .get(&b)
                .unwrap_or_else(|| panic!("lock {lock}: bucket {b} never metered"));
            let next_month = HourBucket::containing(next_month_start(b));
            let lock_zero_from = next_month.plus_hours(3);
            let closes_at = next_month.plus_hours(6);
            let expected_first = b.plus_hours(i64::from(lock)).min(lock_zero_from);
            let expected_last = b.plus_hours(23).min(closes_at.minus_hours(1));
            let expected: Vec<i64> = (expected_first.index()..=expected_last.index()).collect();
            assert_eq!(at, &expected, "lock {lock}, bucket {b}");
            b = b.plus_hours(1);
        }
    }
}

/// The four instants of the month-end grace, for every month boundary of 2028 (and the year
/// end into 2029), every lock, and previous-month buckets of every age the window allows.
#[test]
fn month_boundary_instants_for_every_month_and_lock() {
    let mut month_starts: Vec<DateTime<Utc>> = (1..=12).map(|m| utc(2028, m, 1, 0, 0, 0)).collect();
    month_starts.push(utc(2029, 1, 1, 0, 0, 0));
    for start in month_starts {
        for lock in 1..=20u32 {
            let cfg = TimeConfig::new(lock, 24, 365).unwrap();
            let at = |h: i64, s: i64| start + Duration::hours(h) + Duration::seconds(s);
            let (t0259, t0300, t0559, t0600) =
                (at(2, 59 * 60 + 59), at(3, 0), at(5, 59 * 60 + 59), at(6, 0));
            for back in 1..=24i64 {
                let prev = HourBucket::containing(start).minus_hours(back);
                assert_eq!(month_phase(prev, t0259), MonthPhase::PreviousMonthLocked);
                assert_eq!(
                    effective_lock(prev, t0259, &cfg),
                    EffectiveLock::Hours(lock)
                );
                assert_eq!(effective_lock(prev, t0300, &cfg), EffectiveLock::Hours(0));
                assert_eq!(effective_lock(prev, t0559, &cfg), EffectiveLock::Hours(0));
                assert_eq!(effective_lock(prev, t0600, &cfg), EffectiveLock::Closed);
                for now in [t0259, t0300, t0559] {
                    let age = age_hours(prev, now);
                    assert_eq!(is_billable(prev, now, &cfg), age < 24, "{prev} at {now}");
                    assert!(
                        !is_ageout_eligible(prev, now, &cfg),
                        "age-out before 06:00: {prev} at {now}"
                    );
                    assert_eq!(is_submission_expired(prev, now, &cfg), age >= 24);
                }
                assert!(!is_billable(prev, t0600, &cfg));
                assert!(is_ageout_eligible(prev, t0600, &cfg));
                assert!(is_submission_expired(prev, t0600, &cfg));
                // Meter mode: before 03:00 only from the lock on; 03:00–06:00 every offset.
                let age_0259 = age_hours(prev, t0259) as u32;
                if age_0259 <= MAX_HOUR_OFFSET {
                    let runs = meter_mode_bucket(age_0259, t0259, &cfg).unwrap().is_some();
                    assert_eq!(runs, age_0259 >= lock && age_0259 < 24);
                }
                for now in [t0300, t0559] {
                    let age = age_hours(prev, now) as u32;
                    if age <= MAX_HOUR_OFFSET {
                        assert_eq!(meter_mode_bucket(age, now, &cfg).unwrap(), Some(prev));
                        assert!(is_zero_finalize_edge(prev, now, &cfg));
                    }
                }
                let age_0600 = age_hours(prev, t0600) as u32;
                if age_0600 <= MAX_HOUR_OFFSET {
                    assert_eq!(meter_mode_bucket(age_0600, t0600, &cfg).unwrap(), None);
                }
            }
            // Current-month buckets keep the configured lock throughout.
            for now in [t0259, t0300, t0559, t0600] {
                let cur = HourBucket::containing(start);
                assert_eq!(effective_lock(cur, now, &cfg), EffectiveLock::Hours(lock));
            }
        }
    }
}

fn any_instant() -> impl Strategy<Value = DateTime<Utc>> {
    // 2027-01-01 … 2030-01-01, biased towards month boundaries half of the time.
    let lo = utc(2027, 1, 1, 0, 0, 0).timestamp();
    let hi = utc(2030, 1, 1, 0, 0, 0).timestamp();
    prop_oneof![
        (lo..hi).prop_map(|s| Utc.timestamp_opt(s, 0).unwrap()),
        (2027..2030i32, 1..=12u32, 0..8 * 3600i64)
            .prop_map(|(y, m, s)| utc(y, m, 1, 0, 0, 0) + Duration::seconds(s)),
    ]
}

fn any_config() -> impl Strategy<Value = TimeConfig> {
    (1..=20u32, 0..=4u32, 2..=20u32).prop_map(|(lock, extra, ttl)| {
        let window = (lock + 1 + extra).min(24).max(lock + 1);
        TimeConfig::new(lock, window, ttl).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Age-out shards are disjoint and together cover every eligible bucket from the first
    /// expired hour back to the lookback: no run of empty hours can hide an older row.
    #[test]
    fn ageout_shards_partition_every_expired_bucket(now in any_instant(), cfg in any_config()) {
        let mut union = BTreeSet::new();
        for shard in 0..AGEOUT_SHARDS {
            for b in ageout_shard_buckets(shard, now, &cfg).unwrap() {
                prop_assert!(is_ageout_eligible(b, now, &cfg));
                prop_assert_eq!(age_hours(b, now) % i64::from(AGEOUT_SHARDS), i64::from(shard));
                prop_assert!(union.insert(b), "bucket {} in two shards", b);
            }
        }
        let current = HourBucket::containing(now);
        let expected: BTreeSet<HourBucket> = (1..=i64::from(cfg.ageout_lookback_hours()))
            .map(|back| current.minus_hours(back))
            .filter(|b| is_ageout_eligible(*b, now, &cfg))
            .collect();
        prop_assert_eq!(&union, &expected);
        // Everything at or past the window edge is covered unless the month-end grace holds it.
        for back in i64::from(cfg.billable_window_hours())..=i64::from(cfg.ageout_lookback_hours()) {
            let b = current.minus_hours(back);
            let held = matches!(month_phase(b, now), MonthPhase::PreviousMonthLocked | MonthPhase::PreviousMonthLockZero);
            prop_assert_eq!(union.contains(&b), !held);
        }
    }

    /// The expiry sweep lists exactly the buckets that can no longer be billed in its lookback.
    #[test]
    fn expiry_sweep_lists_every_unbillable_bucket(now in any_instant(), cfg in any_config(), lookback in 24u32..400) {
        let cfg = cfg.with_expiry_lookback_hours(lookback).unwrap();
        let swept: BTreeSet<HourBucket> = expiry_buckets(now, &cfg).into_iter().collect();
        let current = HourBucket::containing(now);
        for back in 1..=i64::from(lookback) {
            let b = current.minus_hours(back);
            prop_assert_eq!(swept.contains(&b), !is_billable(b, now, &cfg));
        }
        prop_assert!(swept.iter().all(|b| age_hours(*b, now) >= 1 && age_hours(*b, now) <= i64::from(lookback)));
    }

    /// Billability never reaches past the window, the future, or a closed month.
    #[test]
    fn billable_means_inside_the_window_and_an_open_month(now in any_instant(), cfg in any_config(), back in -3i64..60) {
        let b = HourBucket::containing(now).minus_hours(back);
        let billable = is_billable(b, now, &cfg);
        let cur = HourBucket::containing(now);
        let grace_holds = b.is_in_month_before(cur) && now.day() == 1 && now.hour() < 6;
        let closed_month = !(b.same_month_as(cur) || grace_holds);
        prop_assert_eq!(billable, back >= 0 && back < i64::from(cfg.billable_window_hours()) && !closed_month);
    }

    /// The submitter window is oldest first, inside the window, and misses no billable
    /// completed hour.
    #[test]
    fn submitter_window_is_complete_and_oldest_first(now in any_instant(), cfg in any_config(), current in any::<bool>()) {
        let w = submitter_pending_buckets(now, &cfg, current);
        prop_assert!(w.windows(2).all(|p| p[0] < p[1]));
        let cur = HourBucket::containing(now);
        prop_assert_eq!(w.last() == Some(&cur), current);
        for back in 1..i64::from(cfg.billable_window_hours()) {
            let b = cur.minus_hours(back);
            prop_assert_eq!(w.contains(&b), is_billable(b, now, &cfg));
        }
    }
}

/// A configuration reads back what it was built with, and each lookback may be exactly the
/// window (it must reach past every billable hour, no further is required) but not shorter.
#[test]
fn a_configuration_reads_back_and_a_lookback_may_equal_the_window() {
    let cfg = TimeConfig::new(5, 6, 30).unwrap();
    assert_eq!(
        (
            cfg.metering_lock_hours(),
            cfg.billable_window_hours(),
            cfg.usage_ttl_days()
        ),
        (5, 6, 30)
    );
    assert_eq!(TimeConfig::new(1, 24, 0).unwrap().usage_ttl_days(), 0);
    let day = TimeConfig::default();
    assert_eq!(
        day.with_ageout_lookback_hours(24)
            .unwrap()
            .ageout_lookback_hours(),
        24
    );
    assert_eq!(
        day.with_expiry_lookback_hours(24)
            .unwrap()
            .expiry_lookback_hours(),
        24
    );
    assert!(day.with_ageout_lookback_hours(23).is_err());
    assert!(day.with_expiry_lookback_hours(23).is_err());
    assert_eq!(
        day.with_expiry_lookback_hours(100)
            .unwrap()
            .expiry_lookback_hours(),
        100
    );
}

/// By default the expiry sweep reaches a month of hours back (31 days: a record left pending
/// by a month of outage is still expired), and without a raw-table TTL the age-out sweep a
/// leap year's (366 days: rows never disappear on their own).
#[test]
fn the_default_sweeps_reach_a_month_and_without_a_ttl_a_year_back() {
    let now = utc(2028, 6, 15, 12, 30, 0);
    let current = HourBucket::containing(now);
    let cfg = TimeConfig::default();
    let expiry = expiry_buckets(now, &cfg);
    assert_eq!(expiry.last(), Some(&current.minus_hours(31 * 24)));
    // 24 to 744 hours back: the hours 1 to 23 back are still billable.
    assert_eq!(expiry.len(), 31 * 24 - 23);
    let no_ttl = TimeConfig::new(1, 24, 0).unwrap();
    let oldest = (0..AGEOUT_SHARDS)
        .flat_map(|shard| ageout_shard_buckets(shard, now, &no_ttl).unwrap())
        .min()
        .unwrap();
    assert_eq!(oldest, current.minus_hours(366 * 24));
}
