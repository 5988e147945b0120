//! The consumer crate's integration tests as one binary, a module per subject: the AWS SDK is
//! linked once, not once per file (docs/testing.md, "Where the tests live").

mod adapters_stack;
mod bad_input;
mod common;
mod contract_dedup;
mod decode_paths;
mod event_ids;
mod event_ids_stack;
mod handler_fixtures;
mod ingest_archive;
mod sample_events;
mod stack;
mod watermark_contract;
mod wire_v2;
