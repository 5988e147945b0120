//! The license lifecycle in the sweep (`simulation/src/lifecycle.rs`): schedules that
//! deprovision a license while usage flows end with it finalized, its usage billed, and no
//! violation.

use awsmp_simulation::run;

/// The default sweep leaves the deprovisioning off until its findings are analysed
/// (docs/simulation.md, invariant 5); these seeds run with it on and pass.
#[test]
fn deprovisioned_licenses_are_finalized_and_the_schedules_pass() {
    awsmp_simulation::lifecycle::set_deprovision(true);
    let (mut deprovisioned, mut finalized) = (0, 0);
    for seed in 0..4 {
        let report = run(seed, false);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
        let count = |k: &str| report.explored.faults.get(k).copied().unwrap_or(0);
        deprovisioned += count("license-deprovisioned");
        finalized += count("license-finalized");
    }
    assert!(deprovisioned > 0, "no schedule deprovisioned a license");
    assert_eq!(
        finalized, deprovisioned,
        "every deprovisioned license finalized"
    );
}
