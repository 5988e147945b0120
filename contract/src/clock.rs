//! The clock port: all time in the pipeline comes from one injectable [`Clock`] (docs/time-rules.md), so
//! every rule can be exercised at any instant, month and year ends included.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

/// Source of the current UTC instant.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to; clones share the same instant.
///
/// ```
/// use awsmp_contract::clock::{Clock, FixedClock};
/// use chrono::{Duration, TimeZone, Utc};
/// let clock = FixedClock::new(Utc.with_ymd_and_hms(2028, 2, 29, 23, 59, 59).unwrap());
/// clock.advance(Duration::seconds(1));
/// assert_eq!(clock.now(), Utc.with_ymd_and_hms(2028, 3, 1, 0, 0, 0).unwrap());
/// ```
#[derive(Debug, Clone)]
pub struct FixedClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl FixedClock {
    /// A clock stopped at `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(now)),
        }
    }

    /// Move the clock to `now` (backwards too: clock jumps are a fault the tests inject).
    pub fn set(&self, now: DateTime<Utc>) {
        *self.lock() = now;
    }

    /// Move the clock by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.lock();
        *now += by;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // A poisoned lock only means another test thread panicked while holding a plain value.
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> DateTime<Utc> {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> DateTime<Utc> {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn fixed_clock_clones_share_the_instant() {
        let a = FixedClock::new(Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap());
        let b = a.clone();
        a.set(Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap());
        assert_eq!(b.now(), Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap());
        let dynamic: Arc<dyn Clock> = Arc::new(b);
        assert_eq!(dynamic.now(), a.now());
    }

    #[test]
    fn system_clock_is_close_to_now() {
        let d = SystemClock.now() - Utc::now();
        assert!(d.num_seconds().abs() < 5);
    }
}
