//! Partition keys, their 128-bit hashes, and the map from hash ranges to shards (pure).

use md5::{Digest, Md5};

pub use awsmp_contract::limits::kinesis::MAX_PARTITION_KEY_CHARS;

/// The partition key of a group: `licenseArn|customerAWSAccountId|dimension`, or `g:` and the
/// hex MD5 of that string when it is longer than Kinesis allows. Stable across producers and
/// releases: the consumer may recompute it to check routing.
pub fn partition_key(license_arn: &str, customer_aws_account_id: &str, dimension: &str) -> String {
    let len = license_arn.len() + customer_aws_account_id.len() + dimension.len() + 2;
    let mut joined = String::with_capacity(len);
    for (i, part) in [license_arn, customer_aws_account_id, dimension]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            joined.push('|');
        }
        joined.push_str(part);
    }
    // Bytes bound code points: a key of at most 256 bytes needs no count.
    if len <= MAX_PARTITION_KEY_CHARS || joined.chars().count() <= MAX_PARTITION_KEY_CHARS {
        joined
    } else {
        let digest = Md5::digest(joined.as_bytes());
        let mut s = String::with_capacity(DIGEST_KEY_LEN);
        s.push_str("g:");
        for b in digest.as_slice() {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

/// The length of [`partition_key`]`(license_arn, customer_aws_account_id, dimension)`,
/// without building it.
pub fn partition_key_len(
    license_arn: &str,
    customer_aws_account_id: &str,
    dimension: &str,
) -> usize {
    let parts = [license_arn, customer_aws_account_id, dimension];
    let len = parts.iter().map(|p| p.len()).sum::<usize>() + 2;
    let chars = || parts.iter().map(|p| p.chars().count()).sum::<usize>() + 2;
    if len <= MAX_PARTITION_KEY_CHARS || chars() <= MAX_PARTITION_KEY_CHARS {
        len
    } else {
        DIGEST_KEY_LEN
    }
}

/// `g:` and 32 hex digits.
const DIGEST_KEY_LEN: usize = 34;

/// Kinesis's routing hash: MD5 of the partition key's UTF-8 bytes as a big-endian 128-bit integer.
pub fn partition_hash(partition_key: &str) -> u128 {
    let digest = Md5::digest(partition_key.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(digest.as_slice());
    u128::from_be_bytes(b)
}

/// Where the table entry of every single written from the v2 single head `head` starts, under
/// partition key `pk` ([`awsmp_contract::wire::v2::split_single_ranges`] of the head itself: the
/// entry ends where the head does). `None` when the head does not split so.
///
/// A fast path (docs/producer-internals.md, "The fast-path rule"): packing takes the split from here instead of reading each single.
/// Equivalence tests: `partition::tests::a_single_from_its_head_splits_where_the_head_says`
/// and `wire_v2::pack_with_given_splits_writes_the_same_records` (tests/integration).
pub(crate) fn head_entry_start(head: &[u8], pk: &str) -> Option<usize> {
    awsmp_contract::wire::v2::split_single_ranges(head, pk)
        .filter(|(entry, fields)| entry.end == head.len() && fields.is_empty())
        .map(|(entry, _)| entry.start)
}

/// One open shard and the hash keys it owns (inclusive bounds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRange {
    /// Shard id, e.g. `shardId-000000000000`.
    pub shard_id: String,
    /// First hash key of the shard.
    pub starting_hash_key: u128,
    /// Last hash key of the shard.
    pub ending_hash_key: u128,
}

/// The open shards of a stream, sorted by hash range.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardMap {
    shards: Vec<ShardRange>,
    /// Where [`ShardMap::shard_index`] starts and ends its search, by a hash's top bits.
    index: PrefixIndex,
}

/// Bits of a hash key that [`PrefixIndex`] is indexed by.
const PREFIX_BITS: u32 = 12;

/// For each of the 2^[`PREFIX_BITS`] spans of hash keys that share their top bits, the
/// index of the first shard that ends at or after the span's start. The first shard that
/// ends at or after a hash of the span (its owner, if any shard owns it) is at or after its
/// span's entry and at or before the next span's, so a lookup searches the shards between
/// the two (none or one of an evenly split stream) rather than the whole map. A search of
/// the whole map took a few mispredicted branches for each sum a closing window packs.
#[derive(Clone, PartialEq, Eq, Default)]
struct PrefixIndex(Box<[u32]>);

impl std::fmt::Debug for PrefixIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrefixIndex({} spans)", self.0.len())
    }
}

impl PrefixIndex {
    fn of(shards: &[ShardRange]) -> Self {
        let spans = (0..1u128 << PREFIX_BITS)
            .map(|p| {
                let start = p << (128 - PREFIX_BITS);
                let first = shards.partition_point(|s| s.ending_hash_key < start);
                u32::try_from(first).unwrap_or(u32::MAX)
            })
            .collect();
        PrefixIndex(spans)
    }

