//! The consumer mapping's on-failure destination in the whole simulation
//! (`simulation/src/{esm,destination,poison,redrive}.rs`): a poison batch that fails every
//! retry waits under the template's unbounded retries, and with a finite
//! `MaximumRetryAttempts` is discarded to the destination and re-driven by the operator —
//! billed, or refused with a reason — also when the poison shares the producer's partition key
//! and later records of its lane wrote the same rows before the re-drive (docs/guarantees.md,
//! "Consumer: per-row, per-lane coverage"; half the default sweep's poison schedules do).

use awsmp_simulation::{Setup, run_setup, setup_for};
use chrono::Duration;

/// `seed`'s schedule with its poison batch six minutes in, bisection on, `retries` retries
/// (and no meter-ingest traffic).
fn poisoned(seed: u64, retries: Option<u32>, own_lane: bool) -> Setup {
    let mut setup = setup_for(seed);
    setup.poison_from = Some(setup.start + Duration::minutes(6));
    setup.poison_own_lane = own_lane;
    setup.mapping.bisect = true;
    setup.mapping.max_retry_attempts = retries;
    setup.ingest = false;
    setup
}

#[test]
fn a_discarded_poison_batch_reaches_the_destination_and_is_redriven_and_accounted() {
    let mut redriven = 0;
    for seed in 0..8 {
        let report = run_setup(poisoned(seed, Some(1), true), true);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
        let discarded = report.explored.mapping.get("batches-discarded").copied();
        let text = report.trace.join("\n");
        if discarded.unwrap_or(0) > 0 {
            assert!(text.contains("[batch discarded to the on-failure destination]"));
            assert!(
                text.contains("operator: re-drove"),
                "seed {seed}: no re-drive"
            );
            redriven += 1;
        }
    }
    assert!(
        redriven >= 2,
        "only {redriven} schedules discarded their poison batch"
    );
}

#[test]
fn under_unbounded_retries_the_poison_batch_waits_and_nothing_is_discarded() {
    let report = run_setup(poisoned(1, None, true), false);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.explored.mapping.get("batches-discarded"), None);
    assert!(report.explored.faults.get("poison-batch-failure").copied() > Some(1));
}

#[test]
fn a_redrive_behind_a_later_record_of_its_lane_is_billed_once() {
    // Whether a later record of the poison's lane writes its rows before the re-drive depends
    // on the schedule; some of the first seeds' schedules have one.
    let mut behind = 0;
    for seed in 0..8 {
        let report = run_setup(poisoned(seed, Some(3), false), true);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
        behind += report
            .trace
            .iter()
            .filter(|l| l.contains("operator: re-drove") && !l.contains("(0 row parts behind"))
            .count();
    }
    assert!(
        behind > 0,
        "no re-drive fell behind a later record of its lane: the case is not exercised"
    );
}
