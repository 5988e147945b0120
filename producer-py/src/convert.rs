//! Python values into the producer's [`Event`]: strings, quantities, timestamps (an aware
//! `datetime`, or epoch seconds) and usage allocations. What Rust's types rule out (a negative
//! or fractional quantity, a value of the wrong type, a naive `datetime`) is refused here with
//! the reason code the producer's decoder gives the same fault on the wire (`DecodeError`);
//! every other rule is the Rust producer's own validation at `record()`.

use awsmp_contract::error::DecodeError;
use awsmp_producer::{Event, Tag, UsageAllocation, ValidationError};
use chrono::{DateTime, Utc};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyType};
use pyo3::{intern, prelude::Bound};

use crate::event::PyEvent;

/// Why a Python value cannot become (part of) an event.
pub(crate) enum Fault {
    /// A fault the producer's decoder names (wrong type, negative quantity, naive timestamp…).
    Decode(DecodeError),
    /// A rule of the event the producer's validation names.
    Invalid(ValidationError),
    /// Python itself failed (an exception raised by a value's own method).
    Python(PyErr),
}

impl From<PyErr> for Fault {
    fn from(e: PyErr) -> Self {
        Fault::Python(e)
    }
}

fn wrong_type(field: &'static str, expected: &'static str) -> Fault {
    Fault::Decode(DecodeError::WrongFieldType { field, expected })
}

/// The arguments of `record()` and `Event(...)`, borrowed: either a whole [`PyEvent`] as
/// `license_arn` (and nothing else), or the event's fields.
pub(crate) struct EventArgs<'a, 'py> {
    pub license_arn: &'a Bound<'py, PyAny>,
    pub customer_aws_account_id: Option<&'a Bound<'py, PyAny>>,
    pub dimension: Option<&'a Bound<'py, PyAny>>,
    pub quantity: Option<&'a Bound<'py, PyAny>>,
    pub timestamp: Option<&'a Bound<'py, PyAny>>,
    pub event_id: Option<&'a Bound<'py, PyAny>>,
    pub producer_id: Option<&'a Bound<'py, PyAny>>,
    pub usage_allocations: Option<&'a Bound<'py, PyAny>>,
}

impl EventArgs<'_, '_> {
    /// The event these arguments describe (a copy of a given [`PyEvent`]).
    pub fn event(&self) -> Result<Event, Fault> {
        if let Ok(given) = self.license_arn.cast::<PyEvent>() {
            let rest = [
                self.customer_aws_account_id,
                self.dimension,
                self.quantity,
                self.timestamp,
                self.event_id,
                self.producer_id,
                self.usage_allocations,
            ];
            if rest.iter().flatten().any(|v| !v.is_none()) {
                return Err(wrong_type(
                    "event",
                    "an Event alone, or the event's fields without an Event",
                ));
            }
            return Ok(given.get().inner.clone());
        }
        let mut event = Event::new(
            string(self.license_arn, "license_arn")?,
            string(
                required(self.customer_aws_account_id, "customer_aws_account_id")?,
                "customer_aws_account_id",
            )?,
            string(required(self.dimension, "dimension")?, "dimension")?,
            quantity(required(self.quantity, "quantity")?)?,
            timestamp(self.timestamp)?,
        );
        if let Some(id) = self.event_id.filter(|v| !v.is_none()) {
            event.event_id = string(id, "event_id")?;
            if event.event_id.is_empty() {
                return Err(Fault::Invalid(ValidationError::InvalidEventId(
                    "empty (pass None to have one generated)".into(),
                )));
            }
        }
        if let Some(p) = self.producer_id.filter(|v| !v.is_none()) {
            event.producer_id = Some(string(p, "producer_id")?);
        }
        if let Some(a) = self.usage_allocations.filter(|v| !v.is_none()) {
            event.usage_allocations = Some(allocations(a)?);
        }
        Ok(event)
    }
}

/// A required argument.
fn required<'a, 'py>(
    v: Option<&'a Bound<'py, PyAny>>,
    field: &'static str,
) -> Result<&'a Bound<'py, PyAny>, Fault> {
    v.filter(|v| !v.is_none())
        .ok_or_else(|| wrong_type(field, "given (it is required)"))
}

/// A `str` field.
pub(crate) fn string(v: &Bound<'_, PyAny>, field: &'static str) -> Result<String, Fault> {
    let s = v
        .cast::<PyString>()
        .map_err(|_| wrong_type(field, "a str"))?;
    s.to_cow()
        .map(|s| s.into_owned())
        .map_err(|_| wrong_type(field, "a str of valid Unicode"))
}

