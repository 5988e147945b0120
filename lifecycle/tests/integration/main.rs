//! lifecycle's integration tests, one binary: each module was once a binary of its own
//! (one link of the AWS SDK instead of one per file; docs/testing.md).

mod adapters_stack;
mod cleanup_and_register;
mod contract_subscribers;
mod convergence;
mod sample_events;
mod subscription_fixtures;
