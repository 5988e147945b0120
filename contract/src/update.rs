//! DynamoDB update expressions as values: one [`Update`] renders to the `UpdateExpression`
//! string and the `ExpressionAttributeNames` / `ExpressionAttributeValues` a DynamoDB adapter
//! sends (merged with its write's [`Condition`], [`Update::render_with`]), and applies to an
//! item the way DynamoDB does ([`Update::apply`]), so an in-memory twin changes its stored
//! attributes with the very update its adapter sends.
//!
//! The subset the adapters use: `SET a = :v`, `SET a = if_not_exists(a, :v)`, `REMOVE a` and
//! `ADD a :n` on numbers. Applying follows DynamoDB's rules
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html>):
//! every action reads the item as it was before the update (so the order of actions does not
//! matter, and two actions may not touch one attribute); `if_not_exists` keeps a value already
//! there; `REMOVE` of a missing attribute does nothing; `ADD` to a missing number starts from
//! 0, adds exactly (decimal, no float rounding), and is refused on a value that is not a
//! number. Each clause keyword appears once, clauses in the order their first action was
//! added, actions in the order added. Like conditions, the emulator contract suites run every
//! rendered update against DynamoDB Local, which is what proves this application agrees.

mod number;
#[cfg(test)]
mod tests;

use crate::DomainError;
use crate::condition::{Attr, Condition, Item, Maps, Value};
use crate::row::AttrValue;
use std::collections::BTreeMap;

/// One action of an update expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `SET a = :v`
    Set(Attr, Value),
    /// `SET a = if_not_exists(a, :v)`
    SetIfNotExists(Attr, Value),
    /// `REMOVE a`
    Remove(Attr),
    /// `ADD a :n` (a number)
    Add(Attr, Value),
}

impl Action {
    fn attr(&self) -> &Attr {
        match self {
            Self::Set(a, _) | Self::SetIfNotExists(a, _) | Self::Remove(a) | Self::Add(a, _) => a,
        }
    }

    fn clause(&self) -> Clause {
        match self {
            Self::Set(..) | Self::SetIfNotExists(..) => Clause::Set,
            Self::Remove(_) => Clause::Remove,
            Self::Add(..) => Clause::Add,
        }
    }

    fn render(&self, maps: &mut Maps) -> String {
        match self {
            Self::Set(a, v) => format!("{} = {}", maps.name(a), maps.value(v)),
            Self::SetIfNotExists(a, v) => {
                let a = maps.name(a);
                format!("{a} = if_not_exists({a}, {})", maps.value(v))
            }
            Self::Remove(a) => maps.name(a),
            Self::Add(a, v) => format!("{} {}", maps.name(a), maps.value(v)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clause {
    Set,
    Remove,
    Add,
}

impl Clause {
    fn keyword(self) -> &'static str {
        match self {
            Self::Set => "SET",
            Self::Remove => "REMOVE",
            Self::Add => "ADD",
        }
    }
}

/// A DynamoDB update expression: its actions, in the order added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    actions: Vec<Action>,
}

/// An update as sent: the `UpdateExpression`, the write's `ConditionExpression` if it has one,
/// and the names and values both use, in one map each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderedUpdate {
    /// `UpdateExpression`.
    pub expression: String,
    /// `ConditionExpression`, when rendered with a condition.
    pub condition: Option<String>,
    /// `ExpressionAttributeNames` the expressions use (token → attribute name).
    pub names: BTreeMap<String, String>,
    /// `ExpressionAttributeValues` the expressions use (token → value).
    pub values: BTreeMap<String, AttrValue>,
}

impl Update {
    /// An update with no action yet (DynamoDB refuses an empty one: add at least one).
    pub fn new() -> Self {
        Self::default()
    }

    fn with(mut self, action: Action) -> Self {
        debug_assert!(
            self.actions
                .iter()
                .all(|a| a.attr().name() != action.attr().name()),
            "two actions on {}",
            action.attr().name()
        );
        self.actions.push(action);
        self
    }

    /// `SET a = v`.
    pub fn set(self, a: Attr, v: Value) -> Self {
        self.with(Action::Set(a, v))
    }

