//! The AWS limits awsmp stays within, one module per service, one constant per limit, each
//! with the AWS page that states it. Bounds of our own that exist because of an AWS limit sit
//! beside it, saying so.

/// AWS Marketplace Metering Service: `BatchMeterUsage`, its records, allocations and tags.
pub mod marketplace {
    /// At most 5 tags per `UsageAllocation` (BatchMeterUsage `Tags`: 1–5 items,
    /// <https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageAllocation.html>).
    pub const MAX_TAGS_PER_ALLOCATION: usize = 5;

    /// At most 2,500 `UsageAllocations` (merged tag sets) per `UsageRecord`
    /// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>).
    pub const MAX_ALLOCATIONS_PER_RECORD: usize = 2_500;

    /// `UsageRecord.Quantity` and `AllocatedUsageQuantity` are 32-bit integers, 0–2,147,483,647
    /// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>);
    /// a larger event, row or hour total cannot be submitted.
    pub const MAX_USAGE_QUANTITY: u64 = i32::MAX as u64;

    /// `BatchMeterUsage` accepts up to 25 `UsageRecords` per call
    /// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_BatchMeterUsage.html>).
    pub const MAX_USAGE_RECORDS_PER_CALL: usize = 25;

    /// `BatchMeterUsage` quota: about 10 calls per second per account and region, shared by every
    /// product metered there (AWS Marketplace Metering Service quotas,
    /// <https://docs.aws.amazon.com/marketplace/latest/userguide/metering-service-quotas.html>).
    pub const BATCH_METER_USAGE_CALLS_PER_SECOND: u32 = 10;

    /// `BatchMeterUsage` rejects request payloads over 1 MB (docs/metering-api.md, "Batch limits").
    pub const MAX_REQUEST_BYTES: usize = 1_048_576;

    /// `Tag.Key` length: 1 to 100 characters
    /// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_Tag.html>).
    pub const MAX_TAG_KEY_LENGTH: usize = 100;

    /// `Tag.Value` length: 1 to 256 characters (same page).
    pub const MAX_TAG_VALUE_LENGTH: usize = 256;

    /// The pattern AWS documents for both `Tag.Key` and `Tag.Value`, verbatim (same page). Read
    /// as a regular expression, ` -=` inside the class is the range U+0020–U+003D (space, `!` …
    /// `=`, digits included); [`matches_tag_pattern`] applies it exactly as written.
    pub const TAG_PATTERN: &str = r"^[a-zA-Z0-9+ -=._:\/@]+$";

    /// True when `s` matches [`TAG_PATTERN`].
    ///
    /// ```
    /// use awsmp_contract::limits::marketplace::matches_tag_pattern;
    /// assert!(matches_tag_pattern("team:a/b@c=1 x"));
    /// assert!(!matches_tag_pattern("é") && !matches_tag_pattern("a|b") && !matches_tag_pattern(""));
    /// ```
    pub fn matches_tag_pattern(s: &str) -> bool {
        static PATTERN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
            regex::Regex::new(TAG_PATTERN).expect("the documented Tag pattern compiles")
        });
        PATTERN.is_match(s)
    }
}

/// Amazon Kinesis Data Streams: `PutRecords` and the per-shard write quotas.
pub mod kinesis {
    /// Records per `PutRecords` call ("up to 500 records",
    /// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecords.html>).
    pub const MAX_RECORDS_PER_PUT: usize = 500;
    /// Bytes per `PutRecords` call, data plus partition keys ("up to 5 MiB for the entire
    /// request, including partition keys", same page).
    pub const MAX_BYTES_PER_PUT: usize = 5 * 1024 * 1024;
    /// Bytes per record, data plus partition key ("each record ... can be as large as 1 MiB",
    /// same page).
    pub const MAX_RECORD_BYTES: usize = 1024 * 1024;
    /// Write bytes per second per shard ("up to 1 MiB per second" per shard,
    /// <https://docs.aws.amazon.com/streams/latest/dev/service-sizes-and-limits.html>).
    pub const SHARD_BYTES_PER_SECOND: usize = 1024 * 1024;
    /// Write records per second per shard ("up to 1,000 records per second" per shard, same
    /// page).
    pub const SHARD_RECORDS_PER_SECOND: usize = 1_000;
    /// Longest partition key, in Unicode code points (`PartitionKey`: "Minimum length of 1.
    /// Maximum length of 256",
    /// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecordsRequestEntry.html>).
    pub const MAX_PARTITION_KEY_CHARS: usize = 256;
}

/// Amazon DynamoDB: item size and batch reads.
pub mod dynamodb {
    /// An item's size limit, 400 KB, attribute names included
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html>).
    pub const MAX_ITEM_BYTES: usize = 400 * 1024;
    /// Keys per `BatchGetItem` request ("up to 100 items",
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html>).
    pub const MAX_BATCH_GET_KEYS: usize = 100;
}

/// Amazon SQS: batch sizes and message size.
pub mod sqs {
    /// Entries per `SendMessageBatch` / `DeleteMessageBatch` call ("a maximum of 10 messages",
    /// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html>).
    pub const MAX_BATCH_ENTRIES: usize = 10;
    /// Messages per `ReceiveMessage` call ("Valid values: 1 to 10",
    /// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html>).
    pub const MAX_RECEIVE_MESSAGES: usize = 10;
    /// Cleanup messages carry at most 100 raw-row keys: our bound, far below SQS's 256 KiB message
    /// size (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html>)
    /// even for the longest keys.
    pub const MAX_CLEANUP_KEYS_PER_MESSAGE: usize = 100;
}

/// AWS CloudTrail: event history lookups.
pub mod cloudtrail {
    /// `LookupEvents` answers at most 50 events a page (`MaxResults`: 1–50,
    /// <https://docs.aws.amazon.com/awscloudtrail/latest/APIReference/API_LookupEvents.html>).
    pub const LOOKUP_EVENTS_MAX_RESULTS: i32 = 50;
    /// `LookupEvents` is limited to 2 requests per second per account and region
    /// (<https://docs.aws.amazon.com/awscloudtrail/latest/userguide/WhatIsCloudTrail-Limits.html>).
    pub const LOOKUP_EVENTS_PER_SECOND: u32 = 2;
    /// Event history covers the last 90 days
    /// (<https://docs.aws.amazon.com/awscloudtrail/latest/userguide/view-cloudtrail-events.html>).
    pub const EVENT_HISTORY_DAYS: i64 = 90;
}
