//! The per-thread cache of checked groups behind `record()`'s fast paths: for each group a
//! thread has checked, its partition key, the key's hash, its v2 single head and (collapse)
//! the thread's slot on the group's open sum. Not pure: it holds thread-local state; the
//! pure functions it caches are in [`crate::partition`]. How the fast paths use it:
//! docs/producer-internals.md.

use crate::partition::{head_entry_start, partition_hash, partition_key};
use awsmp_contract::error::ValidationError;
use awsmp_contract::event::GroupRef;

/// Groups remembered per thread by [`keyed_group`]; past this the memory is dropped and
/// refilled (a bound on memory, not on correctness).
const KEY_CACHE_GROUPS: usize = 16 * 1024;

/// One group's partition key and hash, computed once.
struct CachedKey {
    fields_hash: u64,
    /// The group's fields end to end (license ARN, account id, dimension): one allocation,
    /// so a lookup compares them reading one place.
    fields: Box<str>,
    /// Where the account id and the dimension start in `fields`.
    account_at: usize,
    dimension_at: usize,
    partition_key: std::sync::Arc<str>,
    hash: u128,
    /// The group's v2 single head for the last producer id and epoch asked for.
    head: Option<CachedHead>,
    /// Collapse: this thread's hold on the group's open sum in the last producer asked for.
    slot: Option<CachedSlot>,
}

/// A thread's hold on a group's open (group, second) sum in one producer instance: what a
/// [`crate::Meter`] keeps for its group, kept here for `Producer::record(Event)`.
pub(crate) struct CachedSlot {
    /// The producer instance (unique in the process, never reused) the slot is of.
    pub instance: u64,
    /// The instance's default producer id hashed with the group.
    pub fold: crate::fold::GroupHash,
    pub slot: std::sync::Arc<crate::fold::FoldSlot>,
}

/// A group's v2 single head ([`awsmp_contract::wire::v2::single_head`]) for one producer id and epoch.
struct CachedHead {
    epoch: u128,
    producer_id: Option<Box<str>>,
    head: SingleHead,
}

/// A group's v2 single head and where its aggregate table entry starts in it
/// ([`awsmp_contract::wire::v2::split_single_ranges`] of the head under the group's partition key):
/// every single written from the head splits there, and its event fields start at the
/// head's end, so packing need not read the single again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SingleHead {
    /// The head's bytes ([`awsmp_contract::wire::v2::single_head`]).
    pub bytes: std::sync::Arc<[u8]>,
    /// Where its table entry starts (`None` if it does not split, which a head never does).
    pub entry_start: Option<usize>,
}

/// What the per-thread cache knows of a valid group: its partition key, the key's hash and,
/// when asked for, its v2 single head.
pub(crate) struct CheckedGroup {
    pub partition_key: std::sync::Arc<str>,
    pub hash: u128,
    pub head: Option<SingleHead>,
}

thread_local! {
    static KEY_CACHE: std::cell::RefCell<hashbrown::HashTable<CachedKey>> =
        const { std::cell::RefCell::new(hashbrown::HashTable::new()) };
}

/// Fixed seed: the cache's own lookups only.
const KEY_CACHE_HASHER: foldhash::fast::FixedState =
    foldhash::fast::FixedState::with_seed(0x706b_5f63_6163_6865);

/// [`partition_key`] and its [`partition_hash`] of a valid group, remembered per thread for
/// the groups it sees often, so a hot group costs one lookup instead of an MD5 per event.
/// Called only for groups that passed [`awsmp_contract::event::validate_group`], so the cache holds
/// only valid groups: [`checked_group`] relies on it.
pub(crate) fn keyed_group(
    license_arn: &str,
    customer_aws_account_id: &str,
    dimension: &str,
) -> (std::sync::Arc<str>, u128) {
    let group = GroupRef {
        license_arn,
        customer_aws_account_id,
        dimension,
    };
    let c = cached_group(group, || Ok(()), None).expect("no check to fail");
    (c.partition_key, c.hash)
}

/// [`keyed_group`] of a group checked by [`awsmp_contract::event::validate_group`]: a group found in
/// this thread's cache passed the check before (every entry did), so a hot group is checked
/// once per thread, not once per event. With `head_for` (a producer id and an epoch), also
/// the group's v2 single head for them, encoded once per thread while they stay the same.
pub(crate) fn checked_group(
    group: GroupRef<'_>,
    head_for: Option<(Option<&str>, u128)>,
) -> Result<CheckedGroup, ValidationError> {
    cached_group(
        group,
        || awsmp_contract::event::validate_group(group),
        head_for,
    )
}

