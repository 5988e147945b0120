//! producer's integration tests, one binary: each module was once a binary of its own
//! (one link of the AWS SDK instead of one per file; docs/testing.md).

mod common;
mod delivery;
mod interop;
mod kinesis;
mod properties;
mod wire_format;
mod wire_v2;
