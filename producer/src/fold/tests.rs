//! The window table sums exactly as the test oracle, [`Collapser`], does.

use std::sync::atomic::AtomicUsize;

use chrono::{TimeZone, Utc};
use proptest::prelude::*;

use super::oracle::Collapser;
use super::*;
use crate::partition::partition_key;
use awsmp_contract::event::{Tag, UsageAllocation};

fn event(g: usize, ms: i64, q: u64) -> Event {
    Event::new(
        format!("arn:aws:license-manager::123456789012:license:l-{g:032x}"),
        "123456789012",
        ["requests", "seats"][g % 2],
        q,
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap() + chrono::Duration::milliseconds(ms),
    )
}

/// A comparable view of one output: group, second, producer, quantity, timestamp,
/// allocations, constituents, id.
type View = (String, i64, Option<String>, u64, i64, String, u64, String);

fn view(e: &Event, constituents: u64) -> View {
    (
        e.dimension.clone() + &e.license_arn,
        e.timestamp.timestamp(),
        e.producer_id.clone(),
        e.quantity,
        e.timestamp.timestamp_millis(),
        format!("{:?}", e.usage_allocations),
        constituents,
        e.event_id.clone(),
    )
}

proptest! {
    /// Same events in, same sums out (quantities, allocations by tag set, earliest
    /// timestamps, producer ids, constituents; no ids), whatever the mix of groups, seconds, kinds and
    /// producers, including sums that fill up on quantity overflow.
    #[test]
    fn the_table_sums_as_the_collapser(
        raw in prop::collection::vec((0usize..5, 0i64..2_500, 0u64..1_000, 0usize..4, any::<bool>()), 1..300),
        huge in any::<bool>(),
    ) {
        let table = FoldTable::new(Counted::default());
        let staged = AtomicUsize::new(0);
        let mut reference: Collapser = Collapser::new();
        for (i, (g, ms, q, kind, own_producer)) in raw.into_iter().enumerate() {
            let q = if huge && i % 7 == 0 { u64::MAX - q } else { q };
            let mut e = event(g, ms, q);
            if kind >= 2 {
                let a = q / 2;
                let tags = vec![Tag::new("team", format!("t{}", kind % 2)), Tag::new("env", "prod")];
                let mut rev = tags.clone();
                rev.reverse();
                e = e.with_allocations(vec![
                    UsageAllocation::new(a, if i % 2 == 0 { tags } else { rev }),
                    UsageAllocation::new(q - a, vec![Tag::new("team", "other")]),
                ]);
            }
            if own_producer {
                e = e.with_producer_id("own");
            }
            // Some events come with their group's cached key (found by it), some without.
            let keyed = (i % 3 != 0).then(|| {
                crate::key_cache::keyed_group(&e.license_arn, &e.customer_aws_account_id, &e.dimension)
            });
            prop_assert!(table.add(e.clone(), Some("default"), 100, 50, &staged, keyed).is_ok());
            if e.producer_id.is_none() {
                e.producer_id = Some("default".into());
            }
            let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
            reference.add(e, pk, 50);
        }
        let mut folded = Vec::new();
        table.drain(false, &staged, |f| folded.push(f));
        let mut got = Vec::new();
        for f in folded {
            prop_assert_eq!(&f.event.event_id, "", "a sum is named when its window closes");
            got.push(view(&f.event, f.constituents));
        }
        prop_assert_eq!(staged.load(Ordering::SeqCst), 0, "every byte taken");
        let mut want: Vec<View> = reference
            .drain()
            .iter()
            .map(|c| view(&c.event, c.constituents as u64))
            .collect();
        got.sort();
        want.sort();
        prop_assert_eq!(got, want);
    }
}

/// One step of [`slots_change_nothing`]: an event of group `g` at `ms` — through slot
/// `slot` when one is used, or straight to the table's checked path (`add`) — or a drain of
/// the window.
type Step = (usize, usize, i64, u64, u8);

