//! The workspace's retry policy ([`awsmp_contract::retry`]) on the tokio clock.
//!
//! Delays are drawn from the thread's random generator, or, once [`seed_delays`] installed
//! one on the thread, from a seeded generator: the deterministic simulation runs each
//! schedule on one thread and seeds it with the schedule's seed, so the handlers' retries
//! sleep the same delays, and wake in the same order, on every replay.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use awsmp_contract::retry::{RetryPolicy, Retryable, retry_with};
use rand::SeedableRng;
use rand::rngs::StdRng;

thread_local! {
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Draw this thread's retry delays from a generator seeded with `seed`, or (`None`) from the
/// thread's random generator again.
pub fn seed_delays(seed: Option<u64>) {
    SEEDED.with(|s| *s.borrow_mut() = seed.map(StdRng::seed_from_u64));
}

/// A full-jitter delay before retry `retry` of `policy` ([`RetryPolicy::delay`]), from the
/// thread's seeded generator when [`seed_delays`] installed one.
pub fn jitter(policy: &RetryPolicy, retry: u32) -> Duration {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => policy.delay(retry, rng),
        None => policy.delay(retry, &mut rand::rng()),
    })
}

/// Run `op` until it succeeds, fails with an error that is not [`Retryable`], or has been
/// called `policy.max_attempts` times; between calls, sleep a full-jitter delay on the tokio
/// clock. The last error is returned as it was.
pub async fn retry<T, E, F, Fut>(policy: &RetryPolicy, op: F) -> Result<T, E>
where
    E: Retryable,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    retry_with(
        policy,
        // The thread-local RNG is used and dropped inside the closure, never held across an
        // await, so the returned future stays `Send`.
        |retry| jitter(policy, retry),
        tokio::time::sleep,
        op,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Duration;

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

    #[tokio::test(start_paused = true)]
    async fn retries_retryable_errors_up_to_max_attempts() {
        let calls = Cell::new(0);
        let out: Result<(), E> = retry(&P, || {
            calls.set(calls.get() + 1);
            async { Err(E::Transient) }
        })
        .await;
        assert_eq!(out, Err(E::Transient));
        assert_eq!(calls.get(), 4);
    }

    /// Seeded, a thread's delays repeat; unseeded again, they are drawn at random.
    #[test]
    fn seeded_delays_repeat() {
        let draw = || (0..8).map(|r| jitter(&P, r)).collect::<Vec<_>>();
        seed_delays(Some(5));
        let first = draw();
        seed_delays(Some(5));
        assert_eq!(draw(), first);
        seed_delays(Some(6));
        assert_ne!(draw(), first);
        seed_delays(None);
        assert!((0..8).all(|r| jitter(&P, r) <= P.ceiling(r)));
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_the_first_success_or_non_retryable_error() {
        let calls = Cell::new(0);
        let out = retry(&P, || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move { if n < 2 { Err(E::Transient) } else { Ok(n) } }
        })
        .await;
        assert_eq!(out, Ok(2));

        calls.set(0);
        let out: Result<(), E> = retry(&P, || {
            calls.set(calls.get() + 1);
            async { Err(E::Fatal) }
        })
        .await;
        assert_eq!((out, calls.get()), (Err(E::Fatal), 1));
    }
}