/// The cache's lookup; `check` runs before a group is added.
fn cached_group(
    group: GroupRef<'_>,
    check: impl FnOnce() -> Result<(), ValidationError>,
    head_for: Option<(Option<&str>, u128)>,
) -> Result<CheckedGroup, ValidationError> {
    let GroupRef {
        license_arn,
        customer_aws_account_id,
        dimension,
    } = group;
    let fields_hash = fields_hash(group);
    KEY_CACHE.with_borrow_mut(|cache| {
        let found = cache.find_mut(fields_hash, |c| c.is(fields_hash, group));
        let c = match found {
            Some(c) => c,
            None => {
                check()?;
                let partition_key: std::sync::Arc<str> =
                    partition_key(license_arn, customer_aws_account_id, dimension).into();
                let hash = partition_hash(&partition_key);
                if cache.len() >= KEY_CACHE_GROUPS {
                    cache.clear();
                }
                let entry = CachedKey {
                    fields_hash,
                    fields: [license_arn, customer_aws_account_id, dimension]
                        .concat()
                        .into_boxed_str(),
                    account_at: license_arn.len(),
                    dimension_at: license_arn.len() + customer_aws_account_id.len(),
                    partition_key,
                    hash,
                    head: None,
                    slot: None,
                };
                cache
                    .insert_unique(fields_hash, entry, |c| c.fields_hash)
                    .into_mut()
            }
        };
        let head = head_for.map(|(producer_id, epoch)| head_of(c, group, producer_id, epoch));
        Ok(CheckedGroup {
            partition_key: c.partition_key.clone(),
            hash: c.hash,
            head,
        })
    })
}

/// The fast path of a group this thread has checked *and* whose v2 single head for
/// `producer_id` and `epoch` it keeps: `f` runs with the group's partition key, hash and
/// head, borrowed from the cache (no reference count taken, nothing checked or encoded
/// again). `None` when either is not kept yet: the caller then takes [`checked_group`]'s
/// path, which checks the group and keeps both. `f` must not use this thread's cache.
///
/// A fast path (docs/producer-internals.md, "The fast-path rule"). Equivalence tests: `key_cache::tests::cached_keys_are_the_keys`,
/// `key_cache::tests::only_checked_groups_are_cached` and, through the producer,
/// `producer::plain_tests::a_plain_event_is_staged_as_the_checked_path_stages_it`.
pub(crate) fn with_cached_head<R>(
    group: GroupRef<'_>,
    producer_id: Option<&str>,
    epoch: u128,
    f: impl FnOnce(&std::sync::Arc<str>, u128, &SingleHead) -> R,
) -> Option<R> {
    let fields_hash = fields_hash(group);
    KEY_CACHE.with_borrow(|cache| {
        let c = cache.find(fields_hash, |c| c.is(fields_hash, group))?;
        let h = c.head.as_ref()?;
        (h.epoch == epoch && h.producer_id.as_deref() == producer_id)
            .then(|| f(&c.partition_key, c.hash, &h.head))
    })
}

/// The v2 single head of a group this thread has checked, for `producer_id` and `epoch`:
/// the one kept, else encoded now and kept. `None` when the group is not kept.
pub(crate) fn cached_head(
    group: GroupRef<'_>,
    producer_id: Option<&str>,
    epoch: u128,
) -> Option<SingleHead> {
    let fields_hash = fields_hash(group);
    KEY_CACHE.with_borrow_mut(|cache| {
        let c = cache.find_mut(fields_hash, |c| c.is(fields_hash, group))?;
        Some(head_of(c, group, producer_id, epoch))
    })
}

/// The collapse fast path of a group this thread has checked: `f` runs with the group's
/// partition key, its hash and this thread's slot in producer `instance` (made now if the thread
/// kept none for it; `producer_id`, the instance's default, is hashed into it once). `None`
/// when the group is not kept yet: the caller takes [`checked_group`]'s path, which checks
/// and keeps it. `f` must not use this thread's cache.
///
/// A fast path (docs/producer-internals.md, "The fast-path rule"). Equivalence test, through the producer:
/// `producer::plain_tests::a_plain_event_is_staged_as_the_checked_path_stages_it` (with
/// collapse).
pub(crate) fn with_cached_slot<R>(
    group: GroupRef<'_>,
    instance: u64,
    producer_id: Option<&str>,
    f: impl FnOnce(&std::sync::Arc<str>, u128, &CachedSlot) -> R,
) -> Option<R> {
    let fields_hash = fields_hash(group);
    KEY_CACHE.with_borrow_mut(|cache| {
        let c = cache.find_mut(fields_hash, |c| c.is(fields_hash, group))?;
        let slot = match &mut c.slot {
            Some(s) if s.instance == instance => s,
            other => other.insert(CachedSlot {
                instance,
                fold: crate::fold::GroupHash::new(group, producer_id),
                slot: std::sync::Arc::default(),
            }),
        };
        Some(f(&c.partition_key, c.hash, slot))
    })
}

/// The cache's hash of a group's fields.
fn fields_hash(group: GroupRef<'_>) -> u64 {
    group.hash_with(&KEY_CACHE_HASHER)
}