/// Runs `steps` against a table, with bound handles' slots (two per group) or without; what
/// each drain gives: the sums in order, with their constituents' bookkeeping.
fn run_steps(steps: &[Step], huge: bool, with_slots: bool) -> Vec<Vec<(View, u64, usize)>> {
    let table = FoldTable::new(Counted::default());
    let staged = AtomicUsize::new(0);
    let slots: Vec<Arc<FoldSlot>> = (0..6).map(|_| Arc::default()).collect();
    let mut drains = Vec::new();
    let drain = |table: &FoldTable, drains: &mut Vec<_>| {
        let mut out = Vec::new();
        table.drain(false, &staged, |f| {
            out.push((view(&f.event, f.constituents), f.constituents, f.bytes));
        });
        drains.push(out);
    };
    for (i, &(g, which, ms, q, kind)) in steps.iter().enumerate() {
        let q = if huge && i % 5 == 0 { u64::MAX - q } else { q };
        if kind == 0 {
            drain(&table, &mut drains);
            continue;
        }
        let e = event(g, ms, q);
        if kind != 1 {
            let slot = (with_slots && which < 2).then(|| &slots[g * 2 + which]);
            let ts = e.timestamp;
            // The slot takes the caller's timestamp as given: within its millisecond.
            let given = ts + chrono::Duration::nanoseconds((i as i64 * 7_919) % 1_000_000);
            if slot.is_some_and(|s| s.try_add(given, q)) {
                continue;
            }
            let key = FoldKey::new(&e, Some("default"));
            match table.absorb(&key, q, ts, slot) {
                Absorbed::Yes => continue,
                Absorbed::No => {}
                Absorbed::Sealed => unreachable!("never sealed here"),
            }
        }
        assert!(table.add(e, Some("default"), 10, 5, &staged, None).is_ok());
    }
    drain(&table, &mut drains);
    drains
}

proptest! {
    /// Bound handles' slots change no sum: the same drains (sums in the same order, the same
    /// quantities, earliest timestamps, constituents and bytes) whether the plain events go
    /// through slots or through the table — with several handles per group, the table's
    /// checked path mixed in, quantity overflow, and windows closing in between.
    #[test]
    fn slots_change_nothing(
        steps in prop::collection::vec((0usize..3, 0usize..3, 0i64..2_500, 0u64..1_000, 0u8..8), 1..300),
        huge in any::<bool>(),
    ) {
        prop_assert_eq!(run_steps(&steps, huge, true), run_steps(&steps, huge, false));
    }
}

#[test]
fn sums_count_their_constituents_and_a_sealed_table_refuses() {
    let table = FoldTable::new(Counted::default());
    let staged = AtomicUsize::new(0);
    for i in 0..5 {
        assert!(
            table
                .add(event(1, i, 2), None, 10, 5, &staged, None)
                .is_ok()
        );
    }
    table
        .add(event(2, 0, 3), None, 10, 5, &staged, None)
        .unwrap();
    let mut out = Vec::new();
    table.drain(true, &staged, |f| out.push(f));
    out.sort_by_key(|f| f.event.quantity);
    let seen: Vec<(u64, u64, &str, usize)> = out
        .iter()
        .map(|f| {
            (
                f.event.quantity,
                f.constituents,
                f.event.event_id.as_str(),
                f.bytes,
            )
        })
        .collect();
    assert_eq!(seen, vec![(3, 1, "", 10), (10, 5, "", 50)]);
    assert_eq!(staged.load(Ordering::SeqCst), 0);
    let back = table.add(event(1, 0, 1), None, 10, 5, &staged, None);
    assert_eq!(
        back.unwrap_err().quantity,
        1,
        "sealed: the event comes back"
    );
    assert_eq!(
        staged.load(Ordering::SeqCst),
        0,
        "a refused event is not counted"
    );
}

