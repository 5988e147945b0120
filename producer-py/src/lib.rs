//! `awsmp_producer._native`: the Rust producer (`awsmp-producer`) as a CPython extension
//! module. The Python package `awsmp_producer` (python/awsmp_producer/) re-exports it with its
//! exceptions and the context managers (producer-py/README.md).

mod convert;
mod errors;
mod event;
mod meter;
mod producer;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<producer::PyProducer>()?;
    m.add_class::<meter::PyMeter>()?;
    m.add_class::<event::PyEvent>()?;
    m.add_class::<event::PyUndelivered>()?;
    m.add_class::<event::PyOutcome>()?;
    m.add_class::<event::PyStats>()?;
    m.add_function(wrap_pyfunction!(wait::after_fork_in_child, m)?)?;
    Ok(())
}
