//! Every deliberately broken variant is caught by the default sweep (feature `mutants`;
//! `scripts/test` runs this with `cargo test --workspace --features awsmp-simulation/mutants
//! --test mutants`).
#![cfg(feature = "mutants")]

use awsmp_aws::mutants::{Mutant, set};
use awsmp_simulation::cli::DEFAULT_SCHEDULES;

/// A seed of the default sweep that catches each mutant: the lowest when it was recorded, as a
/// search in seed order finds it (`scripts/simulate --mutant NAME` prints it as the replay
/// line). Replaying that seed's schedule proves the sweep catches the mutant, since a sweep
/// runs seeds `0..DEFAULT_SCHEDULES` and every schedule replays exactly; it costs one schedule
/// instead of a search through every seed below it (the search took 133 CPU-seconds, most of
/// them on the 289 schedules before `cleanup-unconditional`'s).
const LOWEST_CATCHING_SEED: [(&str, u64); Mutant::ALL.len()] = [
    ("cleanup-unconditional", 289),
    ("dedup-ignores-event-ids", 0),
    ("submitter-forgets-write-back", 0),
    ("expiry-ignores-attempts", 11),
    ("fence-ignores-watermarks", 0),
    ("revisit-drops-contributions", 0),
    ("flush-skips-current-hour", 10),
    ("cleanup-finalizes-open-window", 0),
    ("esm-drops-exhausted-batch", 2),
    ("ingest-skips-dimension-grant", 4),
    ("watermark-before-rows", 74),
    ("expiry-write-pending-only", 37),
    ("expiry-decides-in-flight", 79),
    ("submitter-5xx-proves-unapplied", 23),
    ("submitter-skips-last-hour", 14),
];

/// One test: the active mutant is process-wide, so they run one after the other. Each mutant's
/// recorded seed is replayed; when it no longer catches the mutant (a change to the schedules
/// or the code moved it), the sweep is searched in seed order as a sweep runs it, and the test
/// fails naming every seed to record (a mutant the whole sweep misses fails it too).
#[test]
fn the_default_sweep_catches_every_mutant() {
    let (mut missed, mut moved) = (Vec::new(), Vec::new());
    for (mutant, (name, seed)) in Mutant::ALL.into_iter().zip(LOWEST_CATCHING_SEED) {
        assert_eq!(
            mutant.name(),
            name,
            "LOWEST_CATCHING_SEED follows Mutant::ALL"
        );
        set(Some(mutant));
        let replayed = (seed < DEFAULT_SCHEDULES)
            .then(|| awsmp_simulation::first_failure(seed, 1))
            .flatten();
        match replayed.or_else(|| awsmp_simulation::first_failure(0, DEFAULT_SCHEDULES)) {
            Some(r) => {
                eprintln!("{name}: caught by seed {}: {}", r.seed, r.violations[0]);
                if r.seed != seed {
                    moved.push(format!("(\"{name}\", {})", r.seed));
                }
            }
            None => missed.push(name),
        }
    }
    set(None);
    assert!(missed.is_empty(), "mutants the sweep missed: {missed:?}");
    assert!(
        moved.is_empty(),
        "the sweep catches every mutant, but these seeds moved; record them in \
         LOWEST_CATCHING_SEED: {}",
        moved.join(", ")
    );
    assert!(
        awsmp_simulation::first_failure(0, 20).is_none(),
        "the real code fails"
    );
}

/// The command line's verdict and replay line on a mutant. Two schedules: seed 0 already
/// catches this mutant (the test above shows which seed catches each), and a sweep runs every
/// schedule it is given (100 took a minute of CPU, half this binary's).
#[test]
fn the_binary_exits_non_zero_on_a_mutant() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_awsmp-simulate"))
        .args([
            "--mutant",
            "submitter-forgets-write-back",
            "--schedules",
            "2",
        ])
        .output()
        .expect("awsmp-simulate runs");
    assert!(!out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("replay: scripts/simulate --mutant submitter-forgets-write-back --seed"),
        "{text}"
    );
}
