//! The runtime a Python producer's background task runs on, and how a Python thread waits for
//! the Rust producer: never while holding the GIL.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Threads of a producer's runtime: its background task, its PutRecords calls and their HTTP
/// connections. The callers' threads are Python's own.
const WORKER_THREADS: usize = 2;

/// How often a thread waiting detached comes back to Python to let a signal handler run (so
/// Ctrl-C interrupts a long `flush()` or a `record()` waiting for buffer space).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// `os.fork()`s seen in this process's line ([`after_fork_in_child`]): a runtime's threads do
/// not exist in a child, so what a parent started is unusable there.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Called by `os.register_at_fork(after_in_child=...)` (python/awsmp_producer/__init__.py).
#[pyfunction]
pub(crate) fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// A producer's Tokio runtime, shut down when the last handle on it (the producer or one of
/// its meters) goes.
pub(crate) struct Runtime {
    runtime: Option<tokio::runtime::Runtime>,
    forks: u64,
}

impl Runtime {
    pub fn new() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("awsmp-producer")
            .enable_all()
            .build()?;
        Ok(Runtime {
            runtime: Some(runtime),
            forks: FORKS.load(Ordering::Relaxed),
        })
    }

    /// False in a process forked after this runtime started.
    pub fn usable(&self) -> bool {
        self.forks == FORKS.load(Ordering::Relaxed)
    }

    fn get(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is only taken on drop")
    }

    /// Runs `fut` to completion on this runtime, detached from the interpreter.
    pub fn block_on<F: Future + Send>(&self, py: Python<'_>, fut: F) -> PyResult<F::Output>
    where
        F::Output: Send,
    {
        match self.wait(py, fut, None)? {
            Some(out) => Ok(out),
            None => unreachable!("no deadline"),
        }
    }

    /// `fut` polled once attached (most calls end here: a `record()` with buffer space has
    /// nothing to wait for), then, if it is not ready, waited for detached — until `timeout`
    /// (`None` from this call: `fut` dropped unfinished) or forever. Every [`SIGNAL_CHECK`] the
    /// thread attaches to run Python's signal handlers: an exception they raise (Ctrl-C's
    /// `KeyboardInterrupt`) drops `fut` and is returned.
    pub fn wait<F: Future + Send>(
        &self,
        py: Python<'_>,
        fut: F,
        timeout: Option<Duration>,
    ) -> PyResult<Option<F::Output>>
    where
        F::Output: Send,
    {
        let mut fut = pin!(fut);
        // In the runtime's context: a future may start a timer or a task on its first poll.
        let first = {
            let _context = self.get().enter();
            fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        };
        if let Poll::Ready(out) = first {
            return Ok(Some(out));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let slice = match deadline {
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK),
                None => SIGNAL_CHECK,
            };
            let polled = py.detach(|| {
                self.get()
                    .block_on(async { tokio::time::timeout(slice, fut.as_mut()).await.ok() })
            });
            if let Some(out) = polled {
                return Ok(Some(out));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            if self.usable() {
                // Never blocks the dropping thread (which may hold the GIL).
                runtime.shutdown_background();
            } else {
                // Its threads were the parent's; there is nothing here to stop.
                std::mem::forget(runtime);
            }
        }
    }
}
