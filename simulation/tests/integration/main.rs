//! The simulation crate's integration tests as one binary, a module per subject: the AWS SDK
//! is linked once, not once per file (docs/testing.md, "Where the tests live"). The mutants
//! test stays a binary of its own: it is built with the `mutants` feature.

mod consumer_common;
mod consumer_exactness;
mod consumer_rows_property;
mod contract_esm;
mod ingest;
mod known_limitations;
mod lifecycle;
mod on_failure_destination;
mod replay;
mod sweep;
