//! The local stack's integration tests as one binary, a module per subject: the AWS SDK is
//! linked once, not once per file (docs/testing.md, "Where the tests live"). They cover
//! `awsmp-local` (up, down, wipe, many products and regions), the local runner driving the
//! pipeline's handlers (the test plan, fault injection, lifecycle, meterctl re-drive) and the
//! Kinesis event source mapping. Every test that uses the shared local stack holds
//! [`common::STACK`], one at a time; tests that start emulators of their own do not.

mod common;
mod esm_batching_window;
mod exactness_cleanup;
mod exactness_submitter;
mod lifecycle_e2e;
mod local_lifecycle;
mod local_stack;
mod meterctl_redrive;
mod multi_region;
mod pipeline_faults;
mod pipeline_plan;
mod reshard_fence;
mod stream_to_ledger;
