//! The default sweep passes on the real code (docs/simulation.md).

use awsmp_simulation::cli::DEFAULT_SCHEDULES;

/// Limits the default sweep reaches, and in how many of its schedules at least (about half of
/// what it reached when this was written, so a small change of the schedules does not fail it,
/// and a class that stops reaching one does).
const LIMITS: [(&str, u64); 9] = [
    ("limit-25-record-call", 35),
    ("limit-cleanup-chunk", 35),
    ("limit-submitter-cap", 20),
    ("limit-dedup-compaction", 35),
    ("limit-lock-edge-pending", 300),
    ("limit-lock-edge-unread", 140),
    ("limit-lock-edge-pending-in-class", 40),
    ("limit-window-closed-under-faults", 60),
    ("limit-window-closed-read-clean", 4),
];

#[test]
fn the_default_sweep_breaks_no_invariant() {
    let started = std::time::Instant::now();
    let result = awsmp_simulation::sweep(0, DEFAULT_SCHEDULES);
    let e = &result.explored;
    eprintln!(
        "{} schedules in {:?}: {} steps, {} hours crossed, faults {:?}, interleavings {:?}, limits (schedules) {:?}",
        result.schedules,
        started.elapsed(),
        e.steps,
        e.hours_crossed,
        e.faults,
        e.interleavings,
        e.limits
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
        "lose-response",
        "crash",
        "apply-then-fail",
        "preempt",
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
    // Retryable faults reach the pipeline's retry loops and the submitter's, and some
    // throttles outlast them (docs/simulation.md, "Faults").
    for class in [
        "retry-pipeline-store",
        "retry-marketplace",
        "throttle-outlasting-retries",
        "marketplace-5xx-after-applying",
    ] {
        assert!(
            e.faults.get(class).copied().unwrap_or(0) > 0,
            "no {class} in the sweep"
        );
    }
    // Each limit is reached, not only approached, in at least this many schedules
    // (docs/simulation.md, "Scale and the lock's edge").
    for (limit, schedules) in LIMITS {
        let reached = e.limits.get(limit).copied().unwrap_or(0);
        assert!(
            reached >= schedules,
            "{limit} reached in {reached} schedules, fewer than {schedules}"
        );
    }
    assert!(e.hours_crossed > DEFAULT_SCHEDULES && e.billed > 0);
    assert!(e.mapping.get("bisections").copied().unwrap_or(0) > 0);
    assert!(e.mapping.get("batches-redriven").copied().unwrap_or(0) > 0);
}
