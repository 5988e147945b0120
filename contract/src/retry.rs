//! The one retry policy of awsmp. What is retryable is decided by the caller's error type
//! ([`Retryable::is_retryable`]); how retries run — how many attempts, how long to wait — is
//! decided here, once, for the producer's Kinesis sink, the consumer's store calls, the
//! pipeline's store calls and the submitter's write-backs.
//!
//! The wait before retry `n` (0 = the first retry) is *full jitter*: a uniformly random delay in
//! `[0, min(cap, base × 2ⁿ)]`, as described in the AWS Architecture Blog post
//! <https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/>. Full jitter
//! keeps many callers that failed together from retrying together.
//!
//! [`retry_with`] runs a call under the policy with the caller's sleep and delay source (the
//! deterministic simulation passes its virtual clock); `awsmp_aws::retry` is the same loop on
//! the tokio clock.

use std::future::Future;
use std::time::Duration;

use rand::Rng;

/// Whether an error is worth another attempt of the same, idempotent call: throttling,
/// service-side 5xx, transport failures. Validation errors, failed conditions and missing
/// resources are not.
pub trait Retryable {
    /// True when the same call may succeed if tried again.
    fn is_retryable(&self) -> bool;
}

/// How retries run: at most `max_attempts` calls in all (the first included), waiting a full-
/// jitter delay in `[0, min(cap, base × 2ⁿ)]` before retry `n` (0 = the first retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Calls in all, the first one included (1 = no retry). Never less than 1.
    pub max_attempts: u32,
    /// Ceiling of the first retry's delay.
    pub base: Duration,
    /// Largest ceiling of any delay.
    pub cap: Duration,
}

impl RetryPolicy {
    /// A policy of `max_attempts` calls in all, delays from `base` doubling up to `cap`.
    pub const fn new(max_attempts: u32, base: Duration, cap: Duration) -> Self {
        RetryPolicy {
            max_attempts,
            base,
            cap,
        }
    }

    /// The same delays with another number of attempts.
    pub const fn with_attempts(self, max_attempts: u32) -> Self {
        RetryPolicy {
            max_attempts,
            ..self
        }
    }

    /// The upper bound of the delay before retry `retry` (0 = the first retry):
    /// `min(cap, base × 2^retry)`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(self.cap)
            .min(self.cap)
    }

    /// A full-jitter delay before retry `retry`: uniform in `[0, ceiling(retry)]`.
    pub fn delay(&self, retry: u32, rng: &mut impl Rng) -> Duration {
        let nanos = u64::try_from(self.ceiling(retry).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=nanos))
    }

    /// Whether a call that just failed as attempt `retry` (0 = the first call) may be retried.
    pub fn allows_retry(&self, retry: u32) -> bool {
        retry.saturating_add(1) < self.max_attempts.max(1)
    }
}

/// Run `op` until it succeeds, fails with an error that is not [`Retryable`], or has been
/// called `policy.max_attempts` times; between calls, sleep `sleep(delay(retry))`. The last
/// error is returned as it was. A seeded RNG and a virtual clock's sleep make a retrying call
/// deterministic.
pub async fn retry_with<T, E, F, Fut, D, S, SFut>(
    policy: &RetryPolicy,
    mut delay: D,
    mut sleep: S,
    mut op: F,
) -> Result<T, E>
where
    E: Retryable,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    D: FnMut(u32) -> Duration,
    S: FnMut(Duration) -> SFut,
    SFut: Future<Output = ()>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Err(e) if e.is_retryable() && policy.allows_retry(attempt) => {
                sleep(delay(attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[derive(Debug, PartialEq)]
    enum E {
        Transient,
        Fatal,
    }
    impl Retryable for E {
        fn is_retryable(&self) -> bool {
            *self == E::Transient
        }
    }

    const P: RetryPolicy =
        RetryPolicy::new(4, Duration::from_millis(10), Duration::from_millis(50));

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let c: Vec<_> = (0..6).map(|r| P.ceiling(r).as_millis()).collect();
        assert_eq!(c, [10, 20, 40, 50, 50, 50]);
        assert_eq!(P.ceiling(u32::MAX), P.cap);
    }

    #[test]
    fn delays_stay_within_their_ceiling_and_vary() {
        let mut rng = StdRng::seed_from_u64(7);
        for r in 0..40 {
            assert!(P.delay(r, &mut rng) <= P.ceiling(r));
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| P.delay(3, &mut rng)).collect();
        assert!(spread.len() > 10, "full jitter spreads delays");
        assert_eq!(
            RetryPolicy::new(3, Duration::ZERO, P.cap).delay(2, &mut rng),
            Duration::ZERO
        );
    }

    #[test]
    fn retry_with_uses_the_given_delays_and_sleep() {
        let slept = std::cell::RefCell::new(Vec::new());
        let out: Result<(), E> = futures::executor::block_on(retry_with(
            &P.with_attempts(3),
            |r| Duration::from_millis(u64::from(r) + 1),
            |d| {
                slept.borrow_mut().push(d);
                async {}
            },
            || async { Err(E::Transient) },
        ));
        assert_eq!(out, Err(E::Transient));
        assert_eq!(
            *slept.borrow(),
            [Duration::from_millis(1), Duration::from_millis(2)]
        );
    }

    #[test]
    fn retry_with_returns_a_non_retryable_error_at_once() {
        let calls = std::cell::Cell::new(0);
        let out: Result<(), E> = futures::executor::block_on(retry_with(
            &P,
            |_| Duration::ZERO,
            |_| async {},
            || {
                calls.set(calls.get() + 1);
                async { Err(E::Fatal) }
            },
        ));
        assert_eq!((out, calls.get()), (Err(E::Fatal), 1));
    }

    #[test]
    fn one_attempt_never_retries() {
        assert!(!P.with_attempts(1).allows_retry(0));
        assert!(!P.with_attempts(0).allows_retry(0));
        assert!(P.allows_retry(2) && !P.allows_retry(3));
    }
}
