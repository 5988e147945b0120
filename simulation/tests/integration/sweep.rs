//! The default sweep passes on the real code (docs/simulation.md).

use awsmp_simulation::cli::DEFAULT_SCHEDULES;

#[test]
fn the_default_sweep_breaks_no_invariant() {
    let started = std::time::Instant::now();
    let result = awsmp_simulation::sweep(0, DEFAULT_SCHEDULES);
    let e = &result.explored;
    eprintln!(
        "{} schedules in {:?}: {} steps, {} hours crossed, faults {:?}, interleavings {:?}",
        result.schedules,
        started.elapsed(),
        e.steps,
        e.hours_crossed,
        e.faults,
        e.interleavings
    );
    assert_eq!(result.schedules, DEFAULT_SCHEDULES);
    let failures: Vec<String> = result
        .failures
        .iter()
        .map(|f| format!("seed {}: {:?}", f.seed, f.violations))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    // The sweep explored what it claims to: every fault class, interleavings, resharding.
    for class in [
        "throttle",
        "lost-response",
        "crash-before",
        "crash-after",
        "interleave",
        "reshard",
        "poison-record",
        "late-arrival",
        "caller-re-record",
        "stream-lost-response",
        "invocation-timeout",
        "poison-batch",
        "ingest-attack",
        "ingest-replay",
    ] {
        assert!(
            e.faults.get(class).copied().unwrap_or(0) > 0,
            "no {class} fault injected"
        );
    }
    assert!(e.hours_crossed > DEFAULT_SCHEDULES && e.billed > 0);
    assert!(e.mapping.get("bisections").copied().unwrap_or(0) > 0);
    assert!(e.mapping.get("batches-redriven").copied().unwrap_or(0) > 0);
}