/// A quantity: a non-negative `int` below 2^64 (`bool` and `float` refused, never rounded).
pub(crate) fn quantity(v: &Bound<'_, PyAny>) -> Result<u64, Fault> {
    non_negative_int(v, "quantity", DecodeError::NegativeQuantity, |r| {
        DecodeError::NonIntegerQuantity(r)
    })
}

fn non_negative_int(
    v: &Bound<'_, PyAny>,
    field: &'static str,
    negative: fn(String) -> DecodeError,
    not_integer: fn(String) -> DecodeError,
) -> Result<u64, Fault> {
    let repr = || v.repr().map(|r| r.to_string()).unwrap_or_default();
    if v.is_instance_of::<PyBool>() {
        return Err(wrong_type(field, "an int (not a bool)"));
    }
    if v.is_instance_of::<PyFloat>() {
        return Err(Fault::Decode(not_integer(repr())));
    }
    if !v.is_instance_of::<PyInt>() {
        return Err(wrong_type(field, "an int"));
    }
    match v.extract::<u64>() {
        Ok(n) => Ok(n),
        Err(_) if v.lt(0)? => Err(Fault::Decode(negative(repr()))),
        Err(_) => Err(Fault::Decode(not_integer(repr()))),
    }
}

static DATETIME: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UTC: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static EPOCH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// 1970-01-01T00:00:00 UTC as an aware `datetime`.
fn epoch(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    EPOCH
        .get_or_try_init(py, || {
            let utc = UTC.import(py, "datetime", "timezone")?.getattr("utc")?;
            DATETIME
                .import(py, "datetime", "datetime")?
                .call1((1970, 1, 1, 0, 0, 0, 0, utc))
                .map(Bound::unbind)
        })
        .map(|e| e.bind(py))
}

/// The event's timestamp: now when absent; an aware `datetime` (a naive one is refused: its
/// zone would be a guess); or epoch seconds, an `int` or a `float` (read to the microsecond,
/// as `datetime.fromtimestamp` reads it). Finer digits than milliseconds are dropped, as the
/// producer drops them.
pub(crate) fn timestamp(v: Option<&Bound<'_, PyAny>>) -> Result<DateTime<Utc>, Fault> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Utc::now());
    };
    let py = v.py();
    let millis = if v.is_instance_of::<PyBool>() {
        return Err(wrong_type(
            "timestamp",
            "an aware datetime or epoch seconds (not a bool)",
        ));
    } else if v.is_instance_of::<PyInt>() {
        v.extract::<i64>().ok().and_then(|s| s.checked_mul(1000))
    } else if v.is_instance_of::<PyFloat>() {
        epoch_float_millis(v.extract::<f64>()?)
    } else if v.is_instance(DATETIME.import(py, "datetime", "datetime")?)? {
        Some(datetime_millis(v)?)
    } else {
        return Err(wrong_type(
            "timestamp",
            "an aware datetime or epoch seconds (int or float)",
        ));
    };
    millis
        .and_then(DateTime::from_timestamp_millis)
        .ok_or_else(|| malformed_timestamp(v))
}

fn malformed_timestamp(v: &Bound<'_, PyAny>) -> Fault {
    let repr = v.repr().map(|r| r.to_string()).unwrap_or_default();
    Fault::Decode(DecodeError::MalformedTimestamp(format!(
        "{repr} is not an instant between 1970 and 9999"
    )))
}

/// Epoch seconds as milliseconds: rounded half to even to the microsecond first (the float's
/// own error stays below that for any date this century), then the millisecond it falls in.
pub(crate) fn epoch_float_millis(seconds: f64) -> Option<i64> {
    let micros = (seconds * 1e6).round_ties_even();
    // i64's range as a float; NaN and the infinities fail it too.
    if !(-9.2e18..9.2e18).contains(&micros) {
        return None;
    }
    Some((micros as i64).div_euclid(1000))
}

