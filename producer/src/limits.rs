//! Amazon Kinesis Data Streams limits the producer stays within.

/// Records per PutRecords call (Kinesis API reference, PutRecords: "up to 500 records").
pub const MAX_RECORDS_PER_PUT: usize = 500;
/// Bytes per PutRecords call, data plus partition keys (PutRecords: "up to 5 MiB for the entire request, including partition keys").
pub const MAX_BYTES_PER_PUT: usize = 5 * 1024 * 1024;
/// Bytes per record, data plus partition key (PutRecords: "each record ... can be as large as 1 MiB").
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// Write bytes per second per shard (Kinesis quotas: "up to 1 MiB per second" per shard).
pub const SHARD_BYTES_PER_SECOND: usize = 1024 * 1024;
/// Write records per second per shard (Kinesis quotas: "up to 1,000 records per second" per shard).
pub const SHARD_RECORDS_PER_SECOND: usize = 1_000;
