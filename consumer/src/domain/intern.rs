//! Group names interned per batch: one owned [`GroupName`] per distinct (license, account,
//! dimension) of a batch, shared by every event of that group (consumer/README.md, "The hot
//! path"). Events carry a [`Group`] (a reference-counted pointer), so the decode borrows
//! from the record's bytes and the fold hashes a precomputed `u64` instead of three strings.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use awsmp_producer::event::{validate_account_id, validate_license_arn};
use awsmp_producer::wire::v2::GroupV2;
use foldhash::fast::FixedState;
use hashbrown::HashTable;

/// A group's name: license ARN, buyer account id, dimension, and their hash. The three are
/// kept in one string, `licenseArn|account|dimension` (a partition key's spelling), with the
/// lengths of the first two: a new group of a batch costs one allocation for its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupName {
    /// `licenseArn|account|dimension`.
    text: Box<str>,
    /// Length of the license ARN.
    license_len: u32,
    /// Length of the account id.
    account_len: u32,
    /// [`group_hash`] of the three: equal names have equal hashes, whichever interner made them.
    hash: u64,
    /// The three pass the event's checks (license ARN, 12-digit account id, non-empty
    /// dimension): checked once per group, not once per event.
    valid: bool,
}

/// An interned group name.
pub type Group = Arc<GroupName>;

impl GroupName {
    /// The name of (`license_arn`, `customer_aws_account_id`, `dimension`).
    pub fn new(license_arn: &str, customer_aws_account_id: &str, dimension: &str) -> Self {
        Self::with_hash(
            group_hash(license_arn, customer_aws_account_id, dimension),
            license_arn,
            customer_aws_account_id,
            dimension,
        )
    }

    fn with_hash(
        hash: u64,
        license_arn: &str,
        customer_aws_account_id: &str,
        dimension: &str,
    ) -> Self {
        let mut text = String::with_capacity(
            license_arn.len() + customer_aws_account_id.len() + dimension.len() + 2,
        );
        text.push_str(license_arn);
        text.push('|');
        text.push_str(customer_aws_account_id);
        text.push('|');
        text.push_str(dimension);
        let len = |s: &str| u32::try_from(s.len()).expect("a group name field under 4 GiB");
        Self {
            hash,
            valid: validate_license_arn(license_arn).is_ok()
                && validate_account_id(customer_aws_account_id).is_ok()
                && !dimension.is_empty(),
            license_len: len(license_arn),
            account_len: len(customer_aws_account_id),
            text: text.into_boxed_str(),
        }
    }

    /// License ARN (the row's partition key).
    pub fn license_arn(&self) -> &str {
        &self.text[..self.license_len as usize]
    }

    /// Buyer account id.
    pub fn customer_aws_account_id(&self) -> &str {
        let from = self.license_len as usize + 1;
        &self.text[from..from + self.account_len as usize]
    }

    /// Dimension.
    pub fn dimension(&self) -> &str {
        &self.text[self.license_len as usize + self.account_len as usize + 2..]
    }

    /// The name passes the event's checks of its group (`Event::validate`: license ARN,
    /// account id, non-empty dimension).
    pub fn is_valid(&self) -> bool {
        self.valid
    }

    /// The precomputed hash of the name.
    pub fn hash64(&self) -> u64 {
        self.hash
    }

    /// The three fields.
    fn fields(&self) -> (&str, &str, &str) {
        (
            self.license_arn(),
            self.customer_aws_account_id(),
            self.dimension(),
        )
    }

    fn is(&self, license_arn: &str, customer_aws_account_id: &str, dimension: &str) -> bool {
        self.license_len as usize == license_arn.len()
            && self.account_len as usize == customer_aws_account_id.len()
            && self.fields() == (license_arn, customer_aws_account_id, dimension)
    }

    /// `pk` is `licenseArn|account|dimension` of this name. For a name a key was split into
    /// (no `|` in the license ARN or the account), that is exactly: the key splits into it.
    fn named_by(&self, pk: &str) -> bool {
        // The text is that spelling, separators at the fields' boundaries.
        *self.text == *pk
    }
}

/// By license ARN, then account id, then dimension.
impl Ord for GroupName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.fields()
            .cmp(&other.fields())
            .then_with(|| self.hash.cmp(&other.hash))
            .then_with(|| self.valid.cmp(&other.valid))
    }
}

impl PartialOrd for GroupName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for GroupName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The hash of a group name: foldhash with a fixed seed, so it is the same in every interner
/// and every process (never persisted, only compared in memory).
pub fn group_hash(license_arn: &str, customer_aws_account_id: &str, dimension: &str) -> u64 {
    let mut h = FixedState::with_seed(0).build_hasher();
    license_arn.hash(&mut h);
    customer_aws_account_id.hash(&mut h);
    dimension.hash(&mut h);
    h.finish()
}

/// One batch's interned group names and producer ids.
#[derive(Debug, Default)]
pub struct Interner {
    groups: HashTable<Group>,
    /// The groups partition keys named (`licenseArn|account|dimension`), by the key's hash:
    /// a key seen before costs one hash and one comparison, no split.
    keyed: HashTable<(u64, Group)>,
    producers: Vec<Arc<str>>,
}

/// Producer ids are few per batch (usually one): a short list beats hashing.
const MAX_LISTED_PRODUCERS: usize = 64;

impl Interner {
    /// An empty interner.
    pub fn new() -> Self {
        Self::default()
    }

