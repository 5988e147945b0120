//! The meter-ingest crate's integration tests as one binary, a module per subject: the AWS SDK
//! is linked once, not once per file (docs/testing.md, "Where the tests live").

mod adapters_stack;
mod common;
mod handler;
mod retry;
mod sample_events;
mod stack;
