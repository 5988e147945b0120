//! Property tests of keys, formats and exact number parsing: every accepted input is
//! canonical, every canonical value round-trips, and arbitrary input never panics.

use awsmp_contract::keys::{
    GroupKey, HourBucket, format_usage_timestamp, parse_aggregated_sort_key, parse_usage_timestamp,
    split_usage_sort_key,
};
use awsmp_contract::row::{NumberError, parse_non_negative_integer};
use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;

fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    // Years 0000–9999 in seconds, plus a sub-second part.
    (-62_167_219_200i64..253_402_300_799, 0..1_000_000_000u32)
        .prop_map(|(s, ns)| Utc.timestamp_opt(s, ns).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn timestamps_round_trip_floored_to_the_second(t in instant()) {
        let s = format_usage_timestamp(t);
        let back = parse_usage_timestamp(&s).unwrap();
        prop_assert_eq!(back.timestamp(), t.timestamp());
        prop_assert_eq!(format_usage_timestamp(back), s);
    }

    #[test]
    fn hour_buckets_round_trip(t in instant()) {
        let b = HourBucket::containing(t);
        prop_assert!(b.start() <= t && t < b.end());
        let s = b.to_string();
        prop_assert_eq!(s.len(), 13);
        prop_assert_eq!(s.parse::<HourBucket>().unwrap(), b);
        prop_assert_eq!(&s, &format_usage_timestamp(t)[..13]);
        prop_assert_eq!(b.second_of(t), Some((t.timestamp() - b.start().timestamp()) as u32));
    }

    /// Anything the strict parsers accept is already in canonical form.
    #[test]
    fn accepted_strings_are_canonical(s in "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}(:[0-9]{2}(:[0-9]{2}(\\.[0-9]{1,3})?Z?)?)?|.{0,24}") {
        if let Ok(t) = parse_usage_timestamp(&s) {
            prop_assert_eq!(format_usage_timestamp(t), s.clone());
        }
        if let Ok(b) = s.parse::<HourBucket>() {
            prop_assert_eq!(b.to_string(), s);
        }
    }

    #[test]
    fn group_keys_round_trip_through_work_messages_and_sort_keys(
        license in ".{1,40}", account in "[^#]{1,20}", dimension in ".{1,30}", t in instant(), second in 0..3600u32,
    ) {
        let g = GroupKey::new(license, account, dimension, HourBucket::containing(t));
        prop_assert_eq!(GroupKey::from_work_message(&g.to_work_message()).unwrap(), g.clone());
        let sk = g.usage_sort_key_at(second);
        prop_assert!(sk.starts_with(&g.usage_prefix()));
        let seg = split_usage_sort_key(&sk).unwrap();
        prop_assert_eq!(seg.account, g.customer_aws_account_id.as_str());
        prop_assert_eq!(seg.dimension, g.dimension.as_str());
        prop_assert_eq!(parse_usage_timestamp(seg.timestamp).unwrap(), g.hour.at_second(second));
        let aggregated = g.aggregated_sort_key();
        let (a, d, h) = parse_aggregated_sort_key(&aggregated).unwrap();
        prop_assert_eq!((a, d, h), (g.customer_aws_account_id.as_str(), g.dimension.as_str(), g.hour));
    }

    #[test]
    fn integers_parse_exactly_in_any_spelling(v in any::<u64>(), zeros in 0..5usize, shift in 0..5i32) {
        prop_assert_eq!(parse_non_negative_integer(&v.to_string()), Ok(v));
        prop_assert_eq!(parse_non_negative_integer(&format!("{v}.{}", "0".repeat(zeros))), Ok(v));
        // v × 10^shift written as v followed by shift zeros, and as mantissa/exponent.
        if let Some(scaled) = 10u64.checked_pow(shift as u32).and_then(|p| v.checked_mul(p)) {
            prop_assert_eq!(parse_non_negative_integer(&format!("{v}E{shift}")), Ok(scaled));
        } else {
            prop_assert_eq!(parse_non_negative_integer(&format!("{v}E{shift}")), Err(NumberError::Overflow));
        }
        if v > 0 {
            prop_assert_eq!(parse_non_negative_integer(&format!("-{v}")), Err(NumberError::Negative));
            prop_assert_eq!(parse_non_negative_integer(&format!("{v}.5")), Err(NumberError::NonInteger));
            prop_assert_eq!(parse_non_negative_integer(&format!("-{v}.5")), Err(NumberError::NonInteger));
        }
    }

    #[test]
    fn number_parsing_never_panics_and_agrees_with_f64_on_small_values(s in "[-+]?[0-9]{0,6}(\\.[0-9]{0,3})?([eE][-+]?[0-9]{0,2})?|.{0,12}") {
        let parsed = parse_non_negative_integer(&s);
        if let (Ok(v), Ok(f)) = (parsed, s.parse::<f64>()) {
            prop_assert!(f.is_finite());
            prop_assert_eq!(f, v as f64);
        }
        if let Ok(f) = s.parse::<f64>()
            && f.is_finite() && f.abs() < 1e15 && s.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
        {
            let expected = if f.fract() != 0.0 {
                Err(NumberError::NonInteger)
            } else if f < 0.0 {
                Err(NumberError::Negative)
            } else {
                Ok(f as u64)
            };
            prop_assert_eq!(parsed, expected, "{}", s);
        }
    }
}