    /// The shards to search for the first that ends at or after `hash`, in a map of `len`:
    /// if none of them does, it is the one just past them.
    fn candidates(&self, hash: u128, len: usize) -> std::ops::Range<usize> {
        let p = (hash >> (128 - PREFIX_BITS)) as usize;
        let first = self.0.get(p).map_or(0, |&i| i as usize);
        let last = self.0.get(p + 1).map_or(len, |&i| i as usize);
        first.min(len)..last.min(len)
    }
}

impl ShardMap {
    /// A map from open shards (any order). Overlapping ranges are a sign of a listing taken
    /// mid-reshard and are refused.
    pub fn new(mut shards: Vec<ShardRange>) -> Result<Self, String> {
        shards.sort_by_key(|s| s.starting_hash_key);
        for s in &shards {
            if s.starting_hash_key > s.ending_hash_key {
                return Err(format!("shard {} has an empty hash range", s.shard_id));
            }
        }
        for w in shards.windows(2) {
            if w[1].starting_hash_key <= w[0].ending_hash_key {
                return Err(format!(
                    "shards {} and {} overlap",
                    w[0].shard_id, w[1].shard_id
                ));
            }
        }
        Ok(ShardMap::sorted(shards))
    }

    /// A map from shards sorted by hash range, not overlapping.
    fn sorted(shards: Vec<ShardRange>) -> Self {
        let index = PrefixIndex::of(&shards);
        ShardMap { shards, index }
    }

    /// `n` shards splitting the hash space evenly, as CreateStream does.
    pub fn uniform(n: usize) -> Self {
        assert!(n > 0, "a stream has at least one shard");
        // Equal widths; the last shard also takes the remainder.
        let width = u128::MAX / n as u128;
        let shards = (0..n)
            .map(|i| ShardRange {
                shard_id: format!("shardId-{i:012}"),
                starting_hash_key: width * i as u128,
                ending_hash_key: if i + 1 == n {
                    u128::MAX
                } else {
                    width * (i as u128 + 1) - 1
                },
            })
            .collect();
        ShardMap::sorted(shards)
    }

    /// The shards, sorted by starting hash key.
    pub fn shards(&self) -> &[ShardRange] {
        &self.shards
    }

