//! The Python objects the producer hands back: [`PyEvent`] (also built by callers, to record
//! or re-record an event whole), [`PyUndelivered`], [`PyOutcome`] and [`PyStats`].

use awsmp_producer::{Event, FlushOutcome, ProducerStats, Undelivered, UndeliveredReason};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::{EventArgs, allocations_to_py, to_datetime};
use crate::errors::fault_to_py;

/// One usage event (`Event` in Python): what `record()` takes whole and what the producer hands
/// back. Immutable.
#[pyclass(frozen, eq, module = "awsmp_producer", name = "Event")]
#[derive(PartialEq)]
pub struct PyEvent {
    pub(crate) inner: Event,
}

#[pymethods]
impl PyEvent {
    #[new]
    #[pyo3(signature = (license_arn, customer_aws_account_id, dimension, quantity, timestamp=None, *, event_id=None, producer_id=None, usage_allocations=None))]
    #[allow(clippy::too_many_arguments)] // the event's fields, as Python keywords
    fn new(
        license_arn: &Bound<'_, PyAny>,
        customer_aws_account_id: &Bound<'_, PyAny>,
        dimension: &Bound<'_, PyAny>,
        quantity: &Bound<'_, PyAny>,
        timestamp: Option<&Bound<'_, PyAny>>,
        event_id: Option<&Bound<'_, PyAny>>,
        producer_id: Option<&Bound<'_, PyAny>>,
        usage_allocations: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let args = EventArgs {
            license_arn,
            customer_aws_account_id: Some(customer_aws_account_id),
            dimension: Some(dimension),
            quantity: Some(quantity),
            timestamp,
            event_id,
            producer_id,
            usage_allocations,
        };
        let inner = args
            .event()
            .map_err(|f| fault_to_py(license_arn.py(), f, None))?;
        Ok(PyEvent { inner })
    }

    #[getter]
    fn license_arn(&self) -> &str {
        &self.inner.license_arn
    }

    #[getter]
    fn customer_aws_account_id(&self) -> &str {
        &self.inner.customer_aws_account_id
    }

    #[getter]
    fn dimension(&self) -> &str {
        &self.inner.dimension
    }

    #[getter]
    fn quantity(&self) -> u64 {
        self.inner.quantity
    }

    /// An aware `datetime` in UTC, to the millisecond.
    #[getter]
    fn timestamp<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_datetime(py, self.inner.timestamp)
    }

    /// The event's id: its own, or the one the producer generated (`None` before `record()`).
    #[getter]
    fn event_id(&self) -> Option<&str> {
        Some(self.inner.event_id.as_str()).filter(|s| !s.is_empty())
    }

    #[getter]
    fn producer_id(&self) -> Option<&str> {
        self.inner.producer_id.as_deref()
    }

    #[getter]
    fn usage_allocations<'py>(&self, py: Python<'py>) -> PyResult<Option<Vec<Bound<'py, PyDict>>>> {
        self.inner
            .usage_allocations
            .as_deref()
            .map(|a| allocations_to_py(py, a))
            .transpose()
    }

    fn __repr__(&self) -> String {
        let e = &self.inner;
        format!(
            "Event(license_arn={:?}, customer_aws_account_id={:?}, dimension={:?}, quantity={}, timestamp='{}', event_id={}, producer_id={}, usage_allocations={})",
            e.license_arn,
            e.customer_aws_account_id,
            e.dimension,
            e.quantity,
            e.timestamp.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            py_str(self.event_id()),
            py_str(e.producer_id.as_deref()),
            e.usage_allocations.as_ref().map_or(0, Vec::len),
        )
    }
}

/// An optional string as Python writes it.
fn py_str(s: Option<&str>) -> String {
    s.map_or_else(|| "None".to_owned(), |s| format!("{s:?}"))
}

/// An event the producer could not deliver, handed back.
#[pyclass(frozen, module = "awsmp_producer", name = "Undelivered")]
pub struct PyUndelivered {
    /// The event as it was sent (with its id: re-record it as it is, and it is billed once).
    #[pyo3(get)]
    event: Py<PyEvent>,
    /// Its partition key.
    #[pyo3(get)]
    partition_key: String,
    /// Stable reason code: `RecordTtlExpired` or `Rejected`.
    #[pyo3(get)]
    reason: &'static str,
    /// The last error seen, or Kinesis's code and message.
    #[pyo3(get)]
    detail: String,
    /// PutRecords attempts made.
    #[pyo3(get)]
    attempts: u32,
    /// A call carrying it may have been applied although no success was seen.
    #[pyo3(get)]
    maybe_delivered: bool,
    /// Recorded events it stands for (more than 1 when collapsed).
    #[pyo3(get)]
    constituents: usize,
}

