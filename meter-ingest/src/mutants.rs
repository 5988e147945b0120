//! meter-ingest's mutant hook shares the registry of the pipeline and the consumer (one active
//! mutant per process): see `aws/src/mutants.rs`.

pub use awsmp_aws::mutants::{Mutant, active};
