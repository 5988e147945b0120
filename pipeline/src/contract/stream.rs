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

/// Separates the stream from the shard in a watermark key. Kinesis stream names match
/// `[a-zA-Z0-9_.-]+` (<https://docs.aws.amazon.com/kinesis/latest/APIReference/API_CreateStream.html>),
/// so the separator never occurs in one.
pub const WATERMARK_KEY_SEPARATOR: char = '/';

/// The ingest-watermark table's key value for one shard of one stream: `{stream}/{shardId}`
/// (docs/row-contract.md, "Ingest watermarks"). Keyed by stream too, so two streams metered
/// into one table never share an item.
pub fn watermark_key(stream: &str, shard_id: &str) -> String {
    format!("{stream}{WATERMARK_KEY_SEPARATOR}{shard_id}")
}

/// The stream and shard of a watermark key; a key without a stream (the format before keys
/// named their stream) is `(None, key)`.
pub fn parse_watermark_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once(WATERMARK_KEY_SEPARATOR) {
        Some((stream, shard)) => (Some(stream), shard),
        None => (None, key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_key_names_stream_and_shard_and_parses_back() {
        let key = watermark_key("awsmp-usage-events", "shardId-000000000001");
        assert_eq!(key, "awsmp-usage-events/shardId-000000000001");
        assert_eq!(
            parse_watermark_key(&key),
            (Some("awsmp-usage-events"), "shardId-000000000001")
        );
        assert_eq!(
            parse_watermark_key("shardId-000000000001"),
            (None, "shardId-000000000001")
        );
    }
}
