//! The [`Interleaver`]: at a preemption point of a port call ([`crate::faults::Fault::Preempt`]),
//! another stage runs one step before the call goes on. What that step is belongs to whoever
//! drives it (the simulation's world); the kit only hands the request over and waits.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot};

/// A request for a nested step, answered when it ran.
type Request = (&'static str, oneshot::Sender<()>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere, which the panic already reports.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs another stage at a preemption point of a port call (one level deep). The nested step
/// runs on the driver task ([`Interleaver::drive`], spawned on the schedule's `LocalSet`: the
/// handlers' futures are not all `Send`), so a port call on any task (the submitter's
/// write-backs run on spawned tasks) can wait for it. With no driver (a test that only wants
/// faults), a preemption point runs nothing.
#[derive(Debug, Default)]
pub struct Interleaver {
    requests: Mutex<Option<mpsc::UnboundedSender<Request>>>,
    busy: AtomicBool,
}

impl Interleaver {
    /// Run one nested step of another stage, unless one is already running.
    pub async fn run(&self, site: &'static str) {
        if self.busy.swap(true, Ordering::SeqCst) {
            return;
        }
        let (done, ran) = oneshot::channel();
        let sent = lock(&self.requests)
            .as_ref()
            .is_some_and(|tx| tx.send((site, done)).is_ok());
        if sent {
            let _ = ran.await;
        }
        self.busy.store(false, Ordering::SeqCst);
    }

    /// The driver: run `step(site)` for each requested step, in order. Spawn it on the
    /// schedule's `LocalSet`; it ends when the interleaver is dropped.
    pub fn drive<F, S>(&self, step: S) -> impl Future<Output = ()> + 'static
    where
        S: Fn(&'static str) -> F + 'static,
        F: Future<Output = ()>,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
        *lock(&self.requests) = Some(tx);
        async move {
            while let Some((site, done)) = rx.recv().await {
                step(site).await;
                let _ = done.send(());
            }
        }
    }
}
