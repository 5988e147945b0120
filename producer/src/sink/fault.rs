//! [`RecordSink`] wrapper that injects seeded faults: per-entry throttling and failures, whole
//! calls that fail, are throttled, are rejected, or are applied and then report failure (a lost
//! response), and slow calls.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{EntryOutcome, PutEntry, RecordSink, SinkError};

/// Fault probabilities (0.0–1.0) and latency.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// RNG seed: the same seed and call sequence give the same faults.
    pub seed: u64,
    /// Per entry: answered `ProvisionedThroughputExceededException`, not applied.
    pub entry_throttle_rate: f64,
    /// Per entry: answered `InternalFailure`, not applied.
    pub entry_failure_rate: f64,
    /// Per call: whole call throttled, nothing applied.
    pub call_throttle_rate: f64,
    /// Per call: transient failure (e.g. connection reset) before anything is applied.
    pub call_failure_rate: f64,
    /// Per call: applied by the inner sink, then reported as a transient failure.
    pub lost_response_rate: f64,
    /// Per call: permanently rejected (e.g. access denied), nothing applied.
    pub call_reject_rate: f64,
    /// Each call first waits a uniform time in `0..=max_latency`.
    pub max_latency: Duration,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 1,
            entry_throttle_rate: 0.0,
            entry_failure_rate: 0.0,
            call_throttle_rate: 0.0,
            call_failure_rate: 0.0,
            lost_response_rate: 0.0,
            call_reject_rate: 0.0,
            max_latency: Duration::ZERO,
        }
    }
}

/// How many faults of each class were injected.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounts {
    /// Calls received.
    pub calls: u64,
    /// Entries answered as throttled.
    pub entries_throttled: u64,
    /// Entries answered as failed.
    pub entries_failed: u64,
    /// Calls throttled whole.
    pub calls_throttled: u64,
    /// Calls failed before applying.
    pub calls_failed: u64,
    /// Calls applied whose response was "lost".
    pub responses_lost: u64,
    /// Calls rejected permanently.
    pub calls_rejected: u64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    entries_throttled: AtomicU64,
    entries_failed: AtomicU64,
    calls_throttled: AtomicU64,
    calls_failed: AtomicU64,
    responses_lost: AtomicU64,
    calls_rejected: AtomicU64,
}

/// Wraps a sink with faults drawn from a seeded RNG.
pub struct FaultInjectingRecordSink<S> {
    inner: S,
    config: Mutex<FaultConfig>,
    rng: Mutex<StdRng>,
    counters: Counters,
}

enum CallFate {
    Throttle,
    Fail,
    Reject,
    LoseResponse,
    Normal,
}

impl<S: RecordSink> FaultInjectingRecordSink<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: FaultConfig) -> Self {
        FaultInjectingRecordSink {
            inner,
            rng: Mutex::new(StdRng::seed_from_u64(config.seed)),
            config: Mutex::new(config),
            counters: Counters::default(),
        }
    }

    /// The wrapped sink.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Changes the fault rates (keeps the RNG stream).
    pub fn set_config(&self, config: FaultConfig) {
        *self.config.lock().expect("fault config") = config;
    }

    /// Faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        let c = &self.counters;
        FaultCounts {
            calls: c.calls.load(Ordering::Relaxed),
            entries_throttled: c.entries_throttled.load(Ordering::Relaxed),
            entries_failed: c.entries_failed.load(Ordering::Relaxed),
            calls_throttled: c.calls_throttled.load(Ordering::Relaxed),
            calls_failed: c.calls_failed.load(Ordering::Relaxed),
            responses_lost: c.responses_lost.load(Ordering::Relaxed),
            calls_rejected: c.calls_rejected.load(Ordering::Relaxed),
        }
    }

    /// Draws the call's fate, its latency and each entry's fate (`None` = pass through).
    fn draw(&self, n: usize) -> (CallFate, Duration, Vec<Option<EntryOutcome>>) {
        let cfg = self.config.lock().expect("fault config").clone();
        let mut rng = self.rng.lock().expect("fault rng");
        let latency = if cfg.max_latency.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(rng.random_range(0..=cfg.max_latency.as_nanos() as u64))
        };
        let x: f64 = rng.random();
        let mut acc = 0.0;
        let mut pick = |rate: f64| {
            acc += rate;
            x < acc
        };
        let fate = if pick(cfg.call_throttle_rate) {
            CallFate::Throttle
        } else if pick(cfg.call_failure_rate) {
            CallFate::Fail
        } else if pick(cfg.call_reject_rate) {
            CallFate::Reject
        } else if pick(cfg.lost_response_rate) {
            CallFate::LoseResponse
        } else {
            CallFate::Normal
        };
        let entries = (0..n)
            .map(|_| {
                let y: f64 = rng.random();
                if y < cfg.entry_throttle_rate {
                    Some(EntryOutcome::Throttled)
                } else if y < cfg.entry_throttle_rate + cfg.entry_failure_rate {
                    Some(EntryOutcome::Failed {
                        code: "InternalFailure".into(),
                        message: "injected".into(),
                        retryable: true,
                    })
                } else {
                    None
                }
            })
            .collect();
        (fate, latency, entries)
    }
}

impl<S: RecordSink> RecordSink for FaultInjectingRecordSink<S> {
    async fn put_records(&self, entries: Vec<PutEntry>) -> Result<Vec<EntryOutcome>, SinkError> {
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        let (fate, latency, entry_faults) = self.draw(entries.len());
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        match fate {
            CallFate::Throttle => {
                c.calls_throttled.fetch_add(1, Ordering::Relaxed);
                return Err(SinkError::throttled("injected call throttle"));
            }
            CallFate::Fail => {
                c.calls_failed.fetch_add(1, Ordering::Relaxed);
                return Err(SinkError::transient("injected connection reset"));
            }
            CallFate::Reject => {
                c.calls_rejected.fetch_add(1, Ordering::Relaxed);
                return Err(SinkError::rejected("injected AccessDenied"));
            }
            CallFate::LoseResponse | CallFate::Normal => {}
        }
        let passed: Vec<PutEntry> = entries
            .iter()
            .zip(&entry_faults)
            .filter(|(_, f)| f.is_none())
            .map(|(e, _)| e.clone())
            .collect();
        let mut inner_out = if passed.is_empty() {
            Vec::new().into_iter()
        } else {
            self.inner.put_records(passed).await?.into_iter()
        };
        if matches!(fate, CallFate::LoseResponse) {
            c.responses_lost.fetch_add(1, Ordering::Relaxed);
            return Err(SinkError::transient(
                "injected lost response (call was applied)",
            ));
        }
        let mut out = Vec::with_capacity(entries.len());
        for f in entry_faults {
            match f {
                Some(fault) => {
                    match fault {
                        EntryOutcome::Throttled => &c.entries_throttled,
                        _ => &c.entries_failed,
                    }
                    .fetch_add(1, Ordering::Relaxed);
                    out.push(fault);
                }
                None => out.push(
                    inner_out
                        .next()
                        .ok_or_else(|| SinkError::transient("inner sink answered too few"))?,
                ),
            }
        }
        Ok(out)
    }
}