/// A slot takes the events of its sum's UTC second only — a leap second among them, as
/// `timestamp()` counts it — and keeps the earliest in whole milliseconds.
#[test]
fn a_slot_takes_its_second_and_truncates_the_earliest() {
    let table = FoldTable::new(Counted::default());
    let staged = AtomicUsize::new(0);
    let slot: Arc<FoldSlot> = Arc::default();
    let day = chrono::NaiveDate::from_ymd_opt(2016, 12, 31).unwrap();
    let at = |h, m, s, nanos| day.and_hms_nano_opt(h, m, s, nanos).unwrap().and_utc();
    let mut e = event(0, 0, 5);
    e.timestamp = at(23, 59, 59, 800_000_000);
    let key = FoldKey::new(&e, Some("default"));
    assert!(
        table
            .add(e.clone(), Some("default"), 10, 5, &staged, None)
            .is_ok()
    );
    assert_eq!(
        table.absorb(&key, 1, e.timestamp, Some(&slot)),
        Absorbed::Yes
    );
    // The leap second 23:59:60 is second 23:59:59's, as `timestamp()` has it.
    let leap = at(23, 59, 59, 1_250_000_000);
    assert_eq!(leap.timestamp(), e.timestamp.timestamp());
    assert!(slot.try_add(leap, 2));
    assert!(slot.try_add(at(23, 59, 59, 123_456_789), 3));
    assert!(
        !slot.try_add(at(23, 59, 58, 999_999_999), 4),
        "the second before"
    );
    assert!(
        !slot.try_add(at(0, 0, 0, 0) + chrono::Duration::days(1), 4),
        "the next day"
    );
    assert!(!slot.try_add(at(23, 59, 59, 0), u64::MAX), "overflow");
    let mut sums = Vec::new();
    table.drain(false, &staged, |f| sums.push(f));
    assert_eq!(sums.len(), 1);
    assert_eq!(sums[0].event.quantity, 11);
    assert_eq!(sums[0].constituents, 4);
    assert_eq!(sums[0].event.timestamp, at(23, 59, 59, 123_000_000));
}

/// An event with allocations joins its open allocated sum from its parts, charged: no open
/// sum (or only its group's sum without allocations) is `No` with nothing changed, a sum
/// that would overflow is `No`, a sealed table is `Sealed`; what joined is what
/// [`FoldTable::add`] would have summed.
#[test]
fn an_allocated_event_joins_its_open_sum_charged() {
    let table = FoldTable::new(Counted::default());
    let staged = AtomicUsize::new(0);
    let tagged = |n: u64, team: &str| vec![UsageAllocation::new(n, vec![Tag::new("team", team)])];
    let opener = event(3, 400, 5).with_allocations(tagged(5, "a"));
    let key = FoldKey::new(&opener, Some("default"));
    let at = opener.timestamp;
    let join = |q: u64, team: &str, bytes: usize| {
        table.absorb_allocated(&key, q, &tagged(q, team), at, bytes, &staged)
    };
    assert_eq!(join(2, "a", 10), Err(Absorbed::No), "no open sum");
    // The group's sum without allocations is another sum.
    table
        .add(event(3, 400, 1), Some("default"), 10, 5, &staged, None)
        .unwrap();
    assert_eq!(
        join(2, "a", 10),
        Err(Absorbed::No),
        "not the sum without allocations"
    );
    assert_eq!(
        staged.load(Ordering::SeqCst),
        10,
        "nothing counted for a refusal"
    );
    table
        .add(opener.clone(), Some("default"), 10, 5, &staged, None)
        .unwrap();
    assert_eq!(join(2, "a", 10), Ok(20));
    assert_eq!(join(7, "b", 10), Ok(30));
    assert_eq!(
        join(u64::MAX, "a", 10),
        Err(Absorbed::No),
        "an overflow opens another sum"
    );
    let earlier = at - chrono::Duration::milliseconds(100);
    assert_eq!(
        table.absorb_allocated(&key, 1, &tagged(1, "b"), earlier, 10, &staged),
        Ok(40)
    );
    let mut sums = Vec::new();
    table.drain(true, &staged, |f| sums.push(f));
    let allocated: Vec<&Folded> = sums
        .iter()
        .filter(|f| f.event.usage_allocations.is_some())
        .collect();
    assert_eq!(allocated.len(), 1);
    let sum = allocated[0];
    assert_eq!(
        (sum.event.quantity, sum.constituents, sum.bytes),
        (15, 4, 40)
    );
    assert_eq!(sum.event.timestamp, earlier);
    let by_team: Vec<(&str, u64)> = sum
        .event
        .usage_allocations
        .iter()
        .flatten()
        .map(|a| (a.tags[0].value.as_str(), a.allocated_usage_quantity))
        .collect();
    assert_eq!(by_team, vec![("a", 7), ("b", 8)]);
    assert_eq!(staged.load(Ordering::SeqCst), 0);
    assert_eq!(join(2, "a", 10), Err(Absorbed::Sealed));
    assert_eq!(staged.load(Ordering::SeqCst), 0);
}

