//! `Producer` for Python: the Rust [`Producer`] with its own runtime, its calls taking Python
//! values. Every call is one call of the Rust producer; nothing here batches, encodes, retries
//! or names events.

use std::sync::Arc;
use std::time::Duration;

use awsmp_contract::wire::WireVersion;
use awsmp_producer::{Event, Producer, ProducerError};
use pyo3::prelude::*;
use pyo3::types::PyDelta;

use crate::convert::EventArgs;
use crate::errors::{Class, fault_to_py, producer_error, raise};
use crate::event::{PyOutcome, PyStats, PyUndelivered, outcome_to_py, undelivered_to_py};
use crate::meter::PyMeter;
use crate::wait::Runtime;

/// Buffers, packs and ships usage events to a Kinesis data stream from a background task.
#[pyclass(
    frozen,
    subclass,
    weakref,
    module = "awsmp_producer._native",
    name = "Producer"
)]
pub struct PyProducer {
    pub(crate) producer: Producer,
    pub(crate) runtime: Arc<Runtime>,
}

/// Seconds (`int`/`float`) or a `timedelta` as a [`Duration`]; `what` names the argument.
pub(crate) fn duration(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let seconds: f64 = match v.cast::<PyDelta>() {
        Ok(d) => d.call_method0("total_seconds")?.extract()?,
        Err(_) => v.extract().map_err(|_| {
            config_error(
                v.py(),
                format!("{what} must be seconds (int or float) or a timedelta"),
            )
        })?,
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        config_error(
            v.py(),
            format!("{what} must be a finite, non-negative duration"),
        )
    })
}

pub(crate) fn config_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, Class::Config, message, "Config", None)
}

impl PyProducer {
    /// The Rust producer, unless this process was forked after it started.
    pub(crate) fn live(&self, py: Python<'_>) -> PyResult<&Producer> {
        if self.runtime.usable() {
            Ok(&self.producer)
        } else {
            Err(forked(py))
        }
    }
}

pub(crate) fn forked(py: Python<'_>) -> PyErr {
    raise(
        py,
        Class::Closed,
        "this producer was started before os.fork(): start one in the child process".into(),
        "Closed",
        None,
    )
}

/// Records `event` as the Rust `Producer::record` does, waiting (detached) for buffer space
/// up to `timeout`; past it, [`Class::RecordTimeout`] gives back `given()` (the event as the
/// caller gave it: it was not recorded).
pub(crate) fn record_waiting<F>(
    py: Python<'_>,
    runtime: &Runtime,
    record: F,
    timeout: Option<Duration>,
    given: impl FnOnce() -> Option<Event>,
) -> PyResult<()>
where
    F: Future<Output = Result<(), ProducerError>> + Send,
{
    match runtime.wait(py, record, timeout)? {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(producer_error(py, e)),
        None => Err(raise(
            py,
            Class::RecordTimeout,
            format!(
                "no buffer space within {:.3} s (the event was not recorded)",
                timeout.unwrap_or_default().as_secs_f64()
            ),
            "Full",
            given(),
        )),
    }
}

#[pymethods]
impl PyProducer {
    #[new]
    #[pyo3(signature = (stream, *, producer_id=None, linger=None, collapse=false, region=None, endpoint_url=None, max_buffered_bytes=None, record_ttl=None, wire_version=2))]
    #[allow(clippy::too_many_arguments)] // the settings, as Python keywords
    fn new(
        py: Python<'_>,
        stream: String,
        producer_id: Option<String>,
        linger: Option<&Bound<'_, PyAny>>,
        collapse: bool,
        region: Option<String>,
        endpoint_url: Option<String>,
        max_buffered_bytes: Option<usize>,
        record_ttl: Option<&Bound<'_, PyAny>>,
        wire_version: u8,
    ) -> PyResult<Self> {
        let mut b = Producer::builder(stream).collapse(collapse);
        if let Some(p) = producer_id {
            b = b.producer_id(p);
        }
        if let Some(l) = linger {
            b = b.linger(duration(l, "linger")?);
        }
        if let Some(r) = region {
            b = b.region(r);
        }
        if let Some(u) = endpoint_url {
            b = b.endpoint_url(u);
        }
        if let Some(m) = max_buffered_bytes {
            b = b.max_buffered_bytes(m);
        }
        if let Some(t) = record_ttl {
            b = b.record_ttl(duration(t, "record_ttl")?);
        }
        b = b.wire_version(match wire_version {
            1 => WireVersion::V1,
            2 => WireVersion::V2,
            v => return Err(config_error(py, format!("wire_version {v}: 1 or 2"))),
        });
        let runtime = Runtime::new()
            .map_err(|e| config_error(py, format!("cannot start the producer's threads: {e}")))?;
        let producer = runtime
            .block_on(py, b.build())?
            .map_err(|e| producer_error(py, e))?;
        Ok(PyProducer {
            producer,
            runtime: Arc::new(runtime),
        })
    }

