//! DynamoDB condition expressions as values: one [`Condition`] renders to the
//! `ConditionExpression` string, `ExpressionAttributeNames` and `ExpressionAttributeValues` a
//! DynamoDB adapter sends, and evaluates against an item the way DynamoDB does, so an
//! in-memory twin decides its conditional writes with the very condition its adapter sends.
//!
//! The subset the adapters use: `attribute_exists`, `attribute_not_exists`, `attribute_type`,
//! `begins_with`, `size`, the comparators `=`, `<`, `<=`, `>`, `>=`, and `AND`, `OR`, `NOT`.
//! Evaluation follows DynamoDB's rules
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.OperatorsAndFunctions.html>):
//! a comparison holds only between two values of the same type; numbers compare as numbers,
//! strings by their UTF-8 bytes; a comparison or function on a missing attribute is false
//! (except `attribute_not_exists`). The emulator contract suites run every rendered expression
//! against DynamoDB Local, which is what proves this evaluation agrees with DynamoDB's.

mod eval;
pub(crate) use eval::{Decimal, parse_number};
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;

use crate::row::AttrValue;

/// An item as a condition sees it: attribute name → value (absent = missing).
pub type Item = BTreeMap<String, AttrValue>;

/// An attribute a condition reads: its name, and the `#token` standing for it in the
/// expression (or the bare name, when it needs no placeholder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub(crate) name: String,
    pub(crate) token: Option<String>,
}

impl Attr {
    /// `name`, written bare in the expression.
    pub fn bare(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            token: None,
        }
    }

    /// `name`, written as `token` (`#k`) and sent in `ExpressionAttributeNames`.
    pub fn token(token: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            token: Some(token.into()),
        }
    }

    /// The attribute's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn rendered(&self) -> &str {
        self.token.as_deref().unwrap_or(&self.name)
    }
}

/// A value a condition compares with: its `:token` and the value sent under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub(crate) token: String,
    pub(crate) value: AttrValue,
}

impl Value {
    /// `value`, sent as `token` (`:v`).
    pub fn new(token: impl Into<String>, value: AttrValue) -> Self {
        Self {
            token: token.into(),
            value,
        }
    }

    /// A string value.
    pub fn s(token: impl Into<String>, v: impl Into<String>) -> Self {
        Self::new(token, AttrValue::S(v.into()))
    }

    /// A number value (any decimal DynamoDB accepts, e.g. an integer's `to_string()`).
    pub fn n(token: impl Into<String>, v: impl ToString) -> Self {
        Self::new(token, AttrValue::N(v.to_string()))
    }
}

/// A comparator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `=`
    Eq,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Cmp {
    fn symbol(self) -> &'static str {
        match self {
            Self::Eq => "=",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Ge => ">=",
        }
    }
}

/// The left side of a comparison: an attribute, or `size(attribute)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// The attribute's value.
    Attr(Attr),
    /// `size(attribute)`: a string's UTF-8 length, a list's or map's element count.
    Size(Attr),
}

/// A DynamoDB condition expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `attribute_exists(a)`
    Exists(Attr),
    /// `attribute_not_exists(a)`
    NotExists(Attr),
    /// `attribute_type(a, :t)`, the type code (`S`, `N`, `L`, …) as a string value.
    Type(Attr, Value),
    /// `begins_with(a, :prefix)`
    BeginsWith(Attr, Value),
    /// `operand <cmp> :value`
    Compare(Operand, Cmp, Value),
    /// Every part (rendered joined by `AND`).
    And(Vec<Condition>),
    /// Any part (rendered joined by `OR`).
    Or(Vec<Condition>),
    /// `NOT c`
    Not(Box<Condition>),
}

impl std::ops::Not for Condition {
    type Output = Self;

    /// `NOT self`.
    fn not(self) -> Self {
        Self::Not(Box::new(self))
    }
}

/// A condition as sent: the expression and the names and values it uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// `ConditionExpression`.
    pub expression: String,
    /// `ExpressionAttributeNames` the expression uses (token → attribute name).
    pub names: BTreeMap<String, String>,
    /// `ExpressionAttributeValues` the expression uses (token → value).
    pub values: BTreeMap<String, AttrValue>,
}

impl Condition {
    /// `attribute_exists(a)`.
    pub fn exists(a: Attr) -> Self {
        Self::Exists(a)
    }

    /// `attribute_not_exists(a)`.
    pub fn not_exists(a: Attr) -> Self {
        Self::NotExists(a)
    }

    /// `a <cmp> v`.
    pub fn compare(a: Attr, cmp: Cmp, v: Value) -> Self {
        Self::Compare(Operand::Attr(a), cmp, v)
    }

    /// `a = v`.
    pub fn eq(a: Attr, v: Value) -> Self {
        Self::compare(a, Cmp::Eq, v)
    }

    /// `a < v`.
    pub fn lt(a: Attr, v: Value) -> Self {
        Self::compare(a, Cmp::Lt, v)
    }