/// A bound handle's event its slot missed: it opens its sum charged (the charge taken only to
/// open) with the slot attached at once, joins an open sum at no charge, opens another when
/// the sum would overflow, and comes back without buffer space or once sealed.
#[test]
fn join_or_open_opens_charged_or_joins_free_with_the_slot_attached() {
    let table = FoldTable::new(Counted::default());
    let staged = AtomicUsize::new(0);
    let slot: Arc<FoldSlot> = Arc::default();
    let mut template = event(5, 300, 4);
    template.producer_id = Some("default".into());
    let keyed = crate::key_cache::keyed_group(
        &template.license_arn,
        &template.customer_aws_account_id,
        &template.dimension,
    );
    let key = FoldKey::new(&template, Some("default")).from(Some(&keyed.0));
    let at = template.timestamp;
    let charges = std::cell::Cell::new(0);
    let join = |q: u64, space: bool| {
        let mut t = template.clone();
        t.quantity = q;
        let charged = Charged {
            bytes: 10,
            payload_len: 5,
            keyed: Some(keyed.clone()),
            head: None,
        };
        table.join_or_open(&key, q, at, &slot, t, charged, &staged, || {
            charges.set(charges.get() + 1);
            space
        })
    };
    assert!(matches!(join(4, false), Joined::NoSpace(t) if t.quantity == 4));
    assert_eq!((charges.get(), staged.load(Ordering::SeqCst)), (1, 0));
    assert!(matches!(join(4, true), Joined::Opened(0)));
    assert_eq!(staged.load(Ordering::SeqCst), 10);
    // The slot is attached: the handle's next event of the second goes there.
    assert!(slot.try_add(at, 1));
    // The slot missed (say, a thread raced it): the open sum takes the event, free.
    assert!(matches!(join(2, true), Joined::Absorbed(_)));
    assert_eq!((charges.get(), staged.load(Ordering::SeqCst)), (2, 10));
    assert!(slot.try_add(at, 3), "attached again");
    // An overflow opens the key's next sum, charged.
    assert!(matches!(join(u64::MAX, true), Joined::Opened(10)));
    assert_eq!(staged.load(Ordering::SeqCst), 20);
    let mut sums = Vec::new();
    table.drain(true, &staged, |f| sums.push(f));
    let seen: Vec<(u64, u64, usize)> = sums
        .iter()
        .map(|f| (f.event.quantity, f.constituents, f.bytes))
        .collect();
    assert_eq!(seen, vec![(10, 4, 10), (u64::MAX, 1, 10)]);
    assert_eq!(staged.load(Ordering::SeqCst), 0);
    assert!(matches!(join(1, true), Joined::Sealed(_)));
    assert_eq!(staged.load(Ordering::SeqCst), 0);
}

