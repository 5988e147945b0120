//! The license lifecycle in the sweep (`simulation/src/lifecycle.rs`): schedules that
//! deprovision a license while usage flows end with it finalized, its usage billed, and no
//! violation.

use awsmp_simulation::run;

/// The deprovisioning is on in the default sweep (docs/simulation.md, invariant 5); these
/// seeds switch it on explicitly, so the test holds whatever the process default.
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

/// The eight seeds the 1,000-schedule sweep failed before its findings were fixed
/// (docs/simulation.md, "What the simulation found"): the flush's lead (69, 451, 597, 835),
/// the check reading pending flags instead of the ledger (294, 865), usage after the flush's
/// commit (310), a short window's hour aggregated after it closed (960).
#[test]
fn the_seeds_the_deprovisioning_once_failed_pass() {
    awsmp_simulation::lifecycle::set_deprovision(true);
    for seed in [69, 294, 451, 597, 835, 865, 310, 960] {
        let report = run(seed, false);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
        let deprovisioned = report.explored.faults.get("license-deprovisioned");
        assert_eq!(
            deprovisioned,
            Some(&1),
            "seed {seed} deprovisions license 0"
        );
    }
}
