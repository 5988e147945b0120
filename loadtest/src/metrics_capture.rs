//! Reading the producer's `metrics` (record-to-ack latency) in-process: the load test
//! installs a debugging recorder as the global recorder before any producer starts.

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::sync::OnceLock;

static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();

/// Install the capturing recorder (once per process; later calls do nothing).
pub fn install() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    if metrics::set_global_recorder(recorder).is_ok() {
        let _ = SNAPSHOTTER.set(snapshotter);
    }
}

/// Every value recorded into histograms named `name` since the last call (all label sets).
/// Empty when [`install`] was not called.
pub fn drain_histogram(name: &str) -> Vec<f64> {
    let Some(s) = SNAPSHOTTER.get() else {
        return Vec::new();
    };
    s.snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, _, _, _)| k.key().name() == name)
        .flat_map(|(_, _, _, v)| match v {
            DebugValue::Histogram(values) => values.into_iter().map(|f| f.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}
