//! The consumer's mutant hooks share the pipeline's registry (one active mutant per process):
//! see `pipeline/src/mutants.rs`.

pub use awsmp_pipeline::mutants::{Mutant, active};
