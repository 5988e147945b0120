//! The loadtest crate's integration tests as one binary, a module per subject: the AWS SDK is
//! linked once, not once per file (docs/testing.md, "Where the tests live").
//! Every test that uses the shared local stack holds [`common::STACK`], one at a time; tests
//! that start emulators of their own do not.

mod common;
mod esm_batching_window;
mod exactness_cleanup;
mod exactness_submitter;
mod host_demo;
mod lifecycle_e2e;
mod loadtest_conservation;
mod local_lifecycle;
mod local_stack;
mod meterctl_ledger;
mod meterctl_redrive;
mod multi_region;
mod multi_site_load;
mod pipeline_faults;
mod pipeline_plan;
mod reshard_fence;
mod stream_to_ledger;
