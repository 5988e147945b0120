//! Every in-memory twin, in one place. Each twin lives beside its port in the port's own crate
//! (that crate's unit tests use it, and cargo cannot let them use a crate that depends on
//! theirs); the kit re-exports them, so tests, the simulation and the local runner find them
//! here.

/// The pipeline's tables, queue and `BatchMeterUsage` (`pipeline/src/adapters/memory.rs`).
pub mod pipeline {
    pub use awsmp_pipeline::adapters::memory::*;
}

/// The consumer's stores (`consumer/src/adapters/memory.rs`) and its billing archive.
pub mod consumer {
    pub use awsmp_consumer::adapters::archive::MemoryBillingArchive;
    pub use awsmp_consumer::adapters::memory::*;
}

/// Meter-ingest's stores (`meter-ingest/src/adapters/memory.rs`).
pub mod ingest {
    pub use awsmp_meter_ingest::adapters::memory::*;
}

/// The lifecycle's stores (`lifecycle/src/adapters/memory.rs`).
pub mod lifecycle {
    pub use awsmp_lifecycle::adapters::memory::*;
}

/// The stores both sides share (`aws/src/watermark/memory.rs`).
pub mod shared {
    pub use awsmp_aws::watermark::MemoryWatermarkStore;
}

/// The producer's record sink (`producer/src/sink/memory.rs`).
pub mod producer {
    pub use awsmp_producer::sink::{MemoryRecordSink, StoredRecord};
}
