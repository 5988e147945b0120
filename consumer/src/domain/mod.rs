//! Pure consumer logic: no AWS, no environment, no wall clock.
//!
//! | module | what it owns |
//! |---|---|
//! | [`seq`] | Kinesis sequence numbers in a form that sorts numerically, and lanes (shard + partition key) |
//! | [`record`] | one stream record: deaggregate, decode, verify, its dedup key |
//! | [`verify`] | timestamp authority, producer allowlist, quantity bounds |
//! | [`fold`] | the per-(group, second) fold of a batch, kept per stream record |
//! | [`row`] | the usage-row state, the conditional write, and the replay-exact decision |

pub mod fold;
pub mod record;
pub mod row;
pub mod seq;
pub mod verify;