#[pymethods]
impl PyUndelivered {
    fn __repr__(&self) -> String {
        format!(
            "Undelivered(reason={:?}, detail={:?}, attempts={}, maybe_delivered={}, constituents={}, event={})",
            self.reason,
            self.detail,
            self.attempts,
            self.maybe_delivered,
            self.constituents,
            self.event.get().__repr__(),
        )
    }
}

pub(crate) fn undelivered_to_py(py: Python<'_>, u: Undelivered) -> PyResult<PyUndelivered> {
    let detail = match &u.reason {
        UndeliveredReason::Expired { last_error } => last_error.clone().unwrap_or_default(),
        UndeliveredReason::Rejected { code, message } => format!("{code}: {message}"),
    };
    Ok(PyUndelivered {
        reason: u.reason.code(),
        detail,
        event: Py::new(py, PyEvent { inner: u.event })?,
        partition_key: u.partition_key,
        attempts: u.attempts,
        maybe_delivered: u.maybe_delivered,
        constituents: u.constituents,
    })
}

/// What `flush()` or `shutdown()` returns.
#[pyclass(frozen, module = "awsmp_producer", name = "Outcome")]
pub struct PyOutcome {
    /// Events acknowledged by Kinesis since the producer started (collapsed events count
    /// their constituents).
    #[pyo3(get)]
    delivered: u64,
    /// Events handed back since the last flush, as `Undelivered` objects.
    #[pyo3(get)]
    undelivered: Vec<Py<PyUndelivered>>,
    /// Recorded events among them (collapsed events count their constituents).
    #[pyo3(get)]
    undelivered_events: usize,
}

#[pymethods]
impl PyOutcome {
    /// True when nothing was handed back.
    #[getter]
    fn is_complete(&self) -> bool {
        self.undelivered.is_empty()
    }

    fn __repr__(&self) -> String {
        format!(
            "Outcome(delivered={}, undelivered_events={})",
            self.delivered, self.undelivered_events
        )
    }
}

pub(crate) fn outcome_to_py(
    py: Python<'_>,
    outcome: FlushOutcome,
    delivered: u64,
) -> PyResult<PyOutcome> {
    let undelivered_events = outcome.undelivered_events();
    let undelivered = outcome
        .undelivered
        .into_iter()
        .map(|u| Py::new(py, undelivered_to_py(py, u)?))
        .collect::<PyResult<_>>()?;
    Ok(PyOutcome {
        delivered,
        undelivered,
        undelivered_events,
    })
}

/// The producer's counters since it started (`Producer.stats()`).
#[pyclass(frozen, get_all, module = "awsmp_producer", name = "Stats")]
pub struct PyStats {
    events_recorded: u64,
    events_acked: u64,
    events_undelivered: u64,
    records_acked: u64,
    bytes_acked: u64,
    put_calls: u64,
    retries: u64,
    throttles: u64,
    shard_refreshes: u64,
    buffered_bytes: usize,
    max_buffered_bytes: usize,
}

#[pymethods]
impl PyStats {
    /// The counters as a `dict` (for a metrics library or a log line).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.pairs() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let fields: Vec<String> = self
            .pairs()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("Stats({})", fields.join(", "))
    }
}

impl PyStats {
    pub(crate) fn new(s: ProducerStats, buffered_bytes: usize, max_buffered_bytes: usize) -> Self {
        PyStats {
            events_recorded: s.events_recorded,
            events_acked: s.events_acked,
            events_undelivered: s.events_undelivered,
            records_acked: s.records_acked,
            bytes_acked: s.bytes_acked,
            put_calls: s.put_calls,
            retries: s.retries,
            throttles: s.throttles,
            shard_refreshes: s.shard_refreshes,
            buffered_bytes,
            max_buffered_bytes,
        }
    }

    fn pairs(&self) -> [(&'static str, u64); 11] {
        [
            ("events_recorded", self.events_recorded),
            ("events_acked", self.events_acked),
            ("events_undelivered", self.events_undelivered),
            ("records_acked", self.records_acked),
            ("bytes_acked", self.bytes_acked),
            ("put_calls", self.put_calls),
            ("retries", self.retries),
            ("throttles", self.throttles),
            ("shard_refreshes", self.shard_refreshes),
            ("buffered_bytes", self.buffered_bytes as u64),
            ("max_buffered_bytes", self.max_buffered_bytes as u64),
        ]
    }
}