    /// `size(a) <cmp> v`.
    pub fn size(a: Attr, cmp: Cmp, v: Value) -> Self {
        Self::Compare(Operand::Size(a), cmp, v)
    }

    /// `attribute_type(a, v)`.
    pub fn has_type(a: Attr, v: Value) -> Self {
        Self::Type(a, v)
    }

    /// `self AND other` (a chain of `AND`s stays one flat list).
    pub fn and(self, other: Condition) -> Self {
        match self {
            Self::And(mut parts) => {
                parts.push(other);
                Self::And(parts)
            }
            first => Self::And(vec![first, other]),
        }
    }

    /// `self OR other` (a chain of `OR`s stays one flat list).
    pub fn or(self, other: Condition) -> Self {
        match self {
            Self::Or(mut parts) => {
                parts.push(other);
                Self::Or(parts)
            }
            first => Self::Or(vec![first, other]),
        }
    }

    /// Every part of `parts` (`AND`); one part is itself.
    pub fn all(parts: impl IntoIterator<Item = Condition>) -> Self {
        let mut parts: Vec<_> = parts.into_iter().collect();
        if parts.len() == 1 {
            parts.remove(0)
        } else {
            Self::And(parts)
        }
    }

    /// Whether the condition holds for `item` (`None`: no item under the key, which DynamoDB
    /// evaluates as an item with no attributes).
    pub fn holds_for(&self, item: Option<&Item>) -> bool {
        let empty = Item::new();
        eval::holds(self, item.unwrap_or(&empty))
    }

    /// The expression, names and values the adapter sends.
    pub fn render(&self) -> Rendered {
        let mut maps = Maps::default();
        let expression = self.render_into(&mut maps);
        Rendered {
            expression,
            names: maps.names,
            values: maps.values,
        }
    }

    /// The expression, its names and values collected into `maps` (shared with the update
    /// expression of the same request, [`crate::update::Update::render_with`]).
    pub(crate) fn render_into(&self, maps: &mut Maps) -> String {
        let (name, value) = (Maps::name, Maps::value);
        match self {
            Self::Exists(a) => format!("attribute_exists({})", name(maps, a)),
            Self::NotExists(a) => format!("attribute_not_exists({})", name(maps, a)),
            Self::Type(a, v) => format!("attribute_type({}, {})", name(maps, a), value(maps, v)),
            Self::BeginsWith(a, v) => {
                format!("begins_with({}, {})", name(maps, a), value(maps, v))
            }
            Self::Compare(Operand::Attr(a), cmp, v) => {
                format!("{} {} {}", name(maps, a), cmp.symbol(), value(maps, v))
            }
            Self::Compare(Operand::Size(a), cmp, v) => {
                format!(
                    "size({}) {} {}",
                    name(maps, a),
                    cmp.symbol(),
                    value(maps, v)
                )
            }
            Self::And(parts) => Self::join(parts, " AND ", maps),
            Self::Or(parts) => Self::join(parts, " OR ", maps),
            Self::Not(c) => {
                let inner = c.render_into(maps);
                if c.is_compound() {
                    format!("NOT ({inner})")
                } else {
                    format!("NOT {inner}")
                }
            }
        }
    }

    /// `parts` joined by `op`; a part that is itself an `AND` or `OR` is parenthesized, so the
    /// string never leans on precedence (`NOT` > `AND` > `OR`).
    fn join(parts: &[Condition], op: &str, maps: &mut Maps) -> String {
        parts
            .iter()
            .map(|p| {
                let s = p.render_into(maps);
                if p.is_compound() && parts.len() > 1 {
                    format!("({s})")
                } else {
                    s
                }
            })
            .collect::<Vec<_>>()
            .join(op)
    }

    fn is_compound(&self) -> bool {
        matches!(self, Self::And(p) | Self::Or(p) if p.len() > 1)
    }
}

/// The `ExpressionAttributeNames` and `ExpressionAttributeValues` of one request, collected
/// while its expressions render. A request sends one map of each for all its expressions, so
/// a token means one thing throughout: a token bound to two different names or values is a
/// bug in the adapter's tokens, caught here in debug builds (DynamoDB would evaluate one of
/// them with the other's value).
#[derive(Debug, Default)]
pub(crate) struct Maps {
    pub(crate) names: BTreeMap<String, String>,
    pub(crate) values: BTreeMap<String, AttrValue>,
}

impl Maps {
    /// `a` as the expression writes it, its `#token` (if any) recorded.
    pub(crate) fn name(&mut self, a: &Attr) -> String {
        if let Some(t) = &a.token {
            let previous = self.names.insert(t.clone(), a.name.clone());
            debug_assert!(
                previous.is_none_or(|p| p == a.name),
                "{t} stands for two attribute names"
            );
        }
        a.rendered().to_owned()
    }

    /// `v`'s `:token`, its value recorded.
    pub(crate) fn value(&mut self, v: &Value) -> String {
        let previous = self.values.insert(v.token.clone(), v.value.clone());
        debug_assert!(
            previous.is_none_or(|p| p == v.value),
            "{} sent with two values",
            v.token
        );
        v.token.clone()
    }
}
