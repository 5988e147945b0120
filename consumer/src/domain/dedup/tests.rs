use super::*;

fn claims(owner: &str, seqs: impl IntoIterator<Item = u64>) -> Vec<(String, u64)> {
    seqs.into_iter().map(|s| (owner.to_owned(), s)).collect()
}

#[test]
fn reordered_and_gapped_sequences_are_applied_once() {
    let mut lane = LaneState::default();
    assert!(
        lane.claim(&claims("a", [3, 1, 5]))
            .iter()
            .all(|v| *v == Verdict::New)
    );
    assert_eq!(
        lane.claim(&claims("b", [2, 3, 4, 5, 6])),
        [
            Verdict::New,
            Verdict::Duplicate,
            Verdict::New,
            Verdict::Duplicate,
            Verdict::New
        ]
    );
    assert_eq!(lane.claim(&claims("a", [1, 3, 5])), [Verdict::Replay; 3]);
    assert_eq!(lane.claim(&claims("b", [2, 4, 6])), [Verdict::Replay; 3]);
}

#[test]
fn a_sequence_twice_in_one_claim_is_a_duplicate_also_on_replay() {
    let mut lane = LaneState::default();
    assert_eq!(
        lane.claim(&claims("a", [7, 7])),
        [Verdict::New, Verdict::Duplicate]
    );
    assert_eq!(
        lane.claim(&claims("a", [7, 7])),
        [Verdict::Replay, Verdict::Duplicate]
    );
}

#[test]
fn the_stored_form_round_trips() {
    let mut lane = LaneState::default();
    lane.claim(&claims("a", 1..=10));
    lane.claim(&claims("b", [12, 14]));
    let back = LaneState::decode(&lane.encode()).unwrap();
    assert_eq!(back, lane);
    assert_eq!(back.ranges(), 3);
    for bad in ["", "x|", "1|2-1", "1|1-3,2-4", "1|1-2@3", "1|a-b"] {
        assert!(LaneState::decode(bad).is_err(), "{bad}");
    }
}

#[test]
fn old_owners_are_forgotten_and_the_state_stays_bounded() {
    let mut lane = LaneState::default();
    // Every second sequence, one record each: gaps everywhere.
    for k in 0..(MAX_LANE_RANGES as u64 + 100) {
        lane.claim(&claims(&format!("r{k}"), [2 * k + 1]));
    }
    assert!(lane.ranges() <= MAX_LANE_RANGES);
    // The newest record still replays; the oldest is remembered only as applied.
    let k = MAX_LANE_RANGES as u64 + 99;
    assert_eq!(
        lane.claim(&claims(&format!("r{k}"), [2 * k + 1])),
        [Verdict::Replay]
    );
    assert_eq!(lane.claim(&claims("r0", [1])), [Verdict::Duplicate]);
    assert!(lane.encode().len() < 300 * 1024);
}

#[test]
fn id_forms() {
    assert_eq!(IdForm::of("order-17"), IdForm::Supplied);
    let id = GeneratedId {
        epoch: 1,
        lane: 2,
        seq: 3,
    };
    assert_eq!(IdForm::of(&id.to_string()), IdForm::Generated(id));
    assert_eq!(lane_key(&id), format!("seq:{:032x}:2", 1));
    assert_eq!(id_claim_key("order-17"), "evt:order-17");
}

/// A replay renews its owner: a checkpoint resume of a batch larger than the owner list
/// re-claims the failed record at its head together with the records after it, and the
/// head's next replay is still its own, not a duplicate (the simulation's scale class, with
/// 8 owners kept and batches of 10, lost the head's units before owners were renewed).
#[test]
fn a_replay_renews_its_owner() {
    let mut lane = LaneState::default();
    let batch = |from: u64, to: u64| (from..to).map(|s| (format!("r{s}"), s)).collect::<Vec<_>>();
    assert_eq!(lane.claim_keeping(&batch(0, 10), 8), [Verdict::New; 10]);
    // r5 failed: the batch resumes from it, with five later records.
    assert_eq!(
        lane.claim_keeping(&batch(5, 15), 8)[..5],
        [Verdict::Replay; 5]
    );
    // r9 failed: the batch resumes from it, with four later records.
    assert_eq!(
        lane.claim_keeping(&batch(9, 19), 8)[..6],
        [Verdict::Replay; 6]
    );
    // r9 failed again: still its own.
    assert_eq!(lane.claim_keeping(&batch(9, 10), 8), [Verdict::Replay]);
    assert!(lane.forgotten() > 0, "the oldest owners were forgotten");
}

/// Ownerless ranges that touch are one range; ranges are disjoint and in order.
fn assert_canonical(lane: &LaneState) {
    for pair in lane.ranges.windows(2) {
        assert!(
            pair[0].lo <= pair[0].hi && pair[0].hi < pair[1].lo,
            "{lane:?}"
        );
        assert!(
            !(pair[0].owner.is_none() && pair[1].owner.is_none() && pair[0].hi + 1 == pair[1].lo),
            "touching ownerless ranges left apart: {lane:?}"
        );
    }
}

