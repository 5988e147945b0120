//! Step 8: the batch's metrics, and the partial batch response: the lowest failed record is
//! the one batch item failure — Lambda resumes there, and the rows' spans skip what this
//! invocation already applied
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-batchfailurereporting.html>).

use aws_lambda_events::event::streams::KinesisEventResponse;
use awsmp_aws::emf::Metric;
use awsmp_contract::metrics;

use super::{Batch, BatchReport, Consumer};

impl Consumer {
    /// Emit the batch's totals and build the response.
    pub(super) fn respond(&self, batch: Batch<'_>) -> (KinesisEventResponse, BatchReport) {
        let mut report = batch.report;
        if report.row_writes > 0 {
            self.metrics
                .emit(Metric::counts(metrics::ROWS_WRITTEN, report.row_writes));
        }
        if report.events_accepted > 0 {
            self.metrics.emit(Metric::value(
                metrics::WRITE_AMPLIFICATION,
                report.update_items as f64 * 1000.0 / report.events_accepted as f64,
            ));
        }
        if let Some(skew) = report.largest_client_skew_seconds {
            self.metrics
                .emit(Metric::value(metrics::CLIENT_CLOCK_SKEW, skew as f64));
        }
        let mut response = KinesisEventResponse::default();
        if let Some(i) = batch.failed {
            report.failed_from = Some(batch.slots[i].item_id.clone());
            response.add_failure(batch.slots[i].item_id.clone());
        }
        (response, report)
    }
}
