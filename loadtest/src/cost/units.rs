//! How AWS rounds what an operation did into the units it bills.

use awsmp_contract::row::{AttrValue, RawUsageRow};

/// A Kinesis PUT payload unit is a 25 KB chunk of a record
/// (<https://aws.amazon.com/kinesis/data-streams/pricing/>).
pub const PUT_PAYLOAD_UNIT_BYTES: u64 = 25 * 1024;
/// Kinesis on-demand bills data in per record rounded up to 1 KB (same page).
pub const ON_DEMAND_RECORD_ROUNDING_BYTES: u64 = 1024;
/// One DynamoDB write request unit writes an item of up to 1 KB
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>).
pub const WRITE_UNIT_BYTES: u64 = 1024;
/// One DynamoDB read request unit reads up to 4 KB strongly consistent, twice that eventually
/// consistent (same page).
pub const READ_UNIT_BYTES: u64 = 4096;
/// SQS bills every 64 KB chunk of a request's payload as one request
/// (<https://aws.amazon.com/sqs/pricing/>).
pub const SQS_CHUNK_BYTES: u64 = 64 * 1024;
/// Bytes in a GB as the Kinesis and Lambda pricing pages count them (2^30).
pub const GB: f64 = 1_073_741_824.0;

/// PUT payload units of one record of `bytes` (data and partition key); at least one.
pub fn put_payload_units(bytes: u64) -> u64 {
    bytes.div_ceil(PUT_PAYLOAD_UNIT_BYTES).max(1)
}

/// Bytes on-demand Kinesis bills as ingested for one record of `bytes`.
pub fn on_demand_billed_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(ON_DEMAND_RECORD_ROUNDING_BYTES).max(1) * ON_DEMAND_RECORD_ROUNDING_BYTES
}

/// Write request units of one write of an item of `bytes`; at least one.
pub fn write_units(bytes: u64) -> u64 {
    bytes.div_ceil(WRITE_UNIT_BYTES).max(1)
}

/// Read request units of reading `bytes` in one request (a query rounds the sum of its items),
/// halved for an eventually consistent read.
pub fn read_units(bytes: u64, strongly_consistent: bool) -> f64 {
    let units = bytes.div_ceil(READ_UNIT_BYTES).max(1) as f64;
    if strongly_consistent {
        units
    } else {
        units / 2.0
    }
}

/// Billed requests of one SQS request carrying `bytes`; at least one.
pub fn sqs_requests(bytes: u64) -> u64 {
    bytes.div_ceil(SQS_CHUNK_BYTES).max(1)
}

/// GB-seconds of `billed_ms` milliseconds of Lambda duration at `memory_mb`.
pub fn gb_seconds(billed_ms: u64, memory_mb: u32) -> f64 {
    billed_ms as f64 / 1000.0 * f64::from(memory_mb) / 1024.0
}

/// A DynamoDB item's size as DynamoDB bills it: every attribute's name plus its value
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>).
pub fn item_bytes(item: &RawUsageRow) -> u64 {
    item.iter()
        .map(|(name, v)| name.len() as u64 + value_bytes(v))
        .sum()
}

/// One value's size: strings their UTF-8 length, numbers about one byte per two significant
/// digits plus one, booleans and NULL one byte, lists and maps 3 bytes plus one a member.
fn value_bytes(v: &AttrValue) -> u64 {
    match v {
        AttrValue::S(s) => s.len() as u64,
        AttrValue::N(n) => {
            let digits = n.trim_start_matches(['-', '0']).replace('.', "");
            let significant = digits.trim_end_matches('0').len().max(1) as u64;
            significant.div_ceil(2) + 1
        }
        AttrValue::Bool(_) | AttrValue::Null | AttrValue::Other => 1,
        AttrValue::L(items) => 3 + items.iter().map(|i| 1 + value_bytes(i)).sum::<u64>(),
        AttrValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, i)| 1 + k.len() as u64 + value_bytes(i))
                .sum::<u64>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn kinesis_units_round_up_per_record() {
        // The pricing page's own examples: 5 KB → 1 unit, 45 KB → 2, 1 MB → 40.
        assert_eq!(put_payload_units(5 * 1024), 1);
        assert_eq!(put_payload_units(45 * 1024), 2);
        assert_eq!(
            put_payload_units(1024 * 1024),
            41,
            "1 MiB is 40.96 chunks of 25 KiB"
        );
        assert_eq!(put_payload_units(1_000 * 1024), 40);
        assert_eq!(put_payload_units(0), 1);
        // On-demand: 4.5 KB counts as 5 KB.
        assert_eq!(on_demand_billed_bytes(4608), 5 * 1024);
        assert_eq!(on_demand_billed_bytes(1), 1024);
    }

    #[test]
    fn dynamodb_units_round_up_by_item_size() {
        assert_eq!(write_units(1), 1);
        assert_eq!(write_units(1024), 1);
        assert_eq!(write_units(1025), 2);
        assert_eq!(write_units(3 * 1024), 3);
        assert_eq!(read_units(8 * 1024, true), 2.0);
        assert_eq!(read_units(8 * 1024, false), 1.0);
        assert_eq!(read_units(3500, true), 1.0);
        assert_eq!(read_units(3500, false), 0.5);
    }

    #[test]
    fn sqs_and_lambda_units() {
        assert_eq!(sqs_requests(1), 1);
        assert_eq!(sqs_requests(64 * 1024), 1);
        assert_eq!(sqs_requests(64 * 1024 + 1), 2);
        assert_eq!(sqs_requests(256 * 1024), 4);
        // 2,000 ms at 1,024 MB is 2 GB-s; 500 ms at 128 MB is 1/16 GB-s.
        assert_eq!(gb_seconds(2_000, 1024), 2.0);
        assert_eq!(gb_seconds(500, 128), 0.0625);
    }

    #[test]
    fn item_size_counts_names_and_values() {
        let item: RawUsageRow = BTreeMap::from([
            ("pk".to_owned(), AttrValue::s("abc")),       // 2 + 3
            ("q".to_owned(), AttrValue::n(12_345)),       // 1 + (5/2↑ + 1) = 1 + 4
            ("flag".to_owned(), AttrValue::Bool(true)),   // 4 + 1
            ("z".to_owned(), AttrValue::N("100".into())), // 1 + (1/2↑ + 1) = 1 + 2
            (
                "l".to_owned(),
                AttrValue::L(vec![AttrValue::s("x"), AttrValue::Null]), // 1 + 3 + (1+1) + (1+1)
            ),
        ]);
        assert_eq!(item_bytes(&item), 5 + 5 + 5 + 3 + 8);
    }
}
