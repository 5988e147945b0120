//! `Meter` for Python: the Rust [`Meter`], a group validated once, then `record(quantity)`
//! per event with no strings to convert.

use std::sync::Arc;

use awsmp_producer::{Event, Meter};
use pyo3::prelude::*;

use crate::convert::{quantity, timestamp};
use crate::errors::{fault_to_py, producer_error};
use crate::producer::{duration, forked, record_waiting};
use crate::wait::Runtime;

/// A producer bound to one group (license, customer account, dimension): `record(quantity)`
/// per event. Cheap to share between threads.
#[pyclass(frozen, module = "awsmp_producer._native", name = "Meter")]
pub struct PyMeter {
    pub(crate) meter: Meter,
    pub(crate) runtime: Arc<Runtime>,
}

impl PyMeter {
    /// The event's timestamp and quantity from Python values.
    fn usage(
        &self,
        py: Python<'_>,
        q: &Bound<'_, PyAny>,
        t: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(chrono::DateTime<chrono::Utc>, u64)> {
        if !self.runtime.usable() {
            return Err(forked(py));
        }
        let event = || self.given(chrono::Utc::now(), 0);
        let q = quantity(q).map_err(|f| fault_to_py(py, f, None))?;
        let t = timestamp(t).map_err(|f| fault_to_py(py, f, Some(event())))?;
        Ok((t, q))
    }

    /// An event of the meter's group, as given (no id).
    fn given(&self, at: chrono::DateTime<chrono::Utc>, quantity: u64) -> Event {
        let p = self.meter.producer();
        let mut parts = self.meter.partition_key().splitn(3, '|');
        let (license, account, dimension) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        let mut e = Event::new(license, account, dimension, quantity, at);
        e.producer_id = p.config().producer_id.clone();
        e
    }
}

#[pymethods]
impl PyMeter {
    /// Records `quantity` units of the group at `timestamp` (now when left out), waiting
    /// (without the GIL) while the buffer is full.
    #[pyo3(signature = (quantity=None, timestamp=None, *, timeout=None))]
    fn record(
        &self,
        py: Python<'_>,
        quantity: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (t, q) = match quantity {
            Some(q) => self.usage(py, q, timestamp)?,
            None => self.usage(py, &1u64.into_pyobject(py)?.into_any(), timestamp)?,
        };
        let timeout = timeout.map(|t| duration(t, "timeout")).transpose()?;
        let given = || Some(self.given(t, q));
        record_waiting(py, &self.runtime, self.meter.record(t, q), timeout, given)
    }

    /// Records if there is buffer space now; else raises `BufferFullError`.
    #[pyo3(signature = (quantity=None, timestamp=None))]
    fn try_record(
        &self,
        py: Python<'_>,
        quantity: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (t, q) = match quantity {
            Some(q) => self.usage(py, q, timestamp)?,
            None => self.usage(py, &1u64.into_pyobject(py)?.into_any(), timestamp)?,
        };
        self.meter
            .try_record(t, q)
            .map_err(|e| producer_error(py, e))
    }

    /// `record()` from asyncio: done at once when there is buffer space, else waits on the
    /// event loop (never blocking it).
    #[pyo3(signature = (quantity=None, timestamp=None))]
    async fn record_async(
        &self,
        quantity: Option<Py<PyAny>>,
        timestamp: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let (t, q) = Python::attach(|py| {
            let t = timestamp.as_ref().map(|t| t.bind(py).clone());
            match &quantity {
                Some(q) => self.usage(py, q.bind(py), t.as_ref()),
                None => self.usage(py, &1u64.into_pyobject(py)?.into_any(), t.as_ref()),
            }
        })?;
        let recorded = self.meter.record(t, q).await;
        recorded.map_err(|e| Python::attach(|py| producer_error(py, e)))
    }

    /// The group's partition key, `licenseArn|customerAWSAccountId|dimension`.
    #[getter]
    fn partition_key(&self) -> &str {
        self.meter.partition_key()
    }

    fn __repr__(&self) -> String {
        format!("Meter({:?})", self.meter.partition_key())
    }
}
