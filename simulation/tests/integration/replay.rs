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
