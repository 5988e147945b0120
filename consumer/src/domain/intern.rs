//! Group names interned per batch: one owned [`GroupName`] per distinct (license, account,
//! dimension) of a batch, shared by every event of that group, and kept for the next batch of
//! a warm instance by its [`NameCache`] (consumer/README.md, "The hot path"). Events carry a [`Group`] (a reference-counted pointer), so the decode borrows
//! from the record's bytes and the fold hashes a precomputed `u64` instead of three strings.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use awsmp_contract::event::{MAX_LICENSE_ARN_BYTES, validate_account_id, validate_dimension};
use awsmp_contract::wire::v2::GroupV2;
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
    /// [`group_hash`] of the three (the hash of the text): equal names have equal hashes,
    /// whichever interner made them, and a partition key's hash is its group's.
    hash: u64,
    /// The three pass the event's checks (license ARN, 12-digit account id, non-empty
    /// dimension): checked once per group, not once per event.
    valid: bool,
    /// Neither the license ARN nor the account id holds a `|`: the text is a partition key
    /// that names exactly this group (`GroupV2::from_partition_key` splits it into the three).
    keyed: bool,
}

/// An interned group name.
pub type Group = Arc<GroupName>;

/// The hash of a name's text (`licenseArn|account|dimension`), or of a partition key's bytes:
/// foldhash with a fixed seed, so it is the same in every interner and every process (never
/// persisted, only compared in memory).
pub fn text_hash(text: &[u8]) -> u64 {
    let mut h = FixedState::with_seed(0).build_hasher();
    h.write(text);
    h.finish()
}

/// `licenseArn|account|dimension` into `text` (cleared first).
fn spell(text: &mut String, license_arn: &str, customer_aws_account_id: &str, dimension: &str) {
    text.clear();
    text.reserve(license_arn.len() + customer_aws_account_id.len() + dimension.len() + 2);
    text.push_str(license_arn);
    text.push('|');
    text.push_str(customer_aws_account_id);
    text.push('|');
    text.push_str(dimension);
}

/// `validate_license_arn(arn).is_ok()` (`arn:<partition>:license-manager::<12
/// digits>:license:l-<32 lowercase hex>`), read byte by byte at the form's fixed offsets
/// (the producer's check splits and strips through string searches: several times slower,
/// once per group of a batch). `tests::the_license_arn_check_is_the_producers` compares them.
pub fn license_arn_ok(arn: &str) -> bool {
    const MIDDLE: &[u8] = b"license-manager::";
    const TAIL: &[u8] = b":license:l-";
    if arn.len() > MAX_LICENSE_ARN_BYTES {
        return false;
    }
    let Some(rest) = arn.as_bytes().strip_prefix(b"arn:") else {
        return false;
    };
    // The partition runs to the first `:`, so it is the longest run of its characters.
    let partition = rest
        .iter()
        .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || **b == b'-')
        .count();
    let Some((b':', rest)) = rest[partition..].split_first() else {
        return false;
    };
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    let hex = |s: &[u8]| {
        s.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let account = MIDDLE.len();
    let id = account + 12 + TAIL.len();
    partition > 0
        && rest.len() == id + 32
        && rest.starts_with(MIDDLE)
        && digits(&rest[account..account + 12])
        && rest[account + 12..id] == *TAIL
        && hex(&rest[id..])
}

/// A field's length as the name keeps it.
fn field_len(s: &str) -> u32 {
    u32::try_from(s.len()).expect("a group name field under 4 GiB")
}

impl GroupName {
    /// The name of (`license_arn`, `customer_aws_account_id`, `dimension`).
    pub fn new(license_arn: &str, customer_aws_account_id: &str, dimension: &str) -> Self {
        let mut text = String::new();
        spell(&mut text, license_arn, customer_aws_account_id, dimension);
        let hash = text_hash(text.as_bytes());
        Self::of_text(
            hash,
            text.into_boxed_str(),
            license_arn.len(),
            customer_aws_account_id.len(),
        )
    }