impl CachedKey {
    /// Whether this entry is `group`'s (whose fields hash to `fields_hash`).
    fn is(&self, fields_hash: u64, group: GroupRef<'_>) -> bool {
        let f = self.fields.as_bytes();
        self.fields_hash == fields_hash
            && self.account_at == group.license_arn.len()
            && self.dimension_at == self.account_at + group.customer_aws_account_id.len()
            && f.len() == self.dimension_at + group.dimension.len()
            && &f[..self.account_at] == group.license_arn.as_bytes()
            && &f[self.account_at..self.dimension_at] == group.customer_aws_account_id.as_bytes()
            && &f[self.dimension_at..] == group.dimension.as_bytes()
    }
}

/// `c`'s head for `producer_id` and `epoch`, encoded now unless it is the one kept.
fn head_of(
    c: &mut CachedKey,
    group: GroupRef<'_>,
    producer_id: Option<&str>,
    epoch: u128,
) -> SingleHead {
    match &c.head {
        Some(h) if h.epoch == epoch && h.producer_id.as_deref() == producer_id => h.head.clone(),
        _ => {
            let bytes: std::sync::Arc<[u8]> =
                awsmp_contract::wire::v2::single_head(group, producer_id, epoch).into();
            let entry_start = head_entry_start(&bytes, &c.partition_key);
            let head = SingleHead { bytes, entry_start };
            c.head = Some(CachedHead {
                epoch,
                producer_id: producer_id.map(Into::into),
                head: head.clone(),
            });
            head
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_keys_are_the_keys() {
        let long_dim = "d".repeat(300);
        for _ in 0..2 {
            for (l, acct, d) in [
                ("arn", "123456789012", long_dim.as_str()),
                ("arn", "1", "reqs"),
                ("arn|1", "", "reqs"),
                ("arn", "1|", "reqs"),
            ] {
                let pk = partition_key(l, acct, d);
                assert_eq!(
                    keyed_group(l, acct, d),
                    (pk.as_str().into(), partition_hash(&pk))
                );
            }
        }
    }

    #[test]
    fn only_checked_groups_are_cached() {
        let arn =
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
        let g = |l, a, d| GroupRef {
            license_arn: l,
            customer_aws_account_id: a,
            dimension: d,
        };
        for _ in 0..2 {
            for (bad, reason) in [
                (g("prod-x", "123456789012", "reqs"), "InvalidLicenseArn"),
                (g(arn, "1234", "reqs"), "InvalidAccountId"),
                (g(arn, "123456789012", ""), "EmptyDimension"),
            ] {
                let refused = checked_group(bad, Some((None, 1)))
                    .err()
                    .map(|e| e.reason());
                assert_eq!(refused, Some(reason));
            }
            let pk = partition_key(arn, "123456789012", "reqs");
            let c = checked_group(g(arn, "123456789012", "reqs"), None).unwrap();
            assert_eq!(
                (c.partition_key, c.hash, c.head),
                (pk.as_str().into(), partition_hash(&pk), None)
            );
        }
    }

    #[test]
    fn a_groups_head_is_its_producer_ids_and_epochs() {
        let arn =
            "arn:aws:license-manager::123456789012:license:l-fedcba9876543210fedcba9876543210";
        let group = GroupRef {
            license_arn: arn,
            customer_aws_account_id: "123456789012",
            dimension: "gb",
        };
        let head = |producer_id, epoch| {
            checked_group(group, Some((producer_id, epoch)))
                .unwrap()
                .head
                .unwrap()
                .bytes
        };
        let first = head(Some("svc-a"), 7);
        assert_eq!(
            &first[..],
            &awsmp_contract::wire::v2::single_head(group, Some("svc-a"), 7)[..]
        );
        // Asked again for the same producer id and epoch: the head kept, not a new one.
        assert!(std::sync::Arc::ptr_eq(&first, &head(Some("svc-a"), 7)));
        // Another producer id or epoch is encoded for itself.
        for (producer_id, epoch) in [(Some("svc-b"), 7), (None, 7), (Some("svc-a"), 8)] {
            let other = head(producer_id, epoch);
            assert_eq!(
                &other[..],
                &awsmp_contract::wire::v2::single_head(group, producer_id, epoch)[..]
            );
            assert_ne!(&other[..], &first[..]);
        }
        // Its entry, without the group its partition key names, starts after the group.
        let at = checked_group(group, Some((None, 7))).unwrap().head.unwrap();
        let entry = awsmp_contract::wire::v2::split_single_ranges(
            &at.bytes,
            &partition_key(arn, "123456789012", "gb"),
        )
        .map(|(entry, _)| entry.start);
        assert_eq!(at.entry_start, entry);
        assert!(at.entry_start.is_some_and(|e| e > arn.len()));
    }
}
