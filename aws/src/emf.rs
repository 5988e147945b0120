//! Business metrics as CloudWatch Embedded Metric Format (EMF) lines.
//!
//! A Lambda's stdout goes to CloudWatch Logs, which turns each EMF JSON line into metrics —
//! no `PutMetricData` call, no extra IAM
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format.html>).
//! Locally the same lines are captured and asserted on. Names and units come from
//! [`awsmp_contract::metrics`].

use serde_json::{Map, Value, json};
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use awsmp_contract::metrics::{self, MetricName};

/// Default CloudWatch namespace of awsmp's business metrics.
pub const DEFAULT_NAMESPACE: &str = "awsmp";

/// One metric data point with its dimensions.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Metric name and unit, e.g. [`metrics::USAGE_RECORD_REJECTED`].
    pub name: MetricName,
    /// Value (a count, a quantity for `LateUsage`, a ratio for `WriteAmplification`).
    pub value: f64,
    /// Dimension name → value, e.g. `Reason` → `MalformedTimestamp`.
    pub dimensions: Vec<(&'static str, String)>,
}

impl Metric {
    /// A value of 1 with no dimensions.
    pub fn count(name: MetricName) -> Self {
        Self::value(name, 1.0)
    }
    /// A value of `n` (a number of things, or a quantity of usage units).
    pub fn counts(name: MetricName, n: u64) -> Self {
        Self::value(name, n as f64)
    }
    /// Any value, e.g. a ratio.
    pub fn value(name: MetricName, value: f64) -> Self {
        Self {
            name,
            value,
            dimensions: Vec::new(),
        }
    }
    /// Add a dimension.
    pub fn with(mut self, dimension: &'static str, value: impl Into<String>) -> Self {
        self.dimensions.push((dimension, value.into()));
        self
    }

    /// The EMF JSON line for this metric at `timestamp_ms`.
    pub fn to_emf(&self, namespace: &str, service: &str, timestamp_ms: i64) -> String {
        let mut root = Map::new();
        let dims: Vec<&str> = std::iter::once(metrics::SERVICE)
            .chain(self.dimensions.iter().map(|(k, _)| *k))
            .collect();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": namespace,
                    "Dimensions": [dims],
                    "Metrics": [{"Name": self.name.name(), "Unit": self.name.unit().as_str()}]
                }]
            }),
        );
        root.insert(metrics::SERVICE.into(), Value::String(service.into()));
        for (k, v) in &self.dimensions {
            root.insert((*k).into(), Value::String(v.clone()));
        }
        root.insert(self.name.name().into(), json!(self.value));
        Value::Object(root).to_string()
    }
}

/// A process-wide observer of every line any sink emits.
type Tee = Box<dyn Fn(&str) + Send + Sync>;

static TEE: OnceLock<Tee> = OnceLock::new();

/// Hand every line any [`MetricsSink`] of this process emits from now on to `observer` too,
/// whichever sink the code under it was given (the EMF collector, `awsmp-emf-collect`, runs
/// the simulation with it: docs/operations.md, "Metrics the alarms read"). Once per process:
/// false, and `observer` dropped, when one was installed already.
pub fn tee_all_lines(observer: impl Fn(&str) + Send + Sync + 'static) -> bool {
    TEE.set(Box::new(observer)).is_ok()
}

/// Where metric lines go.
#[derive(Clone)]
pub struct MetricsSink {
    namespace: String,
    service: String,
    out: Arc<Mutex<Box<dyn Write + Send>>>,
    captured: Option<Arc<Mutex<Vec<String>>>>,
}

impl std::fmt::Debug for MetricsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsSink")
            .field("namespace", &self.namespace)
            .field("service", &self.service)
            .finish()
    }
}

impl MetricsSink {
    /// EMF lines to stdout (what CloudWatch Logs ingests in Lambda).
    pub fn stdout(namespace: impl Into<String>, service: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            service: service.into(),
            out: Arc::new(Mutex::new(Box::new(std::io::stdout()))),
            captured: None,
        }
    }

    /// Lines kept in memory, for tests and the local runner's report.
    pub fn capture(service: impl Into<String>) -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.into(),
            service: service.into(),
            out: Arc::new(Mutex::new(Box::new(std::io::sink()))),
            captured: Some(Arc::new(Mutex::new(Vec::new()))),
        }
    }

    /// The same destination (and capture) with `service` as the `Service` dimension: each
    /// stage names itself when it resolves its dependencies, so its metrics carry the name its
    /// alarms filter on whichever sink it was handed.
    pub fn for_service(&self, service: &str) -> Self {
        Self {
            service: service.into(),
            ..self.clone()
        }
    }

    /// The `Service` dimension of this sink's lines.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Emit one metric now.
    pub fn emit(&self, metric: Metric) {
        let line = metric.to_emf(
            &self.namespace,
            &self.service,
            chrono::Utc::now().timestamp_millis(),
        );
        if let Some(tee) = TEE.get() {
            tee(&line);
        }
        if let Some(c) = &self.captured {
            c.lock()
                .expect("metrics capture poisoned")
                .push(line.clone());
        }
        let mut out = self.out.lock().expect("metrics writer poisoned");
        // A metric line that cannot be written must not fail billing work.
        let _ = writeln!(out, "{line}");
    }

    /// Captured lines (empty unless built with [`MetricsSink::capture`]).
    pub fn lines(&self) -> Vec<String> {
        self.captured
            .as_ref()
            .map(|c| c.lock().expect("metrics capture poisoned").clone())
            .unwrap_or_default()
    }

    /// Captured data points named `name`, as parsed JSON objects.
    pub fn points(&self, name: &str) -> Vec<Value> {
        self.lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get(name).is_some())
            .collect()
    }

    /// Sum of captured values of metric `name`.
    pub fn total(&self, name: &str) -> f64 {
        self.points(name)
            .iter()
            .filter_map(|v| v[name].as_f64())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_line_has_the_cloudwatch_shape() {
        let line = Metric::count(metrics::USAGE_RECORD_REJECTED)
            .with("Reason", "MalformedTimestamp")
            .to_emf("awsmp", "aggregator", 1_700_000_000_000);
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000_i64);
        let cw = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], "awsmp");
        assert_eq!(cw["Dimensions"][0], json!(["Service", "Reason"]));
        assert_eq!(
            cw["Metrics"][0],
            json!({"Name": "UsageRecordRejected", "Unit": "Count"})
        );
        assert_eq!(v["Reason"], "MalformedTimestamp");
        assert_eq!(v["UsageRecordRejected"], 1.0);
    }

    #[test]
    fn capture_sink_records_lines() {
        let sink = MetricsSink::capture("submitter");
        sink.emit(Metric::counts(metrics::USAGE_RECORD_UNPROCESSED, 3));
        sink.emit(Metric::count(metrics::USAGE_RECORD_UNPROCESSED));
        assert_eq!(sink.total("UsageRecordUnprocessed"), 4.0);
        assert_eq!(
            sink.points("UsageRecordUnprocessed")[0]["Service"],
            "submitter"
        );
    }

    #[test]
    fn a_stage_renames_the_service_and_shares_the_capture() {
        let sink = MetricsSink::capture("pipeline");
        let stage = sink.for_service("aggregator");
        stage.emit(Metric::count(metrics::LATE_USAGE));
        sink.emit(Metric::count(metrics::LATE_USAGE));
        let services: Vec<Value> = sink
            .points("LateUsage")
            .iter()
            .map(|p| p["Service"].clone())
            .collect();
        assert_eq!(services, [json!("aggregator"), json!("pipeline")]);
        assert_eq!(stage.service(), "aggregator");
    }
}
