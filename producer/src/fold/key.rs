//! What a sum of the window table is found by ([`FoldKey`]): a hash of its group (kept by a
//! bound group handle or the thread's key cache, [`GroupHash`]), UTC second, producer id and
//! kind, and the borrowed fields compared against the sum's template.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use foldhash::fast::FixedState;

use super::{Bucket, FOLD_SHARDS};
use awsmp_contract::event::{Event, GroupRef};

/// Fixed seed: a sum's place depends on its key only.
const KEY_HASHER: FixedState = FixedState::with_seed(0x666f_6c64_5f6b_6579);

/// What a group (with the producer id it is written with) contributes to its sums' keys,
/// hashed once: a bound group handle ([`crate::Meter`]) keeps it, so an event of its group
/// hashes only its second.
#[derive(Clone, Copy)]
pub(crate) struct GroupHash {
    group: u64,
    producer: u64,
}

impl GroupHash {
    pub fn new(group: GroupRef<'_>, producer_id: Option<&str>) -> Self {
        let mut p = KEY_HASHER.build_hasher();
        match producer_id {
            Some(id) => {
                p.write_u8(1);
                p.write(id.as_bytes());
            }
            None => p.write_u8(0),
        }
        GroupHash {
            group: group.hash_with(&KEY_HASHER),
            producer: p.finish(),
        }
    }
}

/// What a sum is found by, borrowed from the event being recorded (or the bound handle).
#[derive(Clone, Copy)]
pub(crate) struct FoldKey<'a> {
    group: GroupRef<'a>,
    /// The group's partition key as its caller holds it (a meter's, or the per-thread key
    /// cache's): a sum opened with the same one is of this group, without comparing strings.
    origin: Option<&'a Arc<str>>,
    /// The producer id written: the event's, else the producer's default.
    pub(super) producer_id: Option<&'a str>,
    pub(super) allocated: bool,
    pub(super) second: i64,
    group_hash: u64,
    pub(super) hash: u64,
}

impl<'a> FoldKey<'a> {
    pub fn new(event: &'a Event, producer_id: Option<&'a str>) -> Self {
        let group = event.group();
        let pre = GroupHash::new(group, producer_id);
        let allocated = event.usage_allocations.is_some();
        Self::with(
            pre,
            group,
            producer_id,
            event.timestamp.timestamp(),
            allocated,
        )
    }

    /// This key, with the group's partition key as its caller holds it.
    pub fn from(mut self, origin: Option<&'a Arc<str>>) -> Self {
        self.origin = origin;
        self
    }

    /// The key of `group`'s sum of UTC second `second`, `pre` hashed from `group` and
    /// `producer_id`.
    pub fn with(
        pre: GroupHash,
        group: GroupRef<'a>,
        producer_id: Option<&'a str>,
        second: i64,
        allocated: bool,
    ) -> Self {
        let mut h = KEY_HASHER.build_hasher();
        h.write_u64(pre.group);
        h.write_u64(pre.producer);
        h.write_i64(second);
        h.write_u8(u8::from(allocated));
        FoldKey {
            group,
            origin: None,
            producer_id,
            allocated,
            second,
            group_hash: pre.group,
            hash: h.finish(),
        }
    }

    pub(super) fn shard(&self) -> usize {
        (self.group_hash >> (64 - FOLD_SHARDS.trailing_zeros())) as usize
    }

    pub(super) fn matches(&self, b: &Bucket) -> bool {
        // The bucket holds its origin, so one still pointing there is the same key's.
        let same_origin = match (self.origin, &b.keyed) {
            (Some(k), Some((o, _))) => Arc::ptr_eq(k, o),
            _ => false,
        };
        if b.hash != self.hash || b.second != self.second {
            return false;
        }
        let (group, producer_id) = b.fields();
        (same_origin
            || (group.license_arn == self.group.license_arn
                && group.customer_aws_account_id == self.group.customer_aws_account_id
                && group.dimension == self.group.dimension))
            && producer_id == self.producer_id
            && b.sum.template().usage_allocations.is_some() == self.allocated
    }
}
