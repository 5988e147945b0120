//! Pure consumer logic: no AWS, no environment, no wall clock. The names it shares with the
//! pipeline (row attributes, reason codes, metric names and units, AWS limits) come from the
//! row contract, [`awsmp_contract`].
//!
//! | module | what it owns |
//! |---|---|
//! | [`seq`] | Kinesis sequence numbers in a form that sorts numerically, and lanes (shard + partition key) |
//! | [`record`] | one stream record: deaggregate, decode, verify, its dedup key |
//! | [`fast`] | the record hot path: a decode borrowing from the record's bytes, no allocation per event |
//! | [`trailer`] | the MD5 trailers of a batch's aggregates, checked side by side in SIMD lanes |
//! | [`intern`] | group names and producer ids interned per batch |
//! | [`accepted`] | an accepted event as the hot path keeps it (interned group, id as numbers) |
//! | [`verify`] | timestamp authority, producer allowlist, quantity bounds |
//! | [`dedup`] | which events were already applied: sequences of generated ids per lane, claims of caller ids |
//! | [`fold`] | the per-(group, second) fold of a batch, kept per stream record |
//! | [`row`] | the usage-row state, the conditional write, and the replay-exact decision |

pub mod accepted;
pub mod dedup;
pub mod fast;
pub mod fold;
pub mod intern;
pub mod record;
pub mod row;
pub mod seq;
pub mod trailer;
pub mod verify;
