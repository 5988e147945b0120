//! The deprovision-cleanup Lambda (every 15 minutes): finalize the licenses whose flush
//! window closed to `inactive`, emptying the sparse deprovisioning index.

use awsmp_aws::emf::{Metric, MetricsSink};
use awsmp_aws::mutants::{self, Mutant};
use awsmp_contract::metrics;
use chrono::{DateTime, Utc};

use crate::domain::registration::mask;
use crate::error::Result;
use crate::ports::SubscriberStore;

/// What one run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct CleanupReport {
    /// Index entries whose window had closed.
    pub expired: usize,
    /// Of them, finalized by this run (the others by a concurrent one).
    pub finalized: usize,
}

/// One run at `now`. A failed finalize does not stop the others; the run then fails (the
/// next run retries it, the `Errors` alarm fires).
pub async fn run(
    store: &dyn SubscriberStore,
    metrics_sink: &MetricsSink,
    now: DateTime<Utc>,
) -> Result<CleanupReport> {
    // Mutant: as if every window closed an hour early (aws/src/mutants.rs).
    let now = if mutants::active(Mutant::CleanupFinalizesOpenWindow) {
        now + crate::domain::state::DEPROVISIONING_WINDOW
    } else {
        now
    };
    let expired = store.expired_deprovisioning(now).await?;
    let mut report = CleanupReport {
        expired: expired.len(),
        finalized: 0,
    };
    let mut first_error = None;
    for (key, expiry) in &expired {
        match store.finalize(key, now).await {
            Ok(true) => {
                report.finalized += 1;
                tracing::info!(license = %mask(&key.license_arn), account = %mask(&key.customer_aws_account_id), %expiry, "license finalized to inactive");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(license = %mask(&key.license_arn), error = %e, "finalize failed");
                first_error.get_or_insert(e);
            }
        }
    }
    metrics_sink.emit(Metric::counts(
        metrics::LICENSES_FINALIZED,
        report.finalized as u64,
    ));
    match first_error {
        Some(e) => Err(e),
        None => Ok(report),
    }
}
