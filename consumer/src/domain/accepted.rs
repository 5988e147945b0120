//! An accepted event as the hot path keeps it: its group interned per batch
//! ([`super::intern`]), a generated id as its three numbers (no string), the billing second.
//! [`Accepted::to_verified`] gives the owned [`VerifiedEvent`] (for the billing archive).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use awsmp_contract::event_id::{GeneratedId, ID_LANES};
use awsmp_contract::row::Tag;

use super::dedup::IdForm;
use super::intern::Group;
use super::verify::{Kind, VerifiedEvent};

/// An event id: generated (`p:{epoch}:{lane}:{seq}`, kept as its numbers) or caller-supplied.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventId {
    /// A generated id, in exactly the form [`GeneratedId::parse`] accepts (so its string form
    /// parses back to it).
    Generated(GeneratedId),
    /// Any other id.
    Supplied(Box<str>),
}

impl EventId {
    /// The id `id` (a string of the generated form is [`EventId::Generated`]).
    pub fn parse(id: &str) -> Self {
        GeneratedId::parse(id).map_or_else(|| Self::Supplied(id.into()), Self::Generated)
    }

    /// A generated id as the v2 wire writes it; an id [`GeneratedId::parse`] would not read
    /// back (a lane out of range) is kept as its string, as the v1 path would see it.
    #[inline]
    pub fn generated(id: GeneratedId) -> Self {
        // `Display` writes the epoch as 32 lowercase hex digits and the numbers in canonical
        // decimal, so `parse` reads the string back exactly when these two hold.
        if id.lane < ID_LANES && id.seq > 0 {
            Self::Generated(id)
        } else {
            Self::Supplied(id.to_string().into())
        }
    }

    /// How the id is de-duplicated (the same as [`IdForm::of`] of its string form).
    pub fn form(&self) -> IdForm {
        match self {
            Self::Generated(g) => IdForm::Generated(*g),
            Self::Supplied(_) => IdForm::Supplied,
        }
    }

    /// A caller-supplied id's text (`None` for a generated one).
    pub fn supplied(&self) -> Option<&str> {
        match self {
            Self::Generated(_) => None,
            Self::Supplied(s) => Some(s),
        }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Generated(g) => g.fmt(f),
            Self::Supplied(s) => f.write_str(s),
        }
    }
}

/// An event that passed every check, reduced to what its row, its dedup and its archive need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Its group (license ARN, account, dimension), interned per batch.
    pub group: Group,
    /// The billing second, as epoch seconds.
    pub second: i64,
    /// Quantity (≤ the BatchMeterUsage maximum).
    pub quantity: u64,
    /// Allocations merged by tag set (tags sorted), zero entries dropped; `None` when the event
    /// has none or its quantity is 0.
    pub allocations: Option<BTreeMap<Vec<Tag>, u64>>,
    /// The event id.
    pub event_id: EventId,
    /// The producer id, if any (interned per batch).
    pub producer_id: Option<Arc<str>>,
}

impl Accepted {
    /// Allocated, unallocated, or `None` for zero quantity.
    pub fn kind(&self) -> Option<Kind> {
        Kind::of(self.quantity, self.allocations.is_some())
    }

    /// The owned form.
    pub fn to_verified(&self) -> VerifiedEvent {
        VerifiedEvent {
            license_arn: self.group.license_arn().to_owned(),
            customer_aws_account_id: self.group.customer_aws_account_id().to_owned(),
            dimension: self.group.dimension().to_owned(),
            second: self.second,
            quantity: self.quantity,
            allocations: self.allocations.clone(),
            event_id: self.event_id.to_string(),
            producer_id: self.producer_id.as_deref().map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_the_form_their_string_has() {
        let g = GeneratedId {
            epoch: 7,
            lane: 3,
            seq: 9,
        };
        assert_eq!(EventId::parse(&g.to_string()), EventId::Generated(g));
        assert_eq!(EventId::generated(g), EventId::Generated(g));
        assert_eq!(EventId::generated(g).to_string(), g.to_string());
        // A lane the parser refuses: a supplied id, as its string would be.
        let odd = GeneratedId { lane: 200, ..g };
        assert_eq!(EventId::generated(odd), EventId::parse(&odd.to_string()));
        assert!(matches!(EventId::generated(odd).form(), IdForm::Supplied));
        for (lane, seq) in [(0, 0), (0, 1), (15, u64::MAX), (16, 1), (255, 5)] {
            let id = GeneratedId {
                epoch: u128::MAX,
                lane,
                seq,
            };
            assert_eq!(
                EventId::generated(id),
                EventId::parse(&id.to_string()),
                "{id}"
            );
        }
        assert_eq!(EventId::parse("order-1").supplied(), Some("order-1"));
        assert_eq!(EventId::Generated(g).supplied(), None);
    }
}
