//! The usage stream's heartbeat marker (docs/guarantees.md, "Ingest watermark").
//!
//! Lambda invokes the consumer only for shards that have records, so an idle shard's watermark
//! would never move. The `stream-heartbeat` function puts [`HEARTBEAT_MARKER`] into every open
//! shard (explicit hash key = the shard's starting hash key) on a schedule; the consumer
//! recognises it by its exact bytes, bills nothing, refuses nothing, and advances that shard's
//! watermark to the marker's arrival time.

/// The marker's whole payload. Neither a KPL aggregate (magic `F3 89 9A C2`) nor a JSON event
/// (`{`), so it cannot be confused with usage.
pub const HEARTBEAT_MARKER: &[u8] = b"awsmp-heartbeat:v1";
/// The marker's partition key (ignored: the explicit hash key routes the record).
pub const HEARTBEAT_PARTITION_KEY: &str = "awsmp-heartbeat";
/// Heartbeat period, seconds: one PUT payload unit per shard-minute.
pub const HEARTBEAT_PERIOD_SECS: u64 = 60;
