use super::*;
use crate::condition::Cmp;
use crate::condition::tests::{a, item};
use proptest::prelude::*;

#[test]
fn clauses_render_once_each_in_the_order_first_used() {
    let u = Update::new()
        .set(a("q"), Value::n(":q", 5))
        .set(a("at"), Value::s(":now", "t"))
        .add(a("n"), Value::n(":one", 1))
        .set(a("up"), Value::s(":now", "t"));
    let r = u.render();
    assert_eq!(r.expression, "SET q = :q, at = :now, up = :now ADD n :one");
    assert_eq!(r.condition, None);
    assert!(r.names.is_empty());
    assert_eq!(r.values.len(), 3);
    assert_eq!(r.values[":one"], AttrValue::n(1));

    let u = Update::new()
        .remove(a("p"))
        .set(Attr::token("#ttl", "ttl"), Value::n(":ttl", 9))
        .remove(a("r"))
        .set_if_not_exists(a("c"), Value::s(":now", "t"));
    let r = u.render();
    assert_eq!(
        r.expression,
        "REMOVE p, r SET #ttl = :ttl, c = if_not_exists(c, :now)"
    );
    assert_eq!(r.names["#ttl"], "ttl");
}

#[test]
fn an_update_and_its_condition_share_one_map_of_each() {
    let c = Condition::exists(a("p")).and(Condition::eq(
        Attr::token("#q", "quantity"),
        Value::n(":q", 7),
    ));
    let u = Update::new()
        .set(Attr::token("#q", "quantity"), Value::n(":prev", 3))
        .set(a("at"), Value::s(":now", "t"));
    let r = u.render_with(&c);
    assert_eq!(r.expression, "SET #q = :prev, at = :now");
    assert_eq!(
        r.condition.as_deref(),
        Some("attribute_exists(p) AND #q = :q")
    );
    assert_eq!(r.names.len(), 1);
    let tokens: Vec<_> = r.values.keys().map(String::as_str).collect();
    assert_eq!(tokens, [":now", ":prev", ":q"]);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = ":q sent with two values")]
fn a_token_bound_to_two_values_across_update_and_condition_is_caught() {
    let c = Condition::eq(a("q"), Value::n(":q", 7));
    Update::new().set(a("q"), Value::n(":q", 8)).render_with(&c);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "#k stands for two attribute names")]
fn a_name_token_bound_to_two_names_is_caught() {
    let c = Condition::exists(Attr::token("#k", "x"));
    Update::new().remove(Attr::token("#k", "y")).render_with(&c);
}

#[test]
fn set_overwrites_and_if_not_exists_keeps() {
    let mut it = item(&[("x", AttrValue::n(1)), ("c", AttrValue::s("old"))]);
    Update::new()
        .set(a("x"), Value::s(":x", "two"))
        .set_if_not_exists(a("c"), Value::s(":c", "new"))
        .set_if_not_exists(a("d"), Value::s(":d", "new"))
        .apply(&mut it)
        .unwrap();
    assert_eq!(
        it,
        item(&[
            ("x", AttrValue::s("two")),
            ("c", AttrValue::s("old")),
            ("d", AttrValue::s("new")),
        ])
    );
}

#[test]
fn remove_of_a_missing_attribute_does_nothing() {
    let mut it = item(&[("x", AttrValue::n(1))]);
    Update::new()
        .remove(a("x"))
        .remove(a("missing"))
        .apply(&mut it)
        .unwrap();
    assert!(it.is_empty());
}

#[test]
fn add_starts_a_missing_number_from_zero_and_adds_exactly() {
    let mut it = item(&[("n", AttrValue::N("41".into()))]);
    Update::new()
        .add(a("n"), Value::n(":one", 1))
        .add(a("m"), Value::n(":d", "0.5"))
        .apply(&mut it)
        .unwrap();
    assert_eq!(it["n"], AttrValue::n(42));
    assert_eq!(it["m"], AttrValue::N("0.5".into()));
}

#[test]
fn what_dynamodb_refuses_is_refused_and_changes_nothing() {
    let before = item(&[("s", AttrValue::s("x")), ("n", AttrValue::n(1))]);
    let refused = [
        // ADD to a string.
        Update::new()
            .set(a("n"), Value::n(":v", 2))
            .add(a("s"), Value::n(":one", 1)),
        // ADD of a string.
        Update::new().add(a("n"), Value::s(":x", "1")),
        // Past 38 digits.
        Update::new()
            .add(a("n"), Value::n(":big", format!("0.{}", "1".repeat(38))))
            .remove(a("s")),
    ];
    for u in refused {
        let mut it = before.clone();
        assert!(
            matches!(u.apply(&mut it), Err(DomainError::InvalidUpdate(_))),
            "{u:?}"
        );
        assert_eq!(it, before, "{u:?}");
    }
    // Two actions on one attribute (the builder catches it in debug builds; `apply` always).
    let twice = Update {
        actions: vec![
            Action::Remove(a("n")),
            Action::Set(a("n"), Value::n(":v", 3)),
        ],
    };
    let mut it = before.clone();
    assert!(twice.apply(&mut it).is_err());
    assert_eq!(it, before);
}

#[test]
fn an_update_applied_where_its_condition_held_can_be_read_back_by_a_condition() {
    // The attempt mark's shape: the twin's next write reads what this one left.
    let mut it = item(&[("pending", AttrValue::s("h"))]);
    let mark = Update::new()
        .set(a("attemptedQuantity"), Value::n(":q", 5))
        .add(a("attemptNumber"), Value::n(":one", 1));
    mark.apply(&mut it).unwrap();
    mark.apply(&mut it).unwrap();
    let second = Condition::compare(a("attemptNumber"), Cmp::Eq, Value::n(":an", 2));
    assert!(second.holds_for(Some(&it)));
}

