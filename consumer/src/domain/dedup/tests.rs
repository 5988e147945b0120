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
