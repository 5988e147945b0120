//! Every deliberately broken variant is caught by the default sweep (feature `mutants`;
//! `scripts/test` runs this with `cargo test -p awsmp-simulation --features mutants`).
#![cfg(feature = "mutants")]

use awsmp_aws::mutants::{Mutant, set};
use awsmp_simulation::cli::DEFAULT_SCHEDULES;

/// One test: the active mutant is process-wide, so they run one after the other.
#[test]
fn the_default_sweep_catches_every_mutant() {
    let mut missed = Vec::new();
    for mutant in Mutant::ALL {
        set(Some(mutant));
        match awsmp_simulation::first_failure(0, DEFAULT_SCHEDULES) {
            Some(r) => eprintln!(
                "{}: caught by seed {}: {}",
                mutant.name(),
                r.seed,
                r.violations[0]
            ),
            None => missed.push(mutant.name()),
        }
    }
    set(None);
    assert!(missed.is_empty(), "mutants the sweep missed: {missed:?}");
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
