//! The load test's integration tests as one binary, a module per subject: the AWS SDK is linked
//! once, not once per file (docs/testing.md, "Where the tests live"). Each runs `awsmp-loadtest`
//! on emulators of its own (a stack in a temporary directory), so none holds the shared stack.

mod common;
mod host_demo;
mod loadtest_conservation;
mod meterctl_ledger;
mod multi_site_load;
