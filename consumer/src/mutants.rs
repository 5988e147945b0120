//! The consumer's mutant hooks share the pipeline's registry (one active mutant per process):
//! see `aws/src/mutants.rs`.

pub use awsmp_aws::mutants::{Mutant, active};
