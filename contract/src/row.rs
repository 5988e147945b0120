//! The AWS-free raw row model.
//!
//! Rows arrive from DynamoDB loosely typed, and the guardrails must tell a non-numeric quantity
//! from a fractional one, so the adapter converts each SDK `AttributeValue` into an
//! [`AttrValue`] (`B`, sets and other types become [`AttrValue::Other`]) and the fold inspects
//! types itself. Numbers stay strings until [`parse_non_negative_integer`] reads them exactly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::attrs;
use crate::keys::{GroupKey, SECONDS_PER_HOUR};

/// One DynamoDB attribute value, mirroring the SDK's `AttributeValue` for the types the
/// usage-row contract uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrValue {
    /// String.
    S(String),
    /// Number, as DynamoDB's decimal string.
    N(String),
    /// Boolean.
    Bool(bool),
    /// The NULL type.
    Null,
    /// List.
    L(Vec<AttrValue>),
    /// Map.
    M(BTreeMap<String, AttrValue>),
    /// Any other type (binary, sets): never valid where the contract expects a value.
    Other,
}

impl AttrValue {
    /// A string value.
    pub fn s(v: impl Into<String>) -> Self {
        Self::S(v.into())
    }

    /// A number value from an integer.
    pub fn n(v: u64) -> Self {
        Self::N(v.to_string())
    }

    /// The string, if this is `S`.
    pub fn as_s(&self) -> Option<&str> {
        match self {
            Self::S(s) => Some(s),
            _ => None,
        }
    }

    /// The number string, if this is `N`.
    pub fn as_n(&self) -> Option<&str> {
        match self {
            Self::N(n) => Some(n),
            _ => None,
        }
    }

    /// The list, if this is `L`.
    pub fn as_l(&self) -> Option<&[AttrValue]> {
        match self {
            Self::L(l) => Some(l),
            _ => None,
        }
    }

    /// The map, if this is `M`.
    pub fn as_m(&self) -> Option<&BTreeMap<String, AttrValue>> {
        match self {
            Self::M(m) => Some(m),
            _ => None,
        }
    }
}

/// A raw usage row as read from the usage table: attribute name → value.
pub type RawUsageRow = BTreeMap<String, AttrValue>;

/// Why a DynamoDB number is not a usable quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberError {
    /// Not a decimal number at all.
    NonNumeric,
    /// A number with a non-zero fractional part.
    NonInteger,
    /// A negative integer.
    Negative,
    /// An integer too large for `u64`.
    Overflow,
}

/// Upper bound on exponent digits we read; anything larger is an overflow (or zero).
const MAX_EXPONENT_DIGITS: usize = 6;

/// Parse a DynamoDB number string as an exact non-negative integer.
///
/// Accepts any decimal spelling whose value is a whole number (`42`, `42.0`, `4.2E1`, `-0`);
/// never rounds or truncates. Fractions are [`NumberError::NonInteger`] even when negative
/// (the guardrail order checks integrality before sign).
///
/// ```
/// use awsmp_contract::row::{parse_non_negative_integer, NumberError};
/// assert_eq!(parse_non_negative_integer("4.2E1"), Ok(42));
/// assert_eq!(parse_non_negative_integer("1.5"), Err(NumberError::NonInteger));
/// assert_eq!(parse_non_negative_integer("-1.5"), Err(NumberError::NonInteger));
/// assert_eq!(parse_non_negative_integer("-3"), Err(NumberError::Negative));
/// assert_eq!(parse_non_negative_integer("abc"), Err(NumberError::NonNumeric));
/// ```
// Inline: the aggregator's fold (another crate) reads every row's quantity through the fast
// path; the workspace builds without LTO, so only an inline function is inlined across crates.
#[inline]
pub fn parse_non_negative_integer(s: &str) -> Result<u64, NumberError> {
    let b = s.as_bytes();
    // Fast path: DynamoDB returns integers normalized as plain digits; 19 digits always fit.
    if !b.is_empty() && b.len() <= 19 && b.iter().all(u8::is_ascii_digit) {
        return Ok(b
            .iter()
            .fold(0u64, |acc, &c| acc * 10 + u64::from(c - b'0')));
    }
    parse_decimal(b)
}

/// [`parse_non_negative_integer`] past its fast path: any other spelling, out of line.
fn parse_decimal(b: &[u8]) -> Result<u64, NumberError> {
    Decimal::parse(b)?.to_non_negative_integer()
}

/// A decimal number's parts, borrowed from its spelling: `±int.frac E±exp`.
struct Decimal<'a> {
    negative: bool,
    int_digits: &'a [u8],
    frac_digits: &'a [u8],
    exponent: i64,
    /// More than [`MAX_EXPONENT_DIGITS`] significant exponent digits: `exponent` is only a
    /// far-out stand-in of the right sign.
    exponent_huge: bool,
}

