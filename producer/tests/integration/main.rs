//! The producer crate's integration tests as one binary, a module per subject: the AWS SDK is
//! linked once, not once per file (docs/testing.md, "Where the tests live").

mod common;
mod delivery;
mod interop;
mod kinesis;
mod properties;
mod wire_format;
mod wire_v2;
