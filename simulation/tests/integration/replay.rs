//! A seed replays its schedule byte for byte (docs/simulation.md, "Running and replaying").

#[test]
fn a_seed_replays_the_same_trace() {
    for seed in [0, 7, 33, 63, 1234] {
        let a = awsmp_simulation::run(seed, true);
        let b = awsmp_simulation::run(seed, true);
        assert!(a.trace.len() > 20, "seed {seed}: trace too short");
        assert_eq!(a.trace, b.trace, "seed {seed} did not replay");
        assert_eq!(a.violations, b.violations);
        assert_eq!(a.explored, b.explored);
    }
    let (x, y) = (
        awsmp_simulation::run(1, true),
        awsmp_simulation::run(2, true),
    );
    assert_ne!(x.trace, y.trace, "two seeds, one schedule");
}

/// Seeds of the default sweep that replayed as one of two traces (576 and 951 did too, and
/// take seconds a run): the consumer looked up finalized groups one by one after a lookup of
/// several failed, in a hash set's order (seeded per set, so two runs in one process differed
/// too), and a clock move, a timeout or a crash met another lookup. Seed 514 parted at the
/// step after its deprovisioning.
const ONCE_TWO_TRACES: [u64; 2] = [514, 890];
/// Runs of each: a set of two groups kept its order in half the runs.
const RUNS: usize = 6;
/// Seeds of the default sweep whose consumer looks up groups one by one, the quick ones among
/// the lowest, each run twice.
const LOOKED_UP_ONE_BY_ONE: [u64; 12] = [3, 4, 20, 24, 26, 28, 62, 81, 83, 92, 97, 109];

/// Where two traces part: the first line that differs, from each.
fn parting(a: &[String], b: &[String]) -> Option<String> {
    let n = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    (a.len() != b.len() || n < a.len()).then(|| {
        let line = |t: &[String]| t.get(n).map_or("(end)", String::as_str).to_owned();
        format!("line {n}:\n  {}\n  {}", line(a), line(b))
    })
}

#[test]
fn every_run_of_a_seed_in_one_process_is_the_same_schedule() {
    let seeds = ONCE_TWO_TRACES
        .iter()
        .map(|s| (*s, RUNS))
        .chain(LOOKED_UP_ONE_BY_ONE.iter().map(|s| (*s, 2)));
    for (seed, runs) in seeds {
        let first = awsmp_simulation::run(seed, true);
        for _ in 1..runs {
            let again = awsmp_simulation::run(seed, true);
            if let Some(at) = parting(&first.trace, &again.trace) {
                panic!("seed {seed} replayed as another trace, parting at {at}");
            }
            assert_eq!(first.explored, again.explored, "seed {seed}");
            assert_eq!(first.violations, again.violations, "seed {seed}");
        }
    }
}

#[test]
fn the_binary_replays_byte_for_byte_and_ends_with_the_verdict_line() {
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_awsmp-simulate"))
            .args(["--seed", "17", "--trace"])
            .output()
            .expect("awsmp-simulate runs")
    };
    let (a, b) = (run(), run());
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stdout));
    assert_eq!(a.stdout, b.stdout);
    let out = String::from_utf8(a.stdout).unwrap();
    assert!(out.starts_with("seed 17\n"));
    assert_eq!(out.lines().last(), Some("1 schedules, 0 violations"));
}

#[test]
fn a_sweep_prints_the_summary_and_the_count() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_awsmp-simulate"))
        .args(["--schedules", "4", "--first-seed", "100"])
        .output()
        .expect("awsmp-simulate runs");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("explored:") && text.contains("faults:"),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("4 schedules, 0 violations"));
}