    /// The name whose text is `text` (`licenseArn|account|dimension`, the first two fields
    /// `license_len` and `account_len` bytes long), `hash` its [`text_hash`].
    fn of_text(hash: u64, text: Box<str>, license_len: usize, account_len: usize) -> Self {
        let license_arn = &text[..license_len];
        let account = &text[license_len + 1..license_len + 1 + account_len];
        let dimension = &text[license_len + account_len + 2..];
        Self {
            hash,
            valid: license_arn_ok(license_arn)
                && validate_account_id(account).is_ok()
                && validate_dimension(dimension).is_ok(),
            keyed: !license_arn.contains('|') && !account.contains('|'),
            license_len: field_len(license_arn),
            account_len: field_len(account),
            text,
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
    /// account id, a non-empty dimension within `MAX_DIMENSION_BYTES`).
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

    /// `text` (its first two fields `license_len` and `account_len` bytes long) is this name.
    fn is(&self, text: &str, license_len: usize, account_len: usize) -> bool {
        self.license_len as usize == license_len
            && self.account_len as usize == account_len
            && *self.text == *text
    }

    /// Partition key `pk` names this group: `pk` splits into exactly its three fields (for a
    /// name without a `|` in the license ARN or the account, that is: its text is `pk`).
    fn named_by(&self, pk: &[u8]) -> bool {
        self.keyed && self.text.as_bytes() == pk
    }
}

/// By license ARN, then account id, then dimension.
impl Ord for GroupName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.fields()
            .cmp(&other.fields())
            .then_with(|| self.hash.cmp(&other.hash))
            .then_with(|| self.valid.cmp(&other.valid))
            .then_with(|| self.keyed.cmp(&other.keyed))
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

/// The hash of a group name: [`text_hash`] of `licenseArn|account|dimension`.
pub fn group_hash(license_arn: &str, customer_aws_account_id: &str, dimension: &str) -> u64 {
    let mut text = String::new();
    spell(&mut text, license_arn, customer_aws_account_id, dimension);
    text_hash(text.as_bytes())
}

/// One batch's interned group names and producer ids.
#[derive(Debug, Default)]
pub struct Interner {
    /// Every group, by its hash (an index into `names`): a name's and the partition key naming
    /// it are one hash, so a key seen before costs one hash and one comparison of its bytes
    /// (no split, no UTF-8 check: bytes equal to a name's text are that text).
    groups: HashTable<GroupIx>,
    /// The groups in the order they were interned.
    names: Vec<Group>,
    /// Where [`Interner::group`] spells a name before it looks it up.
    text: String,
    producers: Vec<Arc<str>>,
}

/// A group's place in its [`Interner`] ([`Interner::name`]): what the hot path keeps while it
/// reads a record, so only an accepted event holds a reference to the name.
pub type GroupIx = u32;

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
        let ix = self.group_ix(license_arn, customer_aws_account_id, dimension);
        self.name(ix).clone()
    }

    /// [`Interner::group`]'s place.
    pub fn group_ix(
        &mut self,
        license_arn: &str,
        customer_aws_account_id: &str,
        dimension: &str,
    ) -> GroupIx {
        let Self {
            groups,
            names,
            text,
            ..
        } = self;
        spell(text, license_arn, customer_aws_account_id, dimension);
        let (l, a) = (license_arn.len(), customer_aws_account_id.len());
        let hash = text_hash(text.as_bytes());
        let same = |ix: &GroupIx| {
            let g = &names[*ix as usize];
            g.hash == hash && g.is(text, l, a)
        };
        if let Some(ix) = groups.find(hash, same) {
            return *ix;
        }
        let name = GroupName::of_text(hash, text.as_str().into(), l, a);
        Self::insert(groups, names, hash, name)
    }

