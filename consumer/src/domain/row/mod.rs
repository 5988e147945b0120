//! The usage row as the consumer sees it, its conditional write, and the decision that keeps
//! replays exact.
//!
//! **Watermarks.** Each row stores, per lane (shard + Kinesis partition key, see
//! [`Lane`](crate::domain::seq::Lane)), the highest sequence number whose contribution it holds (`seq#<lane>`
//! attributes, sortable strings). Lambda delivers a lane in order and only ever replays a
//! suffix of it, so the parts a row holds are always a prefix of its lane: a part is applied
//! exactly when its sequence number is at or below the watermark. The first write of a batch
//! is optimistic ([`Guard::Fresh`]: every lane's watermark below the batch's first part); on a
//! conflict the row is read and [`resolve`] decides part by part, then writes with
//! [`Guard::Version`] (compare-and-set on `rowVersion`).
//!
//! **Decisions that are final.** Late usage (the group-hour is finalized), mixing allocated and
//! unallocated usage in one row, a row total above the API maximum and too many tag sets are
//! recorded as rejected parts *before* the write that advances the watermark past them; each
//! condition is sticky (quantities only grow, a finalized row stays finalized), so a replay
//! never accepts a part it once rejected.
//!
//! | module | what it owns |
//! |---|---|
//! | `state` | [`RowState`], the consumer's view of a stored row |
//! | `resolve` | [`resolve`]: the [`Decision`] for one row's parts |
//! | `write` | [`RowWrite`], its [`Guard`] and [`Change`], and the row it produces |

mod resolve;
mod state;
#[cfg(test)]
mod tests;
mod write;

pub use resolve::{
    Decision, MAX_ITEM_BYTES, MAX_ROW_ALLOCATION_BYTES, Observation, PartRejection, RecordMeta,
    Resolve, RowLimits, WritePlan, allocation_bytes, resolve,
};
pub use state::RowState;
pub use write::{Change, Guard, RowWrite, row_write};
