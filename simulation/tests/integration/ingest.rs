//! meter-ingest in the whole simulation (`simulation/src/ingest.rs`): untrusted modules'
//! valid events are billed exactly once through faults, replays and async retries; every
//! attack ends held or rejected with its reason; an invocation whose retries ran out is
//! re-invoked from the on-failure destination and its events end billed or `StaleTimestamp`;
//! retries spaced as Lambda spaces them, past the clock-skew bound, keep their first attempt's
//! receive time and are billed.

use awsmp_simulation::{run_setup, setup_for};

#[test]
fn modules_usage_is_conserved_and_every_refusal_has_its_reason() {
    let (mut exhausted, mut held, mut rejected, mut accepted) = (0, 0, 0, 0);
    let (mut spaced, mut kept) = (0, 0);
    for seed in 60..70 {
        let mut setup = setup_for(seed);
        setup.ingest = true;
        let report = run_setup(setup, true);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
        let faults = &report.explored.faults;
        spaced += faults.get("ingest-spaced-retry").copied().unwrap_or(0);
        kept += faults.get("ingest-kept-receive-time").copied().unwrap_or(0);
        for line in report.trace.iter().filter(|l| l.contains("meter-ingest")) {
            exhausted += usize::from(line.contains("retries exhausted"));
            held += usize::from(!line.contains(" 0 held") && line.contains(" held"));
            rejected += usize::from(!line.contains(" 0 rejected") && line.contains(" rejected"));
            accepted += usize::from(!line.contains(": 0 accepted") && line.contains(" accepted"));
        }
    }
    assert!(
        accepted > 10 && held > 0 && rejected > 0,
        "{accepted} {held} {rejected}"
    );
    assert!(exhausted > 0, "no invocation used up its retries");
    assert!(
        spaced > 0 && kept > 0,
        "{spaced} spaced retries, {kept} past the skew bound"
    );
}
