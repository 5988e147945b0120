//! The pipeline crate's integration tests as one binary, a module per subject: the AWS SDK is
//! linked once, not once per file (docs/testing.md, "Where the tests live").

mod contract_aggregated;
mod contract_queue;
mod contract_support;
mod contract_usage;
mod domain_fold;
mod domain_keys;
mod domain_submit;
mod handler_aggregator;
mod handler_aggregator_overflow;
mod handler_cleanup;
mod handler_cleanup_race;
mod handler_discoverer;
mod handler_expiry;
mod handler_expiry_race;
mod handler_fence;
mod handler_submitter;
mod handler_submitter_throughput;
mod handler_submitter_truth;
mod handler_support;
mod sample_events;
