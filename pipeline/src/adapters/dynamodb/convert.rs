//! An SDK item as the aggregator's fold takes it; the plain conversions between the SDK's
//! `AttributeValue` and the contract's `AttrValue` are `awsmp_aws::dynamodb`'s.

use crate::domain::fold::{AttrRef, RowShape, UsageRow};
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::dynamodb::row_from_owned_item;
use std::collections::HashMap;

/// A look at an SDK value as the row shape reads it.
fn attr_ref(av: &Av) -> AttrRef<'_> {
    match av {
        Av::S(s) => AttrRef::S(s),
        Av::N(n) => AttrRef::N(n),
        Av::Null(_) => AttrRef::Null,
        _ => AttrRef::Other,
    }
}

/// An SDK item of `shape`'s group (its pending-rows query) as the aggregator's fold takes it:
/// compacted to its second and quantity when it is a row exactly as the writer contract makes
/// it (its strings compared in place, its quantity parsed in place, nothing kept), else
/// [`row_from_owned_item`].
pub fn usage_row_from_owned_item(shape: Option<&RowShape>, item: HashMap<String, Av>) -> UsageRow {
    let compact =
        shape.and_then(|s| s.compact(item.iter().map(|(k, v)| (k.as_str(), attr_ref(v)))));
    match compact {
        Some(c) => UsageRow::Compact(c),
        None => UsageRow::Raw(row_from_owned_item(item)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_aws::dynamodb::to_sdk;
    use awsmp_contract::row::AttrValue;

    #[test]
    fn an_item_is_compacted_exactly_as_its_domain_row() {
        use awsmp_contract::attrs;
        use awsmp_contract::keys::GroupKey;
        use awsmp_contract::row::{Allocation, Tag, conforming_row};
        let group = GroupKey::new(
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
            "210987654321",
            "api_calls",
            "2026-11-30T11".parse().unwrap(),
        );
        let shape = RowShape::of(&group);
        let allocs = [Allocation {
            quantity: 7,
            tags: vec![Tag::new("team", "a")],
        }];
        let mut rows = vec![
            conforming_row(&group, 5, 7, None),
            conforming_row(&group, 6, 7, Some(&allocs)),
        ];
        for (name, value) in [
            (attrs::QUANTITY, AttrValue::N("007".into())),
            (attrs::QUANTITY, AttrValue::S("7".into())),
            (attrs::DIMENSION, AttrValue::s("other")),
            (attrs::METERING_PENDING, AttrValue::Null),
            (attrs::CUSTOMER_IDENTIFIER, AttrValue::s("210987654321")),
            (attrs::USAGE_ALLOCATIONS, AttrValue::Null),
        ] {
            let mut row = conforming_row(&group, 9, 3, None);
            row.insert(name.to_owned(), value);
            rows.push(row);
        }
        let mut compacted = 0;
        for row in rows {
            let item: HashMap<String, Av> =
                row.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect();
            let from_item = usage_row_from_owned_item(shape.as_ref(), item);
            compacted += usize::from(matches!(from_item, UsageRow::Compact(_)));
            assert_eq!(from_item, RowShape::usage_row(shape.as_ref(), row));
        }
        // The conforming row and the one whose allocations are NULL.
        assert_eq!(compacted, 2);
    }
}
