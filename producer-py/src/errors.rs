//! The producer's errors as the Python exceptions of `awsmp_producer.errors` (defined there, in
//! Python, so that their docstrings and attributes read as Python): each carries the Rust
//! error's stable reason code and, where the error is about one event, the event.

use awsmp_producer::{Event, ProducerError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::convert::Fault;
use crate::event::PyEvent;

const MODULE: &str = "awsmp_producer.errors";

static PRODUCER_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_EVENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static EVENT_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static BUFFER_FULL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static RECORD_TIMEOUT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CLOSED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CONFIG: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The exception classes, by the name `awsmp_producer.errors` gives them.
#[derive(Clone, Copy)]
pub(crate) enum Class {
    ProducerError,
    InvalidEvent,
    EventType,
    BufferFull,
    RecordTimeout,
    Closed,
    Config,
}

impl Class {
    fn cell(self) -> (&'static PyOnceLock<Py<PyType>>, &'static str) {
        match self {
            Class::ProducerError => (&PRODUCER_ERROR, "ProducerError"),
            Class::InvalidEvent => (&INVALID_EVENT, "InvalidEventError"),
            Class::EventType => (&EVENT_TYPE, "EventTypeError"),
            Class::BufferFull => (&BUFFER_FULL, "BufferFullError"),
            Class::RecordTimeout => (&RECORD_TIMEOUT, "RecordTimeoutError"),
            Class::Closed => (&CLOSED, "ProducerClosedError"),
            Class::Config => (&CONFIG, "ConfigError"),
        }
    }
}

/// An exception of `class` with `message`, the stable `reason` and the event it is about.
pub(crate) fn raise(
    py: Python<'_>,
    class: Class,
    message: String,
    reason: &str,
    event: Option<Event>,
) -> PyErr {
    let (cell, name) = class.cell();
    let made = cell.import(py, MODULE, name).and_then(|cls| {
        let event = event
            .map(|inner| Py::new(py, PyEvent { inner }))
            .transpose()?;
        cls.call1((message, reason, event))
    });
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// A Rust [`ProducerError`] as its Python exception, with the event it gives back.
pub(crate) fn producer_error(py: Python<'_>, e: ProducerError) -> PyErr {
    let reason = e.reason();
    let message = error_chain(&e);
    let class = match &e {
        ProducerError::Invalid { .. } => Class::InvalidEvent,
        ProducerError::Full(_) => Class::BufferFull,
        ProducerError::Closed(_) => Class::Closed,
        ProducerError::Config(_) => Class::Config,
        _ => Class::ProducerError,
    };
    raise(py, class, message, reason, e.into_event())
}

/// A value refused before it became an event ([`Fault`]) as its Python exception.
pub(crate) fn fault_to_py(py: Python<'_>, fault: Fault, event: Option<Event>) -> PyErr {
    match fault {
        Fault::Python(e) => e,
        Fault::Invalid(v) => raise(
            py,
            Class::InvalidEvent,
            format!("invalid event ({}): {v}", v.reason()),
            v.reason(),
            event,
        ),
        Fault::Decode(d) => {
            let class = match d {
                awsmp_producer::DecodeError::WrongFieldType { .. } => Class::EventType,
                _ => Class::InvalidEvent,
            };
            let message = format!("invalid event ({}): {d}", d.reason());
            raise(py, class, message, d.reason(), event)
        }
    }
}

/// `error: source: source…` (each error's own `Display` shows only itself).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}