/// The digits of `b` from `*i` on; `*i` moves past them.
fn take_digits<'a>(b: &'a [u8], i: &mut usize) -> &'a [u8] {
    let start = *i;
    while *i < b.len() && b[*i].is_ascii_digit() {
        *i += 1;
    }
    &b[start..*i]
}

/// An optional sign at `*i`: true for `-`; `*i` moves past it.
fn take_sign(b: &[u8], i: &mut usize) -> bool {
    match b.get(*i) {
        Some(b'-') => {
            *i += 1;
            true
        }
        Some(b'+') => {
            *i += 1;
            false
        }
        _ => false,
    }
}

impl<'a> Decimal<'a> {
    fn parse(b: &'a [u8]) -> Result<Self, NumberError> {
        let mut i = 0;
        let negative = take_sign(b, &mut i);
        let int_digits = take_digits(b, &mut i);
        let mut frac_digits: &[u8] = &[];
        if i < b.len() && b[i] == b'.' {
            i += 1;
            frac_digits = take_digits(b, &mut i);
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(NumberError::NonNumeric);
        }
        let (exponent, exponent_huge) = if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
            i += 1;
            parse_exponent(b, &mut i)?
        } else {
            (0, false)
        };
        if i != b.len() {
            return Err(NumberError::NonNumeric);
        }
        Ok(Self {
            negative,
            int_digits,
            frac_digits,
            exponent,
            exponent_huge,
        })
    }

    /// value = mantissa × 10^(exponent − frac_len), mantissa = int_digits ++ frac_digits.
    fn to_non_negative_integer(&self) -> Result<u64, NumberError> {
        let mantissa: Vec<u8> = self
            .int_digits
            .iter()
            .chain(self.frac_digits)
            .copied()
            .collect();
        let Some(first_nonzero) = mantissa.iter().position(|&c| c != b'0') else {
            return Ok(0); // every spelling of zero, signed or not, with any exponent
        };
        let mantissa = &mantissa[first_nonzero..];
        let trailing_zeros = mantissa.iter().rev().take_while(|&&c| c == b'0').count();
        let mantissa = &mantissa[..mantissa.len() - trailing_zeros];
        let scale = if self.exponent_huge {
            self.exponent
        } else {
            self.exponent - self.frac_digits.len() as i64 + trailing_zeros as i64
        };
        if scale < 0 {
            return Err(NumberError::NonInteger);
        }
        if self.negative {
            return Err(NumberError::Negative);
        }
        // u64::MAX has 20 digits; anything longer overflows for sure.
        if mantissa.len() as i64 + scale > 20 {
            return Err(NumberError::Overflow);
        }
        let mut v: u64 = 0;
        for &c in mantissa {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(c - b'0')))
                .ok_or(NumberError::Overflow)?;
        }
        for _ in 0..scale {
            v = v.checked_mul(10).ok_or(NumberError::Overflow)?;
        }
        Ok(v)
    }
}

/// The exponent after `e`/`E` at `*i`: `(value, huge)`; `*i` moves past it.
fn parse_exponent(b: &[u8], i: &mut usize) -> Result<(i64, bool), NumberError> {
    let exp_negative = take_sign(b, i);
    let exp_digits = take_digits(b, i);
    if exp_digits.is_empty() {
        return Err(NumberError::NonNumeric);
    }
    let significant = exp_digits.iter().skip_while(|&&c| c == b'0').count();
    if significant > MAX_EXPONENT_DIGITS {
        let far = if exp_negative {
            i64::MIN / 2
        } else {
            i64::MAX / 2
        };
        return Ok((far, true));
    }
    let v = exp_digits
        .iter()
        .fold(0i64, |acc, &c| acc * 10 + i64::from(c - b'0'));
    Ok((if exp_negative { -v } else { v }, false))
}

/// One VMT tag: the event's own tag type (`Key` / `Value`), so the producer, the consumer and
/// the pipeline share one definition.
pub use crate::event::Tag;

/// One usage allocation in the `BatchMeterUsage` `UsageAllocation` shape.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Allocation {
    /// `AllocatedUsageQuantity`.
    #[serde(rename = "AllocatedUsageQuantity")]
    pub quantity: u64,
    /// `Tags` (empty = an untagged allocation).
    #[serde(rename = "Tags", default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}

impl Allocation {
    /// The allocation as a DynamoDB value, in the exact contract shape
    /// (`M{AllocatedUsageQuantity: N, Tags: L of M{Key: S, Value: S}}`; `Tags` omitted when empty).
    pub fn to_attr(&self) -> AttrValue {
        let mut m = BTreeMap::new();
        m.insert(
            attrs::ALLOCATED_USAGE_QUANTITY.to_owned(),
            AttrValue::n(self.quantity),
        );
        if !self.tags.is_empty() {
            let tags = self
                .tags
                .iter()
                .map(|t| {
                    AttrValue::M(BTreeMap::from([
                        (attrs::TAG_KEY.to_owned(), AttrValue::s(&t.key)),
                        (attrs::TAG_VALUE.to_owned(), AttrValue::s(&t.value)),
                    ]))
                })
                .collect();
            m.insert(attrs::TAGS.to_owned(), AttrValue::L(tags));
        }
        AttrValue::M(m)
    }
}

