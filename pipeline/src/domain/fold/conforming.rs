//! The fold's fast path: a row exactly as the writer contract makes it (docs/row-contract.md)
//! is recognised by comparisons against facts of the group evaluated once, and counted without
//! the general path's findings, segments and facts. Anything else — a missing, NULL, mistyped
//! or differing attribute, allocations, a key other than the group's prefix and `:MM:SS` — is
//! left to the general path, which decides it (its reasons and details unchanged). A row taken
//! here is exactly one the general path would count with no finding: `tests_equivalence.rs`
//! folds arbitrary groups, bad rows included, both ways and compares every result.

use super::RowView;
use super::checks::RowChecks;
use super::membership::MemberPrefix;
use awsmp_contract::ids::is_valid_account_id;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::row::{AttrValue, parse_non_negative_integer};

/// What a conforming row of the group must hold, evaluated once per group; `None` when no row
/// of the group can pass every check without the general path (an invalid partition key, a
/// bucket outside the billable window, an empty dimension, an invalid identity, a `#` in the
/// account), so every row takes the general path.
#[derive(Debug)]
pub(super) struct Conforming {
    license_arn: String,
    /// `account#dimension#YYYY-MM-DDTHH`.
    prefix: String,
    account: String,
    dimension: String,
    /// The identity attribute is `customerIdentifier` (a product-code partition) rather than
    /// `customerAWSAccountId`.
    legacy: bool,
    /// The last second of the hour that is not after `now`.
    now_second: i64,
}

impl Conforming {
    pub(super) fn of(group: &GroupKey, prefix: &MemberPrefix, checks: &RowChecks) -> Option<Self> {
        let legacy = checks.is_legacy()?;
        let identity_valid = if legacy {
            !group.customer_aws_account_id.is_empty()
        } else {
            is_valid_account_id(&group.customer_aws_account_id)
        };
        let usable = prefix.plain_account()
            && checks.bucket_billable()
            && !group.dimension.is_empty()
            && identity_valid;
        usable.then(|| Self {
            license_arn: group.license_arn.clone(),
            prefix: prefix.text().to_owned(),
            account: group.customer_aws_account_id.clone(),
            dimension: group.dimension.clone(),
            legacy,
            now_second: checks.now_second(),
        })
    }

    /// The row's second of the hour and its quantity, when it is a conforming, pending row of
    /// the group with no finding; `None` sends it to the general path.
    pub(super) fn row<'r>(&self, row: &RowView<'r>) -> Option<(&'r str, u32, u64)> {
        row.pending?;
        if let Some(pk) = row.license_arn
            && !string_is(pk, &self.license_arn)
        {
            return None;
        }
        let sort_key = row.sort_key?.as_s()?;
        let second = self.second_of(sort_key)?;
        let identity = if self.legacy {
            row.customer_identifier
        } else {
            row.account
        };
        if !string_is(identity?, &self.account) || !string_is(row.dimension?, &self.dimension) {
            return None;
        }
        if row.allocations.is_some() || i64::from(second) > self.now_second {
            return None;
        }
        let quantity = parse_non_negative_integer(row.quantity?.as_n()?).ok()?;
        (quantity <= MAX_USAGE_QUANTITY).then_some((sort_key, second, quantity))
    }

    /// A compact row of the group (`super::compact`), which holds the group's strings, a
    /// canonical quantity and no allocations by construction: taken when its second is not
    /// after `now` and its quantity within the maximum, as [`Self::row`] decides.
    pub(super) fn takes(&self, second: u32, quantity: u64) -> bool {
        i64::from(second) <= self.now_second && quantity <= MAX_USAGE_QUANTITY
    }

    /// The second of `prefix:MM:SS`, as the general path reads it.
    fn second_of(&self, sort_key: &str) -> Option<u32> {
        second_of(&self.prefix, sort_key)
    }
}

/// `v` is the string `s`.
fn string_is(v: &AttrValue, s: &str) -> bool {
    matches!(v, AttrValue::S(x) if same_bytes(x.as_bytes(), s.as_bytes()))
}

/// `a == b`, compared inline eight bytes at a time: the fold compares a dozen short strings a
/// row, and a library call per comparison cost more than the comparison.
#[inline]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a == b;
    }
    let word = |s: &[u8], i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[i..i + 8]);
        u64::from_ne_bytes(w)
    };
    let mut diff = 0u64;
    let mut i = 0;
    while i + 8 <= n {
        diff |= word(a, i) ^ word(b, i);
        i += 8;
    }
    // The last eight bytes, overlapping the words already compared.
    diff |= word(a, n - 8) ^ word(b, n - 8);
    diff == 0
}

/// The second of `prefix:MM:SS` (a usage row's sort key in the group of `prefix`), as the
/// general path reads it; `None` for any other key.
pub(super) fn second_of(prefix: &str, sort_key: &str) -> Option<u32> {
    let k = sort_key.as_bytes();
    let p = prefix.len();
    if k.len() != p + 6 || !same_bytes(&k[..p], prefix.as_bytes()) {
        return None;
    }
    let [b':', m1, m2, b':', s1, s2] = k[p..] else {
        return None;
    };
    let digit = |c: u8| c.is_ascii_digit().then(|| u32::from(c - b'0'));
    let (minute, second) = (digit(m1)? * 10 + digit(m2)?, digit(s1)? * 10 + digit(s2)?);
    (minute <= 59 && second <= 59).then_some(minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn same_bytes_is_equality(a in prop::collection::vec(0u8..4, 0..40), b in prop::collection::vec(0u8..4, 0..40)) {
            prop_assert_eq!(same_bytes(&a, &b), a == b);
            prop_assert!(same_bytes(&a, &a.clone()));
        }
    }
}