/// An aware `datetime` as epoch milliseconds, exactly (integer days, seconds and
/// microseconds of its distance from the epoch).
fn datetime_millis(v: &Bound<'_, PyAny>) -> Result<i64, Fault> {
    let py = v.py();
    if v.call_method0(intern!(py, "utcoffset"))?.is_none() {
        return Err(Fault::Decode(DecodeError::MalformedTimestamp(
            "a naive datetime (no tzinfo): give an aware one, e.g. datetime.now(timezone.utc)"
                .into(),
        )));
    }
    let delta = v.sub(epoch(py)?)?;
    let days: i64 = delta.getattr(intern!(py, "days"))?.extract()?;
    let seconds: i64 = delta.getattr(intern!(py, "seconds"))?.extract()?;
    let micros: i64 = delta.getattr(intern!(py, "microseconds"))?.extract()?;
    Ok(days * 86_400_000 + seconds * 1000 + micros / 1000)
}

/// Epoch milliseconds as an aware UTC `datetime`.
pub(crate) fn to_datetime(py: Python<'_>, t: DateTime<Utc>) -> PyResult<Bound<'_, PyAny>> {
    let kwargs = PyDict::new(py);
    kwargs.set_item("milliseconds", t.timestamp_millis())?;
    let delta = TIMEDELTA
        .import(py, "datetime", "timedelta")?
        .call((), Some(&kwargs))?;
    epoch(py)?.add(delta)
}

/// `usage_allocations` in the BatchMeterUsage shape boto3 uses:
/// `[{"AllocatedUsageQuantity": 4, "Tags": [{"Key": "team", "Value": "a"}]}, ...]`.
fn allocations(v: &Bound<'_, PyAny>) -> Result<Vec<UsageAllocation>, Fault> {
    let malformed = |what: &str| {
        Fault::Invalid(ValidationError::MalformedAllocations(format!(
            "{what} (the shape is [{{\"AllocatedUsageQuantity\": int, \"Tags\": [{{\"Key\": str, \"Value\": str}}]}}])"
        )))
    };
    if v.is_instance_of::<PyString>() || v.is_instance_of::<PyDict>() {
        return Err(malformed("not a list"));
    }
    let items = v.try_iter().map_err(|_| malformed("not a list"))?;
    let mut out = Vec::new();
    for item in items {
        let item = item?;
        let a = item
            .cast::<PyDict>()
            .map_err(|_| malformed("an allocation is not a dict"))?;
        if a.len() != 2 {
            return Err(malformed(
                "an allocation has other keys than AllocatedUsageQuantity and Tags",
            ));
        }
        let q = a
            .get_item("AllocatedUsageQuantity")?
            .ok_or_else(|| malformed("AllocatedUsageQuantity missing"))?;
        let q = non_negative_int(
            &q,
            "AllocatedUsageQuantity",
            DecodeError::NegativeOrNonIntegerAllocation,
            DecodeError::NegativeOrNonIntegerAllocation,
        )?;
        let tags = a
            .get_item("Tags")?
            .ok_or_else(|| malformed("Tags missing"))?;
        out.push(UsageAllocation::new(q, self::tags(&tags, &malformed)?));
    }
    Ok(out)
}

fn tags(v: &Bound<'_, PyAny>, malformed: &dyn Fn(&str) -> Fault) -> Result<Vec<Tag>, Fault> {
    if v.is_instance_of::<PyString>() || v.is_instance_of::<PyDict>() {
        return Err(malformed("Tags is not a list"));
    }
    let mut out = Vec::new();
    for tag in v.try_iter().map_err(|_| malformed("Tags is not a list"))? {
        let tag = tag?;
        let t = tag
            .cast::<PyDict>()
            .map_err(|_| malformed("a tag is not a dict"))?;
        let (Some(key), Some(value), 2) = (t.get_item("Key")?, t.get_item("Value")?, t.len())
        else {
            return Err(malformed("a tag is not {\"Key\": str, \"Value\": str}"));
        };
        out.push(Tag::new(string(&key, "Key")?, string(&value, "Value")?));
    }
    Ok(out)
}

/// Allocations back into the boto3 shape.
pub(crate) fn allocations_to_py<'py>(
    py: Python<'py>,
    allocations: &[UsageAllocation],
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    allocations
        .iter()
        .map(|a| {
            let d = PyDict::new(py);
            d.set_item("AllocatedUsageQuantity", a.allocated_usage_quantity)?;
            let tags = a
                .tags
                .iter()
                .map(|t| {
                    let d = PyDict::new(py);
                    d.set_item("Key", &t.key)?;
                    d.set_item("Value", &t.value)?;
                    Ok(d)
                })
                .collect::<PyResult<Vec<_>>>()?;
            d.set_item("Tags", tags)?;
            Ok(d)
        })
        .collect()
}
