//! Evaluating a [`Condition`] against an item, by DynamoDB's rules
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.OperatorsAndFunctions.html>).

use std::cmp::Ordering;

use super::{Cmp, Condition, Item, Operand};
use crate::row::AttrValue;

pub(super) fn holds(c: &Condition, item: &Item) -> bool {
    let get = |a: &super::Attr| item.get(&a.name);
    match c {
        Condition::Exists(a) => get(a).is_some(),
        Condition::NotExists(a) => get(a).is_none(),
        Condition::Type(a, t) => match (get(a), &t.value) {
            (Some(v), AttrValue::S(code)) => type_code(v) == Some(code.as_str()),
            _ => false,
        },
        Condition::BeginsWith(a, prefix) => match (get(a), &prefix.value) {
            (Some(AttrValue::S(s)), AttrValue::S(p)) => s.starts_with(p.as_str()),
            _ => false,
        },
        Condition::Compare(operand, cmp, v) => {
            let size;
            let left = match operand {
                Operand::Attr(a) => get(a),
                Operand::Size(a) => {
                    size = get(a).and_then(size_of);
                    size.as_ref()
                }
            };
            left.and_then(|l| order(l, &v.value))
                .is_some_and(|o| satisfies(*cmp, o))
        }
        Condition::And(parts) => parts.iter().all(|p| holds(p, item)),
        Condition::Or(parts) => parts.iter().any(|p| holds(p, item)),
        Condition::Not(c) => !holds(c, item),
    }
}

fn satisfies(cmp: Cmp, o: Ordering) -> bool {
    match cmp {
        Cmp::Eq => o.is_eq(),
        Cmp::Lt => o.is_lt(),
        Cmp::Le => o.is_le(),
        Cmp::Gt => o.is_gt(),
        Cmp::Ge => o.is_ge(),
    }
}

/// DynamoDB's type code of a value (`None` for the types [`AttrValue::Other`] folds together).
fn type_code(v: &AttrValue) -> Option<&'static str> {
    Some(match v {
        AttrValue::S(_) => "S",
        AttrValue::N(_) => "N",
        AttrValue::Bool(_) => "BOOL",
        AttrValue::Null => "NULL",
        AttrValue::L(_) => "L",
        AttrValue::M(_) => "M",
        AttrValue::Other => return None,
    })
}

/// `size(v)`: a string's length in UTF-8 bytes, a list's or map's element count; other types
/// have no size here.
fn size_of(v: &AttrValue) -> Option<AttrValue> {
    let n = match v {
        AttrValue::S(s) => s.len(),
        AttrValue::L(l) => l.len(),
        AttrValue::M(m) => m.len(),
        _ => return None,
    };
    Some(AttrValue::N(n.to_string()))
}

/// How `l` orders against `r`: numbers as numbers, strings by bytes; `None` across types (no
/// comparison holds), and for the types that only compare equal (lists, maps, booleans, null)
/// when they differ.
fn order(l: &AttrValue, r: &AttrValue) -> Option<Ordering> {
    match (l, r) {
        (AttrValue::S(a), AttrValue::S(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (AttrValue::N(a), AttrValue::N(b)) => compare_numbers(a, b),
        (AttrValue::Other, _) | (_, AttrValue::Other) => None,
        (a, b) if a == b => Some(Ordering::Equal),
        _ => None,
    }
}

/// A DynamoDB number: sign, integer digits without leading zeros, fraction digits without
/// trailing zeros, and a decimal exponent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Decimal {
    pub(crate) negative: bool,
    /// All significant digits (ASCII), integer part first.
    pub(crate) digits: Vec<u8>,
    /// Position of the decimal point within `digits` (may lie outside it).
    pub(crate) point: i64,
}

pub(crate) fn parse_number(s: &str) -> Option<Decimal> {
    let s = s.trim();
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i64>().ok()?),
        None => (s, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let all: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
    if !all.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let lead = all.iter().take_while(|d| **d == b'0').count();
    let mut digits = all[lead..].to_vec();
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    let point = int.len() as i64 - lead as i64 + exp;
    // Zero has no sign.
    let negative = negative && !digits.is_empty();
    Some(Decimal {
        negative,
        digits,
        point,
    })
}

/// Numeric order of two DynamoDB number strings, exactly (no float rounding).
fn compare_numbers(a: &str, b: &str) -> Option<Ordering> {
    let (a, b) = (parse_number(a)?, parse_number(b)?);
    let magnitude = |d: &Decimal, e: &Decimal| match (d.digits.is_empty(), e.digits.is_empty()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => d.point.cmp(&e.point).then_with(|| d.digits.cmp(&e.digits)),
    };
    Some(match (a.negative, b.negative) {
        (false, false) => magnitude(&a, &b),
        (true, true) => magnitude(&b, &a),
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
    })
}

#[cfg(test)]
mod tests {
    use super::compare_numbers;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    #[test]
    fn numbers_compare_by_value_not_by_text() {
        assert_eq!(compare_numbers("9", "10"), Some(Ordering::Less));
        assert_eq!(compare_numbers("10", "10.0"), Some(Ordering::Equal));
        assert_eq!(compare_numbers("007", "7"), Some(Ordering::Equal));
        assert_eq!(compare_numbers("-2", "-10"), Some(Ordering::Greater));
        assert_eq!(compare_numbers("0.5", "0.25"), Some(Ordering::Greater));
        assert_eq!(compare_numbers("-0", "0"), Some(Ordering::Equal));
        assert_eq!(compare_numbers("1e3", "999"), Some(Ordering::Greater));
        assert_eq!(compare_numbers("0.001", "1E-3"), Some(Ordering::Equal));
        assert_eq!(compare_numbers("x", "1"), None);
    }

    proptest! {
        #[test]
        fn integer_order_is_numeric_order(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(compare_numbers(&a.to_string(), &b.to_string()), Some(a.cmp(&b)));
        }

        #[test]
        fn decimal_order_matches_scaled_integers(a in -1_000_000i64..1_000_000, b in -1_000_000i64..1_000_000) {
            let dec = |x: i64| format!("{}{}.{:03}", if x < 0 { "-" } else { "" }, x.abs() / 1000, x.abs() % 1000);
            prop_assert_eq!(compare_numbers(&dec(a), &dec(b)), Some(a.cmp(&b)));
        }
    }
}