/// One action of the subset on one of a few attributes, for the property tests.
fn arb_action(name: &'static str) -> impl Strategy<Value = Action> {
    let value = prop_oneof![
        (0u64..1000).prop_map(AttrValue::n),
        "[a-z]{0,3}".prop_map(AttrValue::s),
    ];
    (0..4u8, value, 0u64..1000).prop_map(move |(kind, v, n)| {
        let token = format!(":{name}");
        match kind {
            0 => Action::Set(Attr::bare(name), Value::new(token, v)),
            1 => Action::SetIfNotExists(Attr::bare(name), Value::new(token, v)),
            2 => Action::Remove(Attr::bare(name)),
            _ => Action::Add(Attr::bare(name), Value::n(token, n)),
        }
    })
}

fn arb_update() -> impl Strategy<Value = Update> {
    let names = ["a", "b", "c", "d"];
    let per_name: Vec<_> = names
        .iter()
        .map(|n| prop::option::of(arb_action(n)))
        .collect();
    (per_name, any::<prop::sample::Index>()).prop_map(|(actions, rotate)| {
        let mut actions: Vec<Action> = actions.into_iter().flatten().collect();
        if !actions.is_empty() {
            let k = rotate.index(actions.len());
            actions.rotate_left(k);
        }
        Update { actions }
    })
}

fn arb_item() -> impl Strategy<Value = Item> {
    let value = prop_oneof![
        (0u64..1000).prop_map(AttrValue::n),
        "[a-z]{0,3}".prop_map(AttrValue::s),
    ];
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "c", "d", "e"]),
        value,
        0..5,
    )
    .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The rendered expression read back into actions (the subset's grammar), tokens resolved
/// through the rendered maps.
fn parse(r: &RenderedUpdate) -> Vec<(String, String, Option<AttrValue>)> {
    let mut out: Vec<(String, String, Option<AttrValue>)> = Vec::new();
    let words: Vec<&str> = r.expression.split(' ').collect();
    let mut clause = "";
    let mut i = 0;
    while i < words.len() {
        let w = words[i].trim_end_matches(',');
        if ["SET", "REMOVE", "ADD"].contains(&w) {
            clause = w;
            i += 1;
            continue;
        }
        let value = |t: &str| Some(r.values[t.trim_end_matches([',', ')'])].clone());
        match clause {
            "REMOVE" => out.push(("REMOVE".into(), w.into(), None)),
            "ADD" => {
                out.push(("ADD".into(), w.into(), value(words[i + 1])));
                i += 1;
            }
            _ if words[i + 2].starts_with("if_not_exists(") => {
                assert_eq!(words[i + 2], format!("if_not_exists({w},"));
                out.push(("SET_IF".into(), w.into(), value(words[i + 3])));
                i += 3;
            }
            _ => {
                assert_eq!(words[i + 1], "=");
                out.push(("SET".into(), w.into(), value(words[i + 2])));
                i += 2;
            }
        }
        i += 1;
    }
    out.sort_by(|x, y| x.1.cmp(&y.1));
    out
}

proptest! {
    /// The rendering says exactly what the actions say: read back, every action is there once,
    /// with its value.
    #[test]
    fn the_rendering_reads_back_as_the_actions(u in arb_update()) {
        prop_assume!(!u.actions().is_empty());
        let mut expected: Vec<_> = u.actions().iter().map(|act| match act {
            Action::Set(a, v) => ("SET".to_owned(), a.name().to_owned(), Some(v.value.clone())),
            Action::SetIfNotExists(a, v) => ("SET_IF".to_owned(), a.name().to_owned(), Some(v.value.clone())),
            Action::Remove(a) => ("REMOVE".to_owned(), a.name().to_owned(), None),
            Action::Add(a, v) => ("ADD".to_owned(), a.name().to_owned(), Some(v.value.clone())),
        }).collect();
        expected.sort_by(|x, y| x.1.cmp(&y.1));
        prop_assert_eq!(parse(&u.render()), expected);
    }

    /// Applying follows each action's rule on the item before the update, and leaves every
    /// other attribute alone; a refusal changes nothing.
    #[test]
    fn apply_follows_each_actions_rule(u in arb_update(), before in arb_item()) {
        let mut after = before.clone();
        let result = u.apply(&mut after);
        let add_refused = u.actions().iter().any(|act| matches!(act,
            Action::Add(a, _) if before.get(a.name()).is_some_and(|v| !matches!(v, AttrValue::N(_)))));
        prop_assert_eq!(result.is_err(), add_refused);
        if add_refused {
            prop_assert_eq!(after, before);
            return Ok(());
        }
        for name in ["a", "b", "c", "d", "e"] {
            let old = before.get(name).cloned();
            let expected = match u.actions().iter().find(|act| act.attr().name() == name) {
                None => old,
                Some(Action::Set(_, v)) => Some(v.value.clone()),
                Some(Action::SetIfNotExists(_, v)) => old.or(Some(v.value.clone())),
                Some(Action::Remove(_)) => None,
                Some(Action::Add(_, v)) => {
                    let base = old.and_then(|o| o.as_n().map(|n| n.parse::<u64>().unwrap())).unwrap_or(0);
                    let add: u64 = v.value.as_n().unwrap().parse().unwrap();
                    Some(AttrValue::n(base + add))
                }
            };
            prop_assert_eq!(after.get(name).cloned(), expected, "{}", name);
        }
    }
}