    /// Number of open shards.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// True when the map holds no shard.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Index (into [`ShardMap::shards`]) of the shard owning `hash`, if the map covers it.
    pub fn shard_index(&self, hash: u128) -> Option<usize> {
        // The owner, if any, is the first shard that ends at or after `hash`: the shards are
        // sorted and do not overlap.
        let span = self.index.candidates(hash, self.shards.len());
        let first = span.start;
        let i = first + self.shards[span].partition_point(|s| s.ending_hash_key < hash);
        let s = self.shards.get(i)?;
        (s.starting_hash_key <= hash).then_some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_contract::event::GroupRef;
    use proptest::prelude::*;

    /// What `shard_index` answers, by a search of the whole map.
    fn owner_by_search(map: &ShardMap, hash: u128) -> Option<usize> {
        let i = map.shards.partition_point(|s| s.starting_hash_key <= hash);
        let i = i.checked_sub(1)?;
        (hash <= map.shards[i].ending_hash_key).then_some(i)
    }

    /// Hash keys at and around each shard's ends, and at each shard's own top bits.
    fn probes(map: &ShardMap) -> Vec<u128> {
        let mut out = vec![0, u128::MAX];
        for s in &map.shards {
            for k in [s.starting_hash_key, s.ending_hash_key] {
                out.extend([k.wrapping_sub(1), k, k.wrapping_add(1)]);
                let span = k >> (128 - PREFIX_BITS) << (128 - PREFIX_BITS);
                out.extend([span, span.wrapping_sub(1)]);
            }
        }
        out
    }

    proptest! {
        /// The owner a lookup finds through the prefix index is the one a search of the whole
        /// map finds, for maps with and without gaps (a listing taken mid-reshard), with shards
        /// narrower than a span of the index and wider than many, and for any hash key.
        #[test]
        fn the_indexed_lookup_finds_what_a_whole_search_finds(
            cuts in prop::collection::btree_set(any::<u128>(), 1..40),
            narrow in prop::collection::btree_set(0u128..1 << 20, 0..40),
            gaps in prop::collection::vec(any::<bool>(), 80),
            hashes in prop::collection::vec(any::<u128>(), 50),
        ) {
            // Boundaries anywhere, and a cluster of narrow shards near the start of the space.
            let bounds: Vec<u128> = narrow.into_iter().chain(cuts).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            let mut shards = Vec::new();
            for (i, w) in bounds.windows(2).enumerate() {
                if gaps[i % gaps.len()] && i % 3 == 0 {
                    continue;
                }
                shards.push(ShardRange {
                    shard_id: format!("shardId-{i:012}"),
                    starting_hash_key: w[0],
                    ending_hash_key: w[1] - 1,
                });
            }
            let map = ShardMap::new(shards).unwrap();
            for h in hashes.into_iter().chain(probes(&map)) {
                prop_assert_eq!(map.shard_index(h), owner_by_search(&map, h), "hash {}", h);
            }
        }
    }

    #[test]
    fn uniform_maps_and_the_empty_map_find_owners_as_a_whole_search_does() {
        for n in [1, 2, 3, 4, 7, 256, 4_096, 5_000] {
            let map = ShardMap::uniform(n);
            for h in probes(&map) {
                assert_eq!(
                    map.shard_index(h),
                    owner_by_search(&map, h),
                    "{n} shards, hash {h}"
                );
                assert!(
                    map.shard_index(h).is_some(),
                    "a uniform map covers every key"
                );
            }
        }
        assert_eq!(ShardMap::default().shard_index(7), None);
    }

    proptest! {
        /// A single written from its group's cached head splits for an aggregate exactly where
        /// the head says ([`crate::batch::UserRec::split`]): what `split_single_ranges` reads
        /// from the whole single, under the group's own partition key and under another key.
        #[test]
        fn a_single_from_its_head_splits_where_the_head_says(
            license in "arn:aws:license-manager::[0-9]{12}:license:l-[0-9a-f|]{0,32}",
            account in "[0-9]{12}",
            dimension in "[a-z|-]{1,20}",
            producer_id in prop::option::of("[a-z0-9-]{0,12}"),
            quantity in prop_oneof![Just(0u64), any::<u64>()],
            millis in 0i64..260_000_000_000_000,
            (epoch, lane, seq) in (any::<u128>(), 0u8..64, any::<u64>()),
            other_key in any::<bool>(),
        ) {
            use awsmp_contract::wire::v2::{put_generated_single, single_head, split_single_ranges};
            let group = GroupRef {
                license_arn: &license,
                customer_aws_account_id: &account,
                dimension: &dimension,
            };
            let pk = if other_key {
                "another-key".to_owned()
            } else {
                partition_key(&license, &account, &dimension)
            };
            let head = single_head(group, producer_id.as_deref(), epoch);
            let id = awsmp_contract::event_id::GeneratedId { epoch, lane, seq };
            let mut single = bytes::BytesMut::new();
            put_generated_single(&mut single, &head, quantity, millis, id);
            let entry = head_entry_start(&head, &pk);
            prop_assert!(entry.is_some());
            let given = entry.map(|e| (e..head.len(), head.len()..single.len()));
            prop_assert_eq!(given, split_single_ranges(&single, &pk));
        }
    }

    #[test]
    fn partition_key_is_the_group_and_stable() {
        let pk = partition_key(
            "arn:aws:license-manager::1:license:l-x",
            "123456789012",
            "reqs",
        );
        assert_eq!(
            pk,
            "arn:aws:license-manager::1:license:l-x|123456789012|reqs"
        );
        let long_dim = "d".repeat(300);
        let a = partition_key("arn", "123456789012", &long_dim);
        assert!(a.starts_with("g:") && a.len() == 34);
        assert_eq!(a, partition_key("arn", "123456789012", &long_dim));
        assert_ne!(a, partition_key("arn", "123456789013", &long_dim));
        for (l, acct, d) in [
            ("arn", "123456789012", long_dim.as_str()),
            ("arn", "1", "é".repeat(127).as_str()),
            ("arn", "1", "é".repeat(126).as_str()),
            ("arn", "1", "reqs"),
        ] {
            assert_eq!(
                partition_key_len(l, acct, d),
                partition_key(l, acct, d).len()
            );
        }
    }

    #[test]
    fn hash_is_md5_big_endian() {
        // md5("a") = 0cc175b9c0f1b6a831c399e269772661
        assert_eq!(partition_hash("a"), 0x0cc175b9c0f1b6a831c399e269772661);
    }

    #[test]
    fn uniform_map_covers_everything_without_gaps() {
        for n in [1, 2, 3, 7, 64] {
            let m = ShardMap::uniform(n);
            assert_eq!(m.shards()[0].starting_hash_key, 0);
            assert_eq!(m.shards()[n - 1].ending_hash_key, u128::MAX);
            for w in m.shards().windows(2) {
                assert_eq!(w[0].ending_hash_key + 1, w[1].starting_hash_key);
            }
            assert_eq!(ShardMap::new(m.shards().to_vec()), Ok(m.clone()));
            assert_eq!(m.shard_index(0), Some(0));
            assert_eq!(m.shard_index(u128::MAX), Some(n - 1));
            for s in m.shards() {
                let i = m.shard_index(s.starting_hash_key).unwrap();
                assert_eq!(m.shards()[i].shard_id, s.shard_id);
                assert_eq!(m.shard_index(s.ending_hash_key), Some(i));
            }
        }
    }

    #[test]
    fn gaps_and_overlaps() {
        let r = |id: &str, a, b| ShardRange {
            shard_id: id.into(),
            starting_hash_key: a,
            ending_hash_key: b,
        };
        let m = ShardMap::new(vec![r("b", 100, 200), r("a", 10, 50)]).unwrap();
        assert_eq!(m.shard_index(5), None);
        assert_eq!(m.shard_index(60), None);
        assert_eq!(m.shard_index(150), Some(1));
        assert!(ShardMap::new(vec![r("a", 0, 100), r("b", 100, 200)]).is_err());
    }
}
