//! The workspace's retry policy ([`awsmp_contract::retry`]) on the tokio clock.

use std::future::Future;

use awsmp_contract::retry::{RetryPolicy, Retryable, retry_with};

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
        |retry| policy.delay(retry, &mut rand::rng()),
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
