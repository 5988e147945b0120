//! The usage row as the consumer sees it, its conditional write, and the decision that keeps
//! replays exact.
//!
//! **Watermarks.** Each row stores, per lane (shard + Kinesis partition key, see
//! [`Lane`](crate::domain::seq::Lane)), the highest sequence number whose contribution it holds (`seq#<lane>`
//! attributes, sortable strings), and the spans of the lane its writes covered (`cov#<lane>`,
//! [`Coverage`]). Lambda delivers a lane in order and replays only a suffix of it — but a
//! batch it discards to the on-failure destination is skipped, and a later record can move
//! the watermark past records the row never held. So a part is applied exactly when its
//! record lies in one of the lane's spans, not when it is below the watermark; a re-driven
//! record outside every span is added. The first write of a batch is optimistic
//! ([`Guard::Fresh`]: every lane's watermark below the batch's first part, so no part can be
//! in a span; it appends its span); on a conflict the row is read and [`resolve`] decides part
//! by part, then writes with [`Guard::Version`] (compare-and-set on `rowVersion`).
//!
//! **Decisions that are final.** Late usage (the group-hour is finalized), mixing allocated and
//! unallocated usage in one row, a row total above the API maximum and too many tag sets are
//! recorded as rejected parts *before* the write that advances the watermark past them; each
//! condition is sticky (quantities only grow, a finalized row stays finalized), so a replay
//! never accepts a part it once rejected.
//!
//! | module | what it owns |
//! |---|---|
//! | `coverage` | [`Coverage`]: the spans of a lane a row holds, and the [`Proof`] they give |
//! | `state` | [`RowState`], the consumer's view of a stored row |
//! | `resolve` | [`resolve`]: the [`Decision`] for one row's parts |
//! | `write` | [`RowWrite`], its [`Guard`] and [`Change`], and the row it produces |

pub mod coverage;
mod resolve;
mod state;
#[cfg(test)]
mod tests;
mod write;

pub use coverage::{Coverage, Proof};
pub use resolve::{
    Decision, MAX_ITEM_BYTES, MAX_ROW_ALLOCATION_BYTES, Observation, PartRejection, RecordMeta,
    Resolve, RowLimits, WritePlan, allocation_bytes, resolve,
};
pub use state::RowState;
pub use write::{Change, Guard, RowWrite, SpanWrite, row_write};
