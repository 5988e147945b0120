use super::*;

/// An item of these attributes (the update tests build theirs the same way).
pub(crate) fn item(pairs: &[(&str, AttrValue)]) -> Item {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The attribute `name`, written bare.
pub(crate) fn a(name: &str) -> Attr {
    Attr::bare(name)
}

#[test]
fn existence_functions_read_presence_only() {
    let it = item(&[("x", AttrValue::Null)]);
    assert!(Condition::exists(a("x")).holds_for(Some(&it)));
    assert!(!Condition::exists(a("y")).holds_for(Some(&it)));
    assert!(Condition::not_exists(a("y")).holds_for(Some(&it)));
    assert!(!Condition::not_exists(a("x")).holds_for(Some(&it)));
    // No item: every attribute is missing.
    assert!(Condition::not_exists(a("x")).holds_for(None));
    assert!(!Condition::exists(a("x")).holds_for(None));
}

#[test]
fn each_comparator_on_numbers() {
    let it = item(&[("q", AttrValue::n(10))]);
    let holds =
        |cmp, v: u64| Condition::compare(a("q"), cmp, Value::n(":v", v)).holds_for(Some(&it));
    assert!(holds(Cmp::Eq, 10) && !holds(Cmp::Eq, 9));
    assert!(holds(Cmp::Lt, 11) && !holds(Cmp::Lt, 10));
    assert!(holds(Cmp::Le, 10) && !holds(Cmp::Le, 9));
    assert!(holds(Cmp::Gt, 9) && !holds(Cmp::Gt, 10));
    assert!(holds(Cmp::Ge, 10) && !holds(Cmp::Ge, 11));
}

#[test]
fn numbers_compare_as_numbers_and_strings_as_bytes() {
    // "9" < "10" as numbers, but "9" > "10" as strings.
    let n = item(&[("x", AttrValue::N("9".into()))]);
    let s = item(&[("x", AttrValue::s("9"))]);
    assert!(Condition::lt(a("x"), Value::n(":v", 10)).holds_for(Some(&n)));
    assert!(!Condition::lt(a("x"), Value::s(":v", "10")).holds_for(Some(&s)));
    assert!(Condition::eq(a("x"), Value::n(":v", "9.0")).holds_for(Some(&n)));
}

#[test]
fn comparisons_across_types_and_on_missing_attributes_are_false() {
    let it = item(&[("x", AttrValue::s("5"))]);
    for cmp in [Cmp::Eq, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge] {
        let c = Condition::compare(a("x"), cmp, Value::n(":v", 5));
        assert!(!c.holds_for(Some(&it)), "{cmp:?} across S and N");
        let c = Condition::compare(a("missing"), cmp, Value::n(":v", 5));
        assert!(!c.holds_for(Some(&it)), "{cmp:?} on a missing attribute");
    }
    // A missing attribute under NOT: the comparison is false, so its negation holds.
    assert!((!Condition::eq(a("missing"), Value::n(":v", 5))).holds_for(Some(&it)));
}

#[test]
fn type_size_and_prefix_functions() {
    let list = AttrValue::L(vec![AttrValue::s("a"), AttrValue::s("b")]);
    let it = item(&[("l", list), ("s", AttrValue::s("2026-11-30T10"))]);
    let ty = |name, code| Condition::has_type(a(name), Value::s(":t", code)).holds_for(Some(&it));
    assert!(ty("l", "L") && !ty("l", "S") && ty("s", "S") && !ty("missing", "S"));
    let size = |cmp, v: u64| Condition::size(a("l"), cmp, Value::n(":n", v)).holds_for(Some(&it));
    assert!(size(Cmp::Lt, 3) && !size(Cmp::Lt, 2) && size(Cmp::Eq, 2));
    assert!(!Condition::size(a("missing"), Cmp::Ge, Value::n(":n", 0)).holds_for(Some(&it)));
    let begins = |p: &str| Condition::BeginsWith(a("s"), Value::s(":p", p)).holds_for(Some(&it));
    assert!(begins("2026-11") && !begins("2026-12"));
}

#[test]
fn and_or_not_evaluate_as_boolean_logic() {
    let it = item(&[("x", AttrValue::n(1))]);
    let t = || Condition::exists(a("x"));
    let f = || Condition::exists(a("y"));
    assert!(!t().and(f()).holds_for(Some(&it)));
    assert!(t().and(t()).holds_for(Some(&it)));
    assert!(f().or(t()).holds_for(Some(&it)));
    assert!(!f().or(f()).holds_for(Some(&it)));
    assert!((!f()).holds_for(Some(&it)));
    // f OR (t AND f) is false; (f OR t) AND f is false; f OR t AND t (as built) is true.
    assert!(!f().or(t().and(f())).holds_for(Some(&it)));
    assert!(!f().or(t()).and(f()).holds_for(Some(&it)));
    assert!(f().or(t().and(t())).holds_for(Some(&it)));
}

#[test]
fn rendering_parenthesizes_nested_and_or_and_collects_names_and_values() {
    let c = Condition::not_exists(Attr::token("#k", "dedupKey"))
        .or(
            Condition::eq(Attr::token("#sh", "shardId"), Value::s(":sh", "s-1")).and(
                Condition::eq(Attr::token("#sq", "sequenceNumber"), Value::s(":sq", "7")),
            ),
        )
        .or(Condition::lt(
            Attr::token("#ex", "expiresAt"),
            Value::n(":now", 5),
        ));
    let r = c.render();
    assert_eq!(
        r.expression,
        "attribute_not_exists(#k) OR (#sh = :sh AND #sq = :sq) OR #ex < :now"
    );
    assert_eq!(r.names.len(), 4);
    assert_eq!(r.names["#ex"], "expiresAt");
    assert_eq!(r.values[":now"], AttrValue::n(5));
    assert_eq!(r.values[":sh"], AttrValue::s("s-1"));

    let c = Condition::exists(a("p"))
        .or(Condition::exists(a("q")))
        .and(!Condition::exists(a("r")).or(Condition::exists(a("s"))));
    assert_eq!(
        c.render().expression,
        "(attribute_exists(p) OR attribute_exists(q)) AND NOT (attribute_exists(r) OR attribute_exists(s))"
    );
    assert!(c.render().names.is_empty() && c.render().values.is_empty());
    assert_eq!(
        (!Condition::exists(a("p"))).render().expression,
        "NOT attribute_exists(p)"
    );
    let f = Condition::size(Attr::token("#c", "cov"), Cmp::Lt, Value::n(":n", 8)).and(
        Condition::has_type(Attr::token("#c", "cov"), Value::s(":t", "L")),
    );
    assert_eq!(
        f.render().expression,
        "size(#c) < :n AND attribute_type(#c, :t)"
    );
    assert_eq!(
        Condition::all([Condition::exists(a("p"))]),
        Condition::exists(a("p"))
    );
}

#[test]
fn rendering_and_evaluation_agree_with_the_precedence_dynamodb_applies() {
    // Built as `p OR (q AND r)`: DynamoDB reads `p OR q AND r` the same way (AND binds
    // tighter), and the rendering spells the grouping out either way.
    let it = item(&[("p", AttrValue::n(1))]);
    let c = Condition::exists(a("p")).or(Condition::exists(a("q")).and(Condition::exists(a("r"))));
    assert_eq!(
        c.render().expression,
        "attribute_exists(p) OR (attribute_exists(q) AND attribute_exists(r))"
    );
    assert!(c.holds_for(Some(&it)));
}