    /// Adds `name` (not interned yet), of hash `hash`.
    fn insert(
        groups: &mut HashTable<GroupIx>,
        names: &mut Vec<Group>,
        hash: u64,
        name: GroupName,
    ) -> GroupIx {
        let ix = GroupIx::try_from(names.len()).expect("fewer than 2^32 groups interned");
        names.push(Arc::new(name));
        groups.insert_unique(hash, ix, |i| names[*i as usize].hash);
        ix
    }

    /// The group at `ix` (from this interner).
    pub fn name(&self, ix: GroupIx) -> &Group {
        &self.names[ix as usize]
    }

    /// The place of the group partition key `pk` names, if the batch has seen it (by name or
    /// by key); `hash` is `pk`'s [`text_hash`]. `pk` need not be UTF-8: bytes that are a known
    /// name's text are.
    pub fn known_key(&self, pk: &[u8], hash: u64) -> Option<GroupIx> {
        let names = &self.names;
        self.groups
            .find(hash, |ix| {
                let g = &names[*ix as usize];
                g.hash == hash && g.named_by(pk)
            })
            .copied()
    }

    /// The interned group partition key `pk` names (`licenseArn|account|dimension`, as
    /// [`GroupV2::from_partition_key`] reads it); `None` for a key that names none.
    pub fn group_named_by_key(&mut self, pk: &str) -> Option<Group> {
        let ix = self.group_named_by_hashed_key(pk, text_hash(pk.as_bytes()))?;
        Some(self.name(ix).clone())
    }

    /// [`Interner::group_named_by_key`]'s place, `hash` being `pk`'s [`text_hash`].
    pub fn group_named_by_hashed_key(&mut self, pk: &str, hash: u64) -> Option<GroupIx> {
        if let Some(ix) = self.known_key(pk.as_bytes(), hash) {
            return Some(ix);
        }
        let named = GroupV2::from_partition_key(pk)?;
        // Not known by key, so not known at all: a group of these fields is spelled `pk`
        // and has no `|` in its first two fields.
        let (l, a) = (named.license_arn.len(), named.customer_aws_account_id.len());
        let name = GroupName::of_text(hash, pk.into(), l, a);
        Some(Self::insert(&mut self.groups, &mut self.names, hash, name))
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
        self.names.len()
    }
}

/// The most groups a [`NameCache`] keeps from one batch to the next (about 16 MB of names at
/// the longest license ARNs); past it, the next batch starts from an empty interner. Our
/// bound: far above the groups one shard's consumer sees in a day of usual traffic.
pub const MAX_CACHED_GROUPS: usize = 1 << 16;

/// The interned names of the batches one warm instance has decoded, kept for the next: a
/// shard's batches name the same groups again and again, so in the steady state a batch
/// interns no group (no split, no check, no allocation) and every partition key it reads is
/// one hash and one comparison of its bytes. Names are immutable and interned by their text,
/// so a name from an earlier batch is the name this batch would have made. Clones share one
/// cache; batches decoding at once each get an interner (the cache's, or an empty one).
#[derive(Debug, Clone, Default)]
pub struct NameCache(Arc<Mutex<Option<Interner>>>);