    /// `SET a = if_not_exists(a, v)`: `v` only where `a` is missing.
    pub fn set_if_not_exists(self, a: Attr, v: Value) -> Self {
        self.with(Action::SetIfNotExists(a, v))
    }

    /// `REMOVE a`.
    pub fn remove(self, a: Attr) -> Self {
        self.with(Action::Remove(a))
    }

    /// `ADD a n`: `a` (0 when missing) plus the number `n`.
    pub fn add(self, a: Attr, n: Value) -> Self {
        self.with(Action::Add(a, n))
    }

    /// The actions, in the order added.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// The expression, names and values the adapter sends for an unconditional update.
    pub fn render(&self) -> RenderedUpdate {
        self.render_parts(None)
    }

    /// The update and `condition` as one request sends them: both expressions, and one map of
    /// names and one of values for both (a token bound twice to different values is caught in
    /// debug builds).
    pub fn render_with(&self, condition: &Condition) -> RenderedUpdate {
        self.render_parts(Some(condition))
    }

    fn render_parts(&self, condition: Option<&Condition>) -> RenderedUpdate {
        let mut maps = Maps::default();
        let condition = condition.map(|c| c.render_into(&mut maps));
        let mut clauses: Vec<(Clause, Vec<String>)> = Vec::new();
        for action in &self.actions {
            let rendered = action.render(&mut maps);
            match clauses.iter_mut().find(|(c, _)| *c == action.clause()) {
                Some((_, parts)) => parts.push(rendered),
                None => clauses.push((action.clause(), vec![rendered])),
            }
        }
        let expression = clauses
            .iter()
            .map(|(c, parts)| format!("{} {}", c.keyword(), parts.join(", ")))
            .collect::<Vec<_>>()
            .join(" ");
        RenderedUpdate {
            expression,
            condition,
            names: maps.names,
            values: maps.values,
        }
    }

    /// Change `item` as DynamoDB does for this update: all or nothing, every action reading
    /// the item as it was before. Refused, leaving `item` unchanged, where DynamoDB answers
    /// `ValidationException`: two actions on one attribute, `ADD` of a value that is not a
    /// number or to an attribute that is not one, a sum of more than 38 significant digits.
    pub fn apply(&self, item: &mut Item) -> Result<(), DomainError> {
        for (i, action) in self.actions.iter().enumerate() {
            let name = action.attr().name();
            if self.actions[..i].iter().any(|a| a.attr().name() == name) {
                return Err(DomainError::InvalidUpdate(format!("two actions on {name}")));
            }
        }
        // Every sum first, from the item before the update: nothing changes if one fails.
        let mut sums = Vec::new();
        for action in &self.actions {
            if let Action::Add(a, n) = action {
                sums.push(sum(item.get(a.name()), &n.value, a.name())?);
            }
        }
        let mut sums = sums.into_iter();
        for action in &self.actions {
            match action {
                Action::Set(a, v) => {
                    item.insert(a.name().to_owned(), v.value.clone());
                }
                Action::SetIfNotExists(a, v) => {
                    if !item.contains_key(a.name()) {
                        item.insert(a.name().to_owned(), v.value.clone());
                    }
                }
                Action::Remove(a) => {
                    item.remove(a.name());
                }
                Action::Add(a, _) => {
                    let total = sums.next().expect("one sum per ADD");
                    item.insert(a.name().to_owned(), AttrValue::N(total));
                }
            }
        }
        Ok(())
    }
}

/// `ADD`'s result for an attribute holding `current` (`None`: missing, so 0).
fn sum(current: Option<&AttrValue>, add: &AttrValue, name: &str) -> Result<String, DomainError> {
    let invalid = |what: &str| DomainError::InvalidUpdate(format!("ADD {name}: {what}"));
    let AttrValue::N(add) = add else {
        return Err(invalid("the operand is not a number"));
    };
    let current = match current {
        None => "0",
        Some(AttrValue::N(n)) => n,
        Some(_) => return Err(invalid("the stored value is not a number")),
    };
    number::add(current, add).map_err(invalid)
}
