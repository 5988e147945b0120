//! lambda-host's integration tests, one binary (docs/testing.md): the environments rendered
//! from the templates for the local stack, and the eleven built Lambda binaries each run as its
//! own process under the host's Runtime API, fed the event shapes AWS sends, on the local stack
//! (`#[ignore]`d: they need `cargo build --workspace --bins` and `awsmp-local up`; `scripts/test`
//! runs them).

mod common;
mod ingest;
mod init_error;
mod lifecycle;
mod pipeline;
mod poison;
mod render;
