//! The usage-row contract, spelled once (docs/row-contract.md, docs/operations.md).
//!
//! Everything two crates must agree on lives here, and both import it: the consumer
//! (`awsmp-consumer`, the row writer) and the pipeline stages (the row readers and finalizers).
//! Nothing in here does I/O; it is names, numbers and the small enums the stored values parse
//! into.
//!
//! | module | what it owns |
//! |---|---|
//! | [`attrs`] | DynamoDB attribute and index names of the usage and aggregated-usage tables, the audit stamp format |
//! | [`status`] | the `meteringStatus` domains and the client-side guardrail reasons ([`status::RejectReason`]) |
//! | [`reasons`] | every other reason code: stamped in `meteringStatusReason`, or recorded with a rejected event |
//! | [`metrics`] | business metric names with their CloudWatch units, and their dimension names |
//! | [`stream`] | the usage stream's heartbeat marker |
//! | [`subscribers`] | attribute, index and status names of the subscribers and customer-profile tables |
//! | [`limits`] | the AWS limits the consumer and the pipeline enforce, each with its source |
//!
//! The key formats (sort keys, hour buckets, whole-second timestamps) are functions, not names;
//! they live in [`crate::domain::keys`]. The tag of a usage allocation is the event's own
//! [`awsmp_producer::Tag`], re-exported as [`crate::domain::row::Tag`].

pub mod attrs;
pub mod limits;
pub mod metrics;
pub mod reasons;
pub mod status;
pub mod stream;
pub mod subscribers;