/// A bound handle's whole template, its shared fields and the table's key for them.
fn hollow_setup() -> (Event, Arc<GroupFields>, (Arc<str>, u128), GroupHash) {
    let whole = {
        let mut e = event(5, 300, 4);
        e.producer_id = Some("default".into());
        e
    };
    let fields = Arc::new(GroupFields {
        license_arn: whole.license_arn.clone(),
        customer_aws_account_id: whole.customer_aws_account_id.clone(),
        dimension: whole.dimension.clone(),
        producer_id: whole.producer_id.clone(),
    });
    let meter_pk = crate::key_cache::keyed_group(
        &whole.license_arn,
        &whole.customer_aws_account_id,
        &whole.dimension,
    );
    let pre = GroupHash::new(whole.group(), Some("default"));
    (whole, fields, meter_pk, pre)
}

/// A bound handle's sum with a hollow template (its group and producer id shared through the
/// head, [`GroupFields`]) is found by its fields: an event of its group from another origin
/// (a thread's key cache, or none) joins it, and a key of another group under the same hash
/// does not. Drained, it is still hollow, and its fields fill it in to the whole sum.
#[test]
fn a_hollow_sum_is_found_by_its_shared_fields() {
    let table = FoldTable::new(Counted::default());
    let staged = AtomicUsize::new(0);
    let slot: Arc<FoldSlot> = Arc::default();
    let (whole, fields, meter_pk, pre) = hollow_setup();
    let second = whole.timestamp.timestamp();
    let key =
        FoldKey::with(pre, fields.group(), Some("default"), second, false).from(Some(&meter_pk.0));
    let charged = Charged {
        bytes: 10,
        payload_len: 5,
        keyed: Some(meter_pk.clone()),
        head: Some(SumHead {
            bytes: Arc::from(&b"head"[..]),
            epoch: 7,
            split: None,
            fields: Some(fields.clone()),
        }),
    };
    let hollow = GroupFields::hollow(4, whole.timestamp);
    let opened = table.join_or_open(
        &key,
        4,
        whole.timestamp,
        &slot,
        hollow,
        charged,
        &staged,
        || true,
    );
    assert!(matches!(opened, Joined::Opened(0)));

    // Another group whose key hashes as this group's (its pre-hash borrowed): its strings
    // differ from the shared fields, so it does not join.
    let other = event(6, 300, 1);
    let collides = FoldKey::with(pre, other.group(), Some("default"), second, false);
    assert_eq!(
        table.absorb(&collides, 1, other.timestamp, None),
        Absorbed::No
    );
    // The same group from no origin: compared by the shared fields, it joins.
    let mut same = whole.clone();
    same.producer_id = None;
    let plain = FoldKey::new(&same, Some("default"));
    assert_eq!(table.absorb(&plain, 2, same.timestamp, None), Absorbed::Yes);
    // A producer id other than the shared one does not.
    let elsewhere = FoldKey::new(&same, Some("elsewhere"));
    assert_eq!(
        table.absorb(&elsewhere, 2, same.timestamp, None),
        Absorbed::No
    );

    let mut sums = Vec::new();
    table.drain(true, &staged, |f| sums.push(f));
    assert_eq!(sums.len(), 1);
    let f = sums.pop().expect("one sum");
    assert_eq!((f.event.quantity, f.constituents), (6, 2));
    assert!(
        f.event.license_arn.is_empty() && f.event.producer_id.is_none(),
        "still hollow"
    );
    let shared = f
        .head
        .as_ref()
        .and_then(|h| h.fields.clone())
        .expect("its fields");
    assert!(Arc::ptr_eq(&shared, &fields));
    let mut filled = f.event;
    shared.fill(&mut filled);
    let mut expected = whole;
    expected.quantity = 6;
    assert_eq!(filled, expected);
}
