//! The Marketplace simulator's integration tests as one binary, a module per subject: the AWS SDK
//! is linked once, not once per file (docs/testing.md, "Where the tests live"). None of them
//! needs the local stack: each starts a simulator of its own, in-process or as the binary.

mod sim_bin;
mod sim_cloudtrail_lookup;
mod sim_lifecycle;
mod sim_sdk;
