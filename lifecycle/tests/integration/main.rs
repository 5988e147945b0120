//! The lifecycle crate's integration tests as one binary, a module per subject: the AWS SDK is
//! linked once, not once per file (docs/testing.md, "Where the tests live").

mod adapters_stack;
mod cleanup_and_register;
mod contract_subscribers;
mod convergence;
mod sample_events;
mod subscription_fixtures;
