//! A group-hour above `BatchMeterUsage`'s `Quantity` maximum
//! (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>):
//! bill the maximum, keep the remainder with its exact quantity (docs/guarantees.md, "No
//! quantity lost to the API's maximum").
//!
//! **Allocations.** The merged allocations are in tag-set order; the billed record takes them in
//! that order until the maximum is reached; the allocation that straddles the maximum is split
//! (the billed part and the remainder carry the same tags); every later allocation is wholly
//! remainder. So per tag set, billed + remainder = merged, and each side sums to its quantity.

use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::row::Allocation;

/// The part of a group-hour above the API maximum: not billed, recorded with reason
/// [`QUANTITY_ABOVE_API_MAXIMUM`](awsmp_contract::reasons::QUANTITY_ABOVE_API_MAXIMUM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    /// Exact quantity above the maximum.
    pub quantity: u64,
    /// The allocations of that quantity (for an allocated group).
    pub allocations: Option<Vec<Allocation>>,
}

/// What a group's total and merged allocations become: the billed quantity (≤
/// [`MAX_USAGE_QUANTITY`]), its allocations, and the remainder, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Quantity to bill.
    pub billed: u64,
    /// Its allocations.
    pub allocations: Option<Vec<Allocation>>,
    /// What does not fit, if anything.
    pub overflow: Option<Overflow>,
}

/// Split `total` (with its merged `allocations`, summing to it) at the API maximum.
pub fn split_at_api_maximum(total: u64, allocations: Option<Vec<Allocation>>) -> Split {
    if total <= MAX_USAGE_QUANTITY {
        return Split {
            billed: total,
            allocations,
            overflow: None,
        };
    }
    let (billed_allocs, rest_allocs) = match allocations {
        None => (None, None),
        Some(list) => {
            let (b, r) = split_allocations(list, MAX_USAGE_QUANTITY);
            (Some(b), Some(r))
        }
    };
    Split {
        billed: MAX_USAGE_QUANTITY,
        allocations: billed_allocs,
        overflow: Some(Overflow {
            quantity: total - MAX_USAGE_QUANTITY,
            allocations: rest_allocs,
        }),
    }
}

fn split_allocations(list: Vec<Allocation>, room: u64) -> (Vec<Allocation>, Vec<Allocation>) {
    let (mut billed, mut rest, mut room) = (Vec::new(), Vec::new(), room);
    for a in list {
        let take = a.quantity.min(room);
        room -= take;
        if take > 0 || a.quantity == 0 {
            billed.push(Allocation {
                quantity: take,
                tags: a.tags.clone(),
            });
        }
        if a.quantity > take {
            rest.push(Allocation {
                quantity: a.quantity - take,
                tags: a.tags,
            });
        }
    }
    (billed, rest)
}
