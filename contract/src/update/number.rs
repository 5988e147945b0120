//! Exact addition of two DynamoDB numbers, as `ADD` does: decimal, up to 38 significant
//! digits
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html#HowItWorks.DataTypes.Number>).

use crate::condition::{Decimal, parse_number};
use std::cmp::Ordering;

/// DynamoDB's precision: significant digits a number may have.
const MAX_DIGITS: usize = 38;

/// Widest aligned sum computed (DynamoDB's numbers span 10^-130 to 10^126).
const MAX_WIDTH: i64 = 300;

/// `a + b`, in plain decimal notation without superfluous zeros (`"-1.5"`, `"120"`, `"0"`).
pub(super) fn add(a: &str, b: &str) -> Result<String, &'static str> {
    let (a, b) = match (parse_number(a), parse_number(b)) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err("not a number"),
    };
    // Align both on the lowest place either has, up to one place above the highest.
    let low = (a.point - a.digits.len() as i64).min(b.point - b.digits.len() as i64);
    let high = a.point.max(b.point) + 1;
    if high - low > MAX_WIDTH {
        return Err("out of DynamoDB's number range");
    }
    let (x, y) = (aligned(&a, low, high), aligned(&b, low, high));
    let (negative, magnitude) = if a.negative == b.negative {
        (a.negative, add_digits(&x, &y))
    } else {
        match x.cmp(&y) {
            Ordering::Less => (b.negative, sub_digits(&y, &x)),
            _ => (a.negative, sub_digits(&x, &y)),
        }
    };
    let lead = magnitude.iter().take_while(|d| **d == 0).count();
    let mut digits = magnitude[lead..].to_vec();
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.len() > MAX_DIGITS {
        return Err("the sum has more than 38 significant digits");
    }
    let point = high - lead as i64;
    Ok(format_decimal(
        negative && !digits.is_empty(),
        &digits,
        point,
    ))
}

/// `d`'s digits as values, placed at `low..high` (most significant first).
fn aligned(d: &Decimal, low: i64, high: i64) -> Vec<u8> {
    let mut out = vec![0u8; (high - low) as usize];
    let first = (high - d.point) as usize;
    for (i, c) in d.digits.iter().enumerate() {
        out[first + i] = c - b'0';
    }
    out
}

fn add_digits(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; x.len()];
    let mut carry = 0;
    for i in (0..x.len()).rev() {
        let s = x[i] + y[i] + carry;
        out[i] = s % 10;
        carry = s / 10;
    }
    // The top place is always 0 in both (`high` is one above either's highest digit).
    debug_assert_eq!(carry, 0);
    out
}

/// `x - y`, for `x >= y`.
fn sub_digits(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; x.len()];
    let mut borrow = 0;
    for i in (0..x.len()).rev() {
        let (xi, yi) = (x[i] as i8, (y[i] + borrow) as i8);
        if xi < yi {
            out[i] = (xi + 10 - yi) as u8;
            borrow = 1;
        } else {
            out[i] = (xi - yi) as u8;
            borrow = 0;
        }
    }
    out
}

/// The decimal with significant `digits` (values) and its point after `point` of them.
fn format_decimal(negative: bool, digits: &[u8], point: i64) -> String {
    if digits.is_empty() {
        return "0".to_owned();
    }
    let text: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
    let len = digits.len() as i64;
    let body = if point >= len {
        format!("{text}{}", "0".repeat((point - len) as usize))
    } else if point <= 0 {
        format!("0.{}{text}", "0".repeat((-point) as usize))
    } else {
        format!("{}.{}", &text[..point as usize], &text[point as usize..])
    };
    if negative { format!("-{body}") } else { body }
}

#[cfg(test)]
mod tests {
    use super::add;
    use proptest::prelude::*;

    #[test]
    fn sums_are_exact_and_canonical() {
        assert_eq!(add("0", "1").unwrap(), "1");
        assert_eq!(add("9", "1").unwrap(), "10");
        assert_eq!(add("1.5", "-1.5").unwrap(), "0");
        assert_eq!(add("0.1", "0.2").unwrap(), "0.3");
        assert_eq!(add("-2", "0.25").unwrap(), "-1.75");
        assert_eq!(add("1e3", "7").unwrap(), "1007");
        assert_eq!(add("007.50", "0").unwrap(), "7.5");
        assert_eq!(add("-0.001", "0").unwrap(), "-0.001");
        assert_eq!(
            add("99999999999999999999999999999999999999", "1").unwrap(),
            "100000000000000000000000000000000000000"
        );
        assert!(add("99999999999999999999999999999999999999", "0.1").is_err());
        assert!(add("x", "1").is_err());
        assert!(add("1e200", "1e-200").is_err());
    }

    proptest! {
        #[test]
        fn integer_sums_match_i128(a in any::<i64>(), b in any::<i64>()) {
            let expected = (i128::from(a) + i128::from(b)).to_string();
            prop_assert_eq!(add(&a.to_string(), &b.to_string()).unwrap(), expected);
        }

        #[test]
        fn decimal_sums_match_scaled_integers(a in -1_000_000i64..1_000_000, b in -1_000_000i64..1_000_000) {
            let dec = |x: i64| format!("{}{}.{:03}", if x < 0 { "-" } else { "" }, x.abs() / 1000, x.abs() % 1000);
            let sum = add(&dec(a), &dec(b)).unwrap();
            let back = |s: &str| -> i64 {
                let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
                let (i, f) = s.split_once('.').unwrap_or((s, ""));
                let v = i.parse::<i64>().unwrap() * 1000 + format!("{f:0<3}").parse::<i64>().unwrap();
                if neg { -v } else { v }
            };
            prop_assert_eq!(back(&sum), a + b);
            let superfluous_zero = sum.contains('.') && sum.ends_with('0');
            prop_assert!(!sum.ends_with('.') && !superfluous_zero);
        }
    }
}