impl NameCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The interner for one batch: the cached one, or an empty one while another batch holds
    /// it.
    pub fn take(&self) -> Interner {
        self.lock().take().unwrap_or_default()
    }

    /// Keep `interner` for the next batch; one grown past [`MAX_CACHED_GROUPS`] is dropped.
    pub fn give_back(&self, interner: Interner) {
        if interner.groups() <= MAX_CACHED_GROUPS {
            *self.lock() = Some(interner);
        }
    }

    /// Groups cached now.
    pub fn groups(&self) -> usize {
        self.lock().as_ref().map_or(0, Interner::groups)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Interner>> {
        // A panic while the lock was held left either the interner or nothing: both usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    proptest::proptest! {
        /// The byte-by-byte license ARN check says what the producer's says: on valid ARNs of
        /// any partition, each with one byte changed, cut or added anywhere, and on anything.
        #[test]
        fn the_license_arn_check_is_the_producers(
            partition in "[a-z0-9-]{0,12}",
            account in "[0-9]{10,13}",
            id in "[0-9a-fA-F]{31,33}",
            poke in proptest::option::of((0usize..100, 0u8..128)),
            cut in proptest::option::of(0usize..100),
            any in ".{0,90}",
        ) {
            let arn = format!("arn:{partition}:license-manager::{account}:license:l-{id}");
            let mut bytes = arn.clone().into_bytes();
            if let Some((at, b)) = poke && at < bytes.len() {
                bytes[at] = b;
            }
            if let Some(at) = cut && at < bytes.len() {
                bytes.remove(at);
            }
            let poked = String::from_utf8(bytes).unwrap();
            for s in [&arn, &poked, &any, &format!("{arn}:"), &format!("{arn}{any}")] {
                let producers = awsmp_contract::event::validate_license_arn(s).is_ok();
                proptest::prop_assert_eq!(license_arn_ok(s), producers, "{}", s);
            }
        }
    }

    #[test]
    fn license_arns_of_other_partitions_and_near_misses() {
        let ok = "arn:aws-us-gov:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
        assert!(license_arn_ok(ok));
        for bad in [
            "arn::license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::12345678901:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdeF",
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcde",
            "arn:Aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
        ] {
            assert!(!license_arn_ok(bad), "{bad}");
            assert!(awsmp_contract::event::validate_license_arn(bad).is_err());
        }
    }

    #[test]
    fn a_name_cache_keeps_a_batchs_names_for_the_next_and_drops_an_overgrown_one() {
        let cache = NameCache::new();
        let mut first = cache.take();
        let g = first.group("l", "a", "d");
        // A batch decoding meanwhile gets an interner of its own.
        let mut meanwhile = cache.take();
        assert_eq!(meanwhile.groups(), 0);
        meanwhile.group("x", "y", "z");
        cache.give_back(first);
        assert_eq!(cache.groups(), 1);
        let mut second = cache.take();
        assert!(Arc::ptr_eq(&g, &second.group("l", "a", "d")));
        assert!(Arc::ptr_eq(
            &g,
            &second.group_named_by_key("l|a|d").unwrap()
        ));
        for i in 0..=MAX_CACHED_GROUPS {
            second.group("l", "a", &i.to_string());
        }
        cache.give_back(second);
        assert_eq!(cache.groups(), 0);
        assert!(!Arc::ptr_eq(&g, &cache.take().group("l", "a", "d")));
        // A clone shares the cache.
        let clone = cache.clone();
        clone.give_back(meanwhile);
        assert_eq!(cache.groups(), 1);
    }

    #[test]
    fn producers_are_shared() {
        let mut i = Interner::new();
        let p = i.producer("p1");
        assert!(Arc::ptr_eq(&p, &i.producer("p1")));
        assert_eq!(&*i.producer("p2"), "p2");
    }

    #[test]
    fn a_group_past_the_key_limits_is_invalid_as_the_producer_says() {
        use awsmp_contract::event::{MAX_DIMENSION_BYTES, validate_license_arn};
        let arn = |partition: &str| {
            format!(
                "arn:{partition}:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
            )
        };
        for n in [
            MAX_LICENSE_ARN_BYTES - 1,
            MAX_LICENSE_ARN_BYTES,
            MAX_LICENSE_ARN_BYTES + 1,
        ] {
            let a = arn(&"a".repeat(n - arn("").len()));
            assert_eq!(license_arn_ok(&a), validate_license_arn(&a).is_ok(), "{n}");
            assert_eq!(license_arn_ok(&a), n <= MAX_LICENSE_ARN_BYTES, "{n}");
        }
        let ok = arn("aws");
        for (len, valid) in [
            (MAX_DIMENSION_BYTES, true),
            (MAX_DIMENSION_BYTES + 1, false),
        ] {
            let name = GroupName::new(&ok, "123456789012", &"d".repeat(len));
            assert_eq!(name.is_valid(), valid, "{len}");
        }
    }
}