/// A raw row that conforms to the writer contract, for second `second` (0–3599) of the
/// group's hour: the sort key, top-level account / dimension / timestamp, quantity,
/// `meteringPending` and optional allocations. Useful to writers and tests; the consumer's
/// `UpdateItem` must produce exactly these attributes.
///
/// # Panics
/// When `second` is not below 3600 (a caller bug, never data).
pub fn conforming_row(
    group: &GroupKey,
    second: u32,
    quantity: u64,
    allocations: Option<&[Allocation]>,
) -> RawUsageRow {
    assert!(
        second < SECONDS_PER_HOUR,
        "second {second} outside the hour"
    );
    let ts = crate::keys::format_usage_timestamp(group.hour.at_second(second));
    let mut row = RawUsageRow::new();
    row.insert(
        attrs::LICENSE_ARN.to_owned(),
        AttrValue::s(&group.license_arn),
    );
    row.insert(
        attrs::USAGE_SORT_KEY.to_owned(),
        AttrValue::s(group.usage_sort_key_at(second)),
    );
    row.insert(
        attrs::CUSTOMER_AWS_ACCOUNT_ID.to_owned(),
        AttrValue::s(&group.customer_aws_account_id),
    );
    row.insert(attrs::DIMENSION.to_owned(), AttrValue::s(&group.dimension));
    row.insert(attrs::TIMESTAMP.to_owned(), AttrValue::S(ts));
    row.insert(attrs::QUANTITY.to_owned(), AttrValue::n(quantity));
    row.insert(
        attrs::METERING_PENDING.to_owned(),
        AttrValue::s(group.hour.to_string()),
    );
    if let Some(allocs) = allocations {
        row.insert(
            attrs::USAGE_ALLOCATIONS.to_owned(),
            AttrValue::L(allocs.iter().map(Allocation::to_attr).collect()),
        );
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_every_spelling() {
        for (s, v) in [
            ("0", 0),
            ("-0", 0),
            ("0.000", 0),
            ("-0.0E5", 0),
            ("0E99999999999", 0),
            ("42", 42),
            ("+42", 42),
            ("42.0", 42),
            ("4.2E1", 42),
            ("4.2e+1", 42),
            ("420E-1", 42),
            ("00042", 42),
            (".42E2", 42),
            ("42.", 42),
            ("18446744073709551615", u64::MAX),
            ("1E19", 10_000_000_000_000_000_000),
        ] {
            assert_eq!(parse_non_negative_integer(s), Ok(v), "{s}");
        }
    }

    #[test]
    fn every_failure_is_named() {
        use NumberError::*;
        for (s, e) in [
            ("", NonNumeric),
            ("-", NonNumeric),
            (".", NonNumeric),
            ("abc", NonNumeric),
            ("1e", NonNumeric),
            ("1 ", NonNumeric),
            (" 1", NonNumeric),
            ("1,5", NonNumeric),
            ("NaN", NonNumeric),
            ("Infinity", NonNumeric),
            ("0x10", NonNumeric),
            ("1.5", NonInteger),
            ("42E-1", NonInteger),
            ("1E-99999999999", NonInteger),
            ("-1.5", NonInteger),
            ("-1", Negative),
            ("-1E3", Negative),
            ("18446744073709551616", Overflow),
            ("1E20", Overflow),
            ("1E99999999999", Overflow),
        ] {
            assert_eq!(parse_non_negative_integer(s), Err(e), "{s}");
        }
    }

    #[test]
    fn conforming_row_has_the_contract_attributes() {
        let g = GroupKey::new(
            "lic",
            "123456789012",
            "api",
            "2026-11-30T12".parse().unwrap(),
        );
        let r = conforming_row(
            &g,
            61,
            7,
            Some(&[Allocation {
                quantity: 7,
                tags: vec![Tag::new("k", "v")],
            }]),
        );
        assert_eq!(
            r[attrs::USAGE_SORT_KEY].as_s(),
            Some("123456789012#api#2026-11-30T12:01:01")
        );
        assert_eq!(r[attrs::TIMESTAMP].as_s(), Some("2026-11-30T12:01:01"));
        assert_eq!(r[attrs::METERING_PENDING].as_s(), Some("2026-11-30T12"));
        assert_eq!(r[attrs::QUANTITY].as_n(), Some("7"));
        let alloc = &r[attrs::USAGE_ALLOCATIONS].as_l().unwrap()[0];
        let m = alloc.as_m().unwrap();
        assert_eq!(m[attrs::ALLOCATED_USAGE_QUANTITY].as_n(), Some("7"));
        assert_eq!(m[attrs::TAGS].as_l().unwrap().len(), 1);
    }
}