proptest::proptest! {
    /// Against a model (the set of applied sequences), with owners forgotten after a few
    /// ranges: a sequence never applied is new, one applied is never new again, the last
    /// claim's records still replay, forgotten owners are counted, and every state survives its
    /// stored form.
    #[test]
    fn claims_agree_with_the_set_of_applied_sequences(
        batches in proptest::collection::vec(
            (0u8..6, proptest::collection::vec(0u64..48, 1..8)),
            1..40,
        ),
        owned in 1usize..6,
    ) {
        let mut lane = LaneState::default();
        let mut applied = std::collections::BTreeSet::new();
        for (owner, seqs) in &batches {
            let owner = format!("r{owner}");
            let batch = claims(&owner, seqs.iter().copied());
            let verdicts = lane.claim_keeping(&batch, owned);
            let mut seen = HashSet::new();
            for ((_, seq), verdict) in batch.iter().zip(&verdicts) {
                let first_in_claim = seen.insert(*seq);
                let expected_new = first_in_claim && !applied.contains(seq);
                proptest::prop_assert_eq!(*verdict == Verdict::New, expected_new, "seq {}", seq);
            }
            applied.extend(seqs.iter().copied());
            assert_canonical(&lane);
            proptest::prop_assert_eq!(
                lane.forgotten(),
                lane.ranges.iter().filter(|r| r.owner.is_none()).count()
            );
            proptest::prop_assert_eq!(&LaneState::decode(&lane.encode()).unwrap(), &lane);
            // The newest claim's owner is never the one forgotten: the same claim again is a
            // replay of every sequence it applied or replayed.
            let mut again = lane.clone();
            let replayed = again.claim_keeping(&batch, owned);
            for (verdict, replay) in verdicts.iter().zip(&replayed) {
                if *verdict != Verdict::Duplicate {
                    proptest::prop_assert_eq!(*replay, Verdict::Replay);
                }
            }
        }
    }
}

/// Owners are forgotten exactly past the owner limit: three one-range records with two kept
/// leave one ownerless range, which merges with an ownerless neighbour it touches.
#[test]
fn owners_past_the_limit_are_forgotten_and_touching_ranges_merge() {
    let mut lane = LaneState::default();
    lane.claim_keeping(&claims("a", [1]), 2);
    lane.claim_keeping(&claims("b", [2]), 2);
    assert_eq!(lane.forgotten(), 0, "two owners, two kept");
    lane.claim_keeping(&claims("c", [5]), 2);
    assert_eq!(lane.forgotten(), 1, "the oldest owner forgotten");
    assert_eq!(
        lane.claim_keeping(&claims("a", [1]), 2),
        [Verdict::Duplicate]
    );
    // That claim was the fourth (a duplicate still counts): d's is the fifth.
    lane.claim_keeping(&claims("d", [7]), 2);
    // b's range forgotten too: 1 and 2 touch and are one ownerless range.
    assert_eq!(lane.encode(), "5|1-2,5-5@3@c,7-7@5@d");
    assert_eq!(lane.forgotten(), 1);
}

/// The cap holds exactly at [`MAX_LANE_RANGES`], also when one claim adds several ranges,
/// and it closes the lowest gaps: their sequences count as applied, a higher gap's do not.
#[test]
fn the_range_cap_closes_the_lowest_gaps_exactly() {
    let mut lane = LaneState::default();
    let cap = MAX_LANE_RANGES as u64;
    // Every second sequence, many in one claim: gaps everywhere.
    lane.claim(&claims("a", (0..cap - 1).map(|k| 2 * k + 1)));
    assert_eq!(lane.ranges(), MAX_LANE_RANGES - 1);
    // One claim adding three ranges past the cap.
    lane.claim(&claims("b", (cap - 1..cap + 2).map(|k| 2 * k + 1)));
    assert_eq!(lane.ranges(), MAX_LANE_RANGES);
    assert_eq!(
        lane.forgotten(),
        1,
        "the closed gaps are one ownerless range"
    );
    // Sequences 1..=5 are one range now: 2 and 4 count as applied; a higher gap is new.
    assert_eq!(
        lane.claim(&claims("c", [2, 4, 8])),
        [Verdict::Duplicate, Verdict::Duplicate, Verdict::New]
    );
}

/// An owner limit of 0 keeps the newest claim's owners (as 1 does), and an empty claim on an
/// empty lane is answered with no verdicts.
#[test]
fn an_owner_limit_of_zero_keeps_the_newest_claim() {
    let mut lane = LaneState::default();
    assert!(lane.claim_keeping(&[], 0).is_empty());
    lane.claim_keeping(&claims("a", [1]), 0);
    lane.claim_keeping(&claims("b", [3]), 0);
    assert_eq!(lane.claim_keeping(&claims("b", [3]), 0), [Verdict::Replay]);
    assert_eq!(
        lane.claim_keeping(&claims("a", [1]), 0),
        [Verdict::Duplicate]
    );
}