    /// The interned name of (`license_arn`, `customer_aws_account_id`, `dimension`): allocated
    /// the first time the batch sees the group, shared afterwards.
    pub fn group(
        &mut self,
        license_arn: &str,
        customer_aws_account_id: &str,
        dimension: &str,
    ) -> Group {
        let hash = group_hash(license_arn, customer_aws_account_id, dimension);
        let entry = self.groups.entry(
            hash,
            |g| g.hash == hash && g.is(license_arn, customer_aws_account_id, dimension),
            |g| g.hash,
        );
        entry
            .or_insert_with(|| {
                Arc::new(GroupName::with_hash(
                    hash,
                    license_arn,
                    customer_aws_account_id,
                    dimension,
                ))
            })
            .get()
            .clone()
    }

    /// The interned group partition key `pk` names (`licenseArn|account|dimension`, as
    /// [`GroupV2::from_partition_key`] reads it); `None` for a key that names none.
    pub fn group_named_by_key(&mut self, pk: &str) -> Option<Group> {
        let hash = FixedState::with_seed(0).hash_one(pk);
        if let Some((_, g)) = self.keyed.find(hash, |(h, g)| *h == hash && g.named_by(pk)) {
            return Some(g.clone());
        }
        let named = GroupV2::from_partition_key(pk)?;
        let group = self.group(
            named.license_arn,
            named.customer_aws_account_id,
            named.dimension,
        );
        self.keyed
            .insert_unique(hash, (hash, group.clone()), |(h, _)| *h);
        Some(group)
    }

    /// The interned producer id `p`.
    pub fn producer(&mut self, p: &str) -> Arc<str> {
        if let Some(known) = self.producers.iter().find(|k| ***k == *p) {
            return known.clone();
        }
        let owned: Arc<str> = Arc::from(p);
        if self.producers.len() < MAX_LISTED_PRODUCERS {
            self.producers.push(owned.clone());
        }
        owned
    }

    /// Distinct groups interned so far.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_per_distinct_group_and_equal_hashes_across_interners() {
        let mut a = Interner::new();
        let g1 = a.group("l", "a", "d");
        let g2 = a.group("l", "a", "d");
        assert!(Arc::ptr_eq(&g1, &g2));
        let g3 = a.group("l", "a", "e");
        assert!(!Arc::ptr_eq(&g1, &g3));
        assert_eq!(a.groups(), 2);
        // Field boundaries count: ("la", "", "d") is not ("l", "a", "d").
        let g4 = a.group("la", "", "d");
        assert_ne!(*g4, *g1);
        assert_eq!(a.groups(), 3);
        let mut b = Interner::new();
        let other = b.group("l", "a", "d");
        assert!(!Arc::ptr_eq(&g1, &other));
        assert_eq!((*g1).clone(), *other);
        assert_eq!(g1.hash64(), other.hash64());
        assert_eq!(*other, GroupName::new("l", "a", "d"));
        assert!(!other.is_valid());
        let arn =
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
        assert!(a.group(arn, "210987654321", "api").is_valid());
        assert!(!a.group(arn, "21098765432", "api").is_valid());
        assert!(!a.group(arn, "210987654321", "").is_valid());
    }

    #[test]
    fn a_partition_key_names_the_group_it_splits_into() {
        let mut i = Interner::new();
        let g = i.group_named_by_key("l|a|d|e").unwrap();
        assert_eq!(*g, GroupName::new("l", "a", "d|e"));
        assert!(Arc::ptr_eq(&g, &i.group_named_by_key("l|a|d|e").unwrap()));
        assert!(Arc::ptr_eq(&g, &i.group("l", "a", "d|e")));
        // Same bytes, other boundaries: other groups, never the cached one.
        assert_eq!(
            *i.group_named_by_key("l|a|d").unwrap(),
            GroupName::new("l", "a", "d")
        );
        assert_eq!(
            *i.group_named_by_key("la||d|e").unwrap(),
            GroupName::new("la", "", "d|e")
        );
        assert!(i.group_named_by_key("no-separator").is_none());
        assert!(i.group_named_by_key("one|separator").is_none());
        // A group interned by its fields with a `|` inside is not what the key names.
        let odd = i.group("l|a", "d", "e");
        let named = i.group_named_by_key("l|a|d|e").unwrap();
        assert!(!Arc::ptr_eq(&odd, &named));
        assert_eq!(named.license_arn(), "l");
    }

    #[test]
    fn one_text_keeps_the_three_fields_their_equality_and_their_order() {
        let names = [
            ("a", "b|c", "d"),
            ("a|b", "c", "d"),
            ("a", "b", "c|d"),
            ("a", "", "b"),
            ("", "a", "b"),
            ("a", "b", ""),
            ("l", "a", "d"),
            ("l", "a", "e"),
        ];
        for x in names {
            let gx = GroupName::new(x.0, x.1, x.2);
            assert_eq!(
                (
                    gx.license_arn(),
                    gx.customer_aws_account_id(),
                    gx.dimension()
                ),
                x
            );
            for y in names {
                let gy = GroupName::new(y.0, y.1, y.2);
                assert_eq!(gx == gy, x == y, "{x:?} {y:?}");
                assert_eq!(gx.cmp(&gy), x.cmp(&y), "{x:?} {y:?}");
            }
        }
    }

    #[test]
    fn producers_are_shared() {
        let mut i = Interner::new();
        let p = i.producer("p1");
        assert!(Arc::ptr_eq(&p, &i.producer("p1")));
        assert_eq!(&*i.producer("p2"), "p2");
    }
}