    /// Records one event, waiting (without the GIL) while the buffer is full.
    #[pyo3(signature = (license_arn, customer_aws_account_id=None, dimension=None, quantity=None, timestamp=None, *, event_id=None, producer_id=None, usage_allocations=None, timeout=None))]
    #[allow(clippy::too_many_arguments)] // the event's fields, as Python keywords
    fn record(
        &self,
        py: Python<'_>,
        license_arn: &Bound<'_, PyAny>,
        customer_aws_account_id: Option<&Bound<'_, PyAny>>,
        dimension: Option<&Bound<'_, PyAny>>,
        quantity: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
        event_id: Option<&Bound<'_, PyAny>>,
        producer_id: Option<&Bound<'_, PyAny>>,
        usage_allocations: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let producer = self.live(py)?;
        let args = EventArgs {
            license_arn,
            customer_aws_account_id,
            dimension,
            quantity,
            timestamp,
            event_id,
            producer_id,
            usage_allocations,
        };
        let timeout = timeout.map(|t| duration(t, "timeout")).transpose()?;
        let event = args.event().map_err(|f| fault_to_py(py, f, None))?;
        // What a timeout gives back: the event as given, with the instant it was given at.
        let at = event.timestamp;
        let given = || args.event().ok().map(|e| Event { timestamp: at, ..e });
        record_waiting(py, &self.runtime, producer.record(event), timeout, given)
    }

    /// Records one event if there is buffer space now; else raises `BufferFullError`.
    #[pyo3(signature = (license_arn, customer_aws_account_id=None, dimension=None, quantity=None, timestamp=None, *, event_id=None, producer_id=None, usage_allocations=None))]
    #[allow(clippy::too_many_arguments)] // the event's fields, as Python keywords
    fn try_record(
        &self,
        py: Python<'_>,
        license_arn: &Bound<'_, PyAny>,
        customer_aws_account_id: Option<&Bound<'_, PyAny>>,
        dimension: Option<&Bound<'_, PyAny>>,
        quantity: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
        event_id: Option<&Bound<'_, PyAny>>,
        producer_id: Option<&Bound<'_, PyAny>>,
        usage_allocations: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let producer = self.live(py)?;
        let args = EventArgs {
            license_arn,
            customer_aws_account_id,
            dimension,
            quantity,
            timestamp,
            event_id,
            producer_id,
            usage_allocations,
        };
        let event = args.event().map_err(|f| fault_to_py(py, f, None))?;
        producer
            .try_record(event)
            .map_err(|e| producer_error(py, e))
    }

    /// Records one event from asyncio: the awaitable is done at once when there is buffer
    /// space, and waits on the event loop (never blocking it) while the buffer is full.
    #[pyo3(signature = (license_arn, customer_aws_account_id=None, dimension=None, quantity=None, timestamp=None, *, event_id=None, producer_id=None, usage_allocations=None))]
    #[allow(clippy::too_many_arguments)] // the event's fields, as Python keywords
    async fn record_async(
        &self,
        license_arn: Py<PyAny>,
        customer_aws_account_id: Option<Py<PyAny>>,
        dimension: Option<Py<PyAny>>,
        quantity: Option<Py<PyAny>>,
        timestamp: Option<Py<PyAny>>,
        event_id: Option<Py<PyAny>>,
        producer_id: Option<Py<PyAny>>,
        usage_allocations: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let event = Python::attach(|py| {
            self.live(py)?;
            let bound = |v: &Option<Py<PyAny>>| v.as_ref().map(|v| v.bind(py).clone());
            let (a, d, q, t, i, p, u) = (
                bound(&customer_aws_account_id),
                bound(&dimension),
                bound(&quantity),
                bound(&timestamp),
                bound(&event_id),
                bound(&producer_id),
                bound(&usage_allocations),
            );
            EventArgs {
                license_arn: license_arn.bind(py),
                customer_aws_account_id: a.as_ref(),
                dimension: d.as_ref(),
                quantity: q.as_ref(),
                timestamp: t.as_ref(),
                event_id: i.as_ref(),
                producer_id: p.as_ref(),
                usage_allocations: u.as_ref(),
            }
            .event()
            .map_err(|f| fault_to_py(py, f, None))
        })?;
        let recorded = self.producer.record(event).await;
        recorded.map_err(|e| Python::attach(|py| producer_error(py, e)))
    }

