//! A loss the simulation finds in a configuration docs/guarantees.md lists under "Known
//! limitations": when the limitation is fixed, this test fails and the configuration joins the
//! default sweep.

use awsmp_simulation::{run_setup, setup_for};

/// Usage the fence let through lost: stamped `LateUsage`, or left neither billed nor terminal.
fn late_usage(violations: &[String]) -> bool {
    violations.iter().any(|v| {
        v.contains("LateUsage") || v.contains("accepted units neither billed nor terminal")
    })
}

#[test]
fn a_parallelization_factor_above_one_lets_the_fence_pass_a_lagging_lane() {
    let found = (0..40).any(|seed| {
        let mut setup = setup_for(seed);
        setup.mapping.parallelization = 2;
        late_usage(&run_setup(setup, false).violations)
    });
    assert!(found, "no schedule with two lanes per shard lost usage");
}
