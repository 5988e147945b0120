//! SDK `AttributeValue` ↔ the domain's [`AttrValue`].

use crate::domain::fold::{AttrRef, RowShape, UsageRow};
use crate::domain::row::{AttrValue, RawUsageRow};
use aws_sdk_dynamodb::types::AttributeValue as Av;
use std::collections::HashMap;

/// Convert an SDK attribute value to the domain's.
pub fn to_domain(av: &Av) -> AttrValue {
    match av {
        Av::S(s) => AttrValue::S(s.clone()),
        Av::N(n) => AttrValue::N(n.clone()),
        Av::Bool(b) => AttrValue::Bool(*b),
        Av::Null(_) => AttrValue::Null,
        Av::L(l) => AttrValue::L(l.iter().map(to_domain).collect()),
        Av::M(m) => AttrValue::M(m.iter().map(|(k, v)| (k.clone(), to_domain(v))).collect()),
        _ => AttrValue::Other,
    }
}

/// Convert an SDK attribute value the caller owns to the domain's, moving its strings instead
/// of copying them ([`to_domain`] on an owned value, without an allocation per string).
pub fn into_domain(av: Av) -> AttrValue {
    match av {
        Av::S(s) => AttrValue::S(s),
        Av::N(n) => AttrValue::N(n),
        Av::Bool(b) => AttrValue::Bool(b),
        Av::Null(_) => AttrValue::Null,
        Av::L(l) => AttrValue::L(l.into_iter().map(into_domain).collect()),
        Av::M(m) => AttrValue::M(m.into_iter().map(|(k, v)| (k, into_domain(v))).collect()),
        _ => AttrValue::Other,
    }
}

/// Convert a domain attribute value to the SDK's. `Other` has no faithful SDK form and
/// becomes NULL; the pipeline never writes it.
pub fn to_sdk(v: &AttrValue) -> Av {
    match v {
        AttrValue::S(s) => Av::S(s.clone()),
        AttrValue::N(n) => Av::N(n.clone()),
        AttrValue::Bool(b) => Av::Bool(*b),
        AttrValue::Null | AttrValue::Other => Av::Null(true),
        AttrValue::L(l) => Av::L(l.iter().map(to_sdk).collect()),
        AttrValue::M(m) => Av::M(m.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()),
    }
}

/// A row (SDK item) in domain form.
pub fn row_from_item(item: &HashMap<String, Av>) -> RawUsageRow {
    item.iter()
        .map(|(k, v)| (k.clone(), to_domain(v)))
        .collect()
}

/// An SDK item the caller owns in domain form: [`row_from_item`] without copying a name or a
/// value (what the aggregator's group read does with each page it receives).
pub fn row_from_owned_item(item: HashMap<String, Av>) -> RawUsageRow {
    // Inserted one by one: the names are distinct, so this is `collect` without its buffer and
    // sort.
    let mut row = RawUsageRow::new();
    for (k, v) in item {
        row.insert(k, into_domain(v));
    }
    row
}

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

pub(super) fn s(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

pub(super) fn n(v: impl ToString) -> Av {
    Av::N(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn attribute_values_round_trip() {
        let v = AttrValue::M(BTreeMap::from([
            (
                "a".into(),
                AttrValue::L(vec![
                    AttrValue::N("1".into()),
                    AttrValue::Bool(true),
                    AttrValue::Null,
                ]),
            ),
            ("b".into(), AttrValue::S("x".into())),
        ]));
        assert_eq!(to_domain(&to_sdk(&v)), v);
        assert_eq!(to_domain(&Av::Ss(vec!["a".into()])), AttrValue::Other);
        assert_eq!(into_domain(to_sdk(&v)), v);
        assert_eq!(into_domain(Av::Ss(vec!["a".into()])), AttrValue::Other);
        let item: HashMap<String, Av> = [
            ("k".to_owned(), to_sdk(&v)),
            ("n".to_owned(), Av::N("7".into())),
        ]
        .into();
        assert_eq!(row_from_owned_item(item.clone()), row_from_item(&item));
    }

    #[test]
    fn an_item_is_compacted_exactly_as_its_domain_row() {
        use crate::domain::row::{Allocation, Tag, conforming_row};
        use awsmp_contract::attrs;
        use awsmp_contract::keys::GroupKey;
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