    /// A `Meter` for one group, validated once.
    fn meter(
        &self,
        py: Python<'_>,
        license_arn: &str,
        customer_aws_account_id: &str,
        dimension: &str,
    ) -> PyResult<PyMeter> {
        let producer = self.live(py)?;
        let meter = producer
            .meter(license_arn, customer_aws_account_id, dimension)
            .map_err(|v| fault_to_py(py, crate::convert::Fault::Invalid(v), None))?;
        Ok(PyMeter {
            meter,
            runtime: self.runtime.clone(),
        })
    }

    /// Sends everything buffered and waits until every event recorded before the call is
    /// acknowledged or handed back.
    fn flush(&self, py: Python<'_>) -> PyResult<PyOutcome> {
        let producer = self.live(py)?;
        let flushed = self.runtime.block_on(py, producer.flush())?;
        self.outcome(py, flushed.map_err(|e| producer_error(py, e))?)
    }

    /// `flush()` from asyncio.
    async fn flush_async(&self) -> PyResult<PyOutcome> {
        Python::attach(|py| self.live(py).map(|_| ()))?;
        let flushed = self.producer.flush().await;
        Python::attach(|py| self.outcome(py, flushed.map_err(|e| producer_error(py, e))?))
    }

    /// Stops accepting events, delivers everything buffered (bounded by the record TTL) and
    /// stops the background task. Calling it again returns an outcome with nothing undelivered.
    fn shutdown(&self, py: Python<'_>) -> PyResult<PyOutcome> {
        let producer = self.live(py)?;
        let done = self.runtime.block_on(py, producer.shutdown())?;
        self.shut_down(py, done)
    }

    /// `shutdown()` from asyncio.
    async fn shutdown_async(&self) -> PyResult<PyOutcome> {
        Python::attach(|py| self.live(py).map(|_| ()))?;
        let done = self.producer.shutdown().await;
        Python::attach(|py| self.shut_down(py, done))
    }

    /// The events handed back so far, without waiting for a flush.
    fn take_undelivered(&self, py: Python<'_>) -> PyResult<Vec<PyUndelivered>> {
        let producer = self.live(py)?;
        let taken = self.runtime.block_on(py, producer.take_undelivered())?;
        let taken = taken.map_err(|e| producer_error(py, e))?;
        taken
            .into_iter()
            .map(|u| undelivered_to_py(py, u))
            .collect()
    }

    /// The producer's counters since it started, and the bytes it holds now.
    fn stats(&self) -> PyStats {
        PyStats::new(
            self.producer.stats(),
            self.producer.buffered_bytes(),
            self.producer.config().max_buffered_bytes,
        )
    }

    /// The stream's name.
    #[getter]
    fn stream(&self) -> &str {
        &self.producer.config().stream_name
    }

    fn __repr__(&self) -> String {
        format!("Producer({:?})", self.producer.config().stream_name)
    }
}

impl PyProducer {
    fn outcome(&self, py: Python<'_>, o: awsmp_producer::FlushOutcome) -> PyResult<PyOutcome> {
        outcome_to_py(py, o, self.producer.stats().events_acked)
    }

    /// A shutdown's outcome; a second shutdown finds the producer closed and has nothing to
    /// hand back.
    fn shut_down(
        &self,
        py: Python<'_>,
        done: Result<awsmp_producer::FlushOutcome, ProducerError>,
    ) -> PyResult<PyOutcome> {
        match done {
            Ok(o) => self.outcome(py, o),
            Err(ProducerError::Closed(None)) => self.outcome(py, Default::default()),
            Err(e) => Err(producer_error(py, e)),
        }
    }
}
