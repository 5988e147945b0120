//! The fault plan's decisions.
use super::*;

#[test]
fn decisions_depend_on_the_call_not_on_the_order() {
    let rates = Rates {
        throttle: 300,
        lose_response: 100,
        preempt: 100,
        ..Rates::default()
    };
    let a = FaultPlan::new(7, rates);
    let b = FaultPlan::new(7, rates);
    let xs: Vec<_> = (0..20)
        .map(|i| a.decide("put", &i.to_string(), true))
        .collect();
    let ys: Vec<_> = (0..20)
        .rev()
        .map(|i| b.decide("put", &i.to_string(), true))
        .collect();
    assert_eq!(xs, ys.into_iter().rev().collect::<Vec<_>>());
    assert!(xs.iter().any(Option::is_some) && xs.iter().any(Option::is_none));
}

/// Tables are declared empty only to a quiet plan: faults off, the invocation running.
#[test]
fn empty_tables_are_told_only_while_the_plan_is_quiet() {
    let plan = FaultPlan::new(
        1,
        Rates {
            crash: 1000,
            ..Rates::default()
        },
    );
    let empty = EmptyTables {
        usage: true,
        aggregated: false,
    };
    plan.set_empty_tables(empty);
    assert_eq!(plan.empty_tables(), EmptyTables::default(), "faults on");
    plan.set_enabled(false);
    assert!(plan.quiet());
    assert_eq!(plan.empty_tables(), empty);
    plan.set_enabled(true);
    plan.begin(Duration::minutes(1));
    assert!(plan.call("op", "k", true).stopped || plan.crashed());
    plan.set_enabled(false);
    assert!(!plan.quiet(), "a stopped invocation still fails its calls");
    assert_eq!(plan.empty_tables(), EmptyTables::default());
    plan.end();
    assert_eq!(plan.empty_tables(), empty);
    plan.set_empty_tables(EmptyTables::default());
    assert_eq!(plan.empty_tables(), EmptyTables::default());
}

#[test]
fn epochs_are_masked_out_of_keys() {
    let id = format!("p:{}:3:42", "ab".repeat(16));
    assert_eq!(stable_key(&id), "p:*:3:42");
    assert_eq!(stable_key("acct#dim#2026"), "acct#dim#2026");
}

#[test]
fn a_crash_marks_the_invocation_until_it_ends() {
    let plan = FaultPlan::new(
        1,
        Rates {
            crash: 500,
            ..Rates::default()
        },
    );
    plan.begin(Duration::minutes(1));
    let mut i = 0;
    while !plan.crashed() {
        plan.decide("op", &i.to_string(), false);
        i += 1;
    }
    // Every later call of the invocation fails before applying.
    assert!(plan.call("op", "later", true).stopped);
    assert_eq!(plan.decide("op", "later", true), Some(Fault::Crash));
    assert!(plan.end());
    // The next invocation starts clean (its own call may crash it anew).
    assert!(!plan.call("op", "after", true).stopped);
    plan.end();
    assert!(!plan.crashed());
    plan.set_enabled(false);
    assert_eq!(plan.decide("op", "k", true), None);
}

/// One throttle in [`pick::OUTLASTING_THROTTLE_ONE_IN`] holds its call for the rest of the
/// invocation, past any retry policy, and no longer; every repeat of a call after a retryable
/// fault, in the same invocation, is counted as a retry of its layer.
#[test]
fn an_outlasting_throttle_holds_for_the_rest_of_its_invocation() {
    let plan = FaultPlan::new(
        3,
        Rates {
            throttle: 300,
            ..Rates::default()
        },
    );
    let outlasting = |p: &FaultPlan| {
        p.tally()
            .get("throttle-outlasting-retries")
            .copied()
            .unwrap_or(0)
    };
    plan.begin(Duration::minutes(1));
    let hot = (0..500)
        .map(|i| i.to_string())
        .find(|key| {
            let before = outlasting(&plan);
            plan.decide("get", key, false) == Some(Fault::Throttle)
                && plan.decide("get", key, false) == Some(Fault::Throttle)
                && outlasting(&plan) > before
        })
        .expect("some throttle outlasts the retries");
    for _ in 0..10 {
        assert_eq!(plan.decide("get", &hot, false), Some(Fault::Throttle));
    }
    let retries = plan.tally()["retry-pipeline-store"];
    assert!(retries >= 11, "{retries} retries counted");
    plan.end();
    plan.begin(Duration::minutes(1));
    let before = outlasting(&plan);
    plan.decide("get", &hot, false);
    assert_eq!(outlasting(&plan), before, "held past its invocation");
    assert_eq!(
        plan.tally()["retry-pipeline-store"],
        retries,
        "a call of the next invocation is no retry"
    );
}

/// A per-key script hits the first calls on every key, whatever order the keys interleave in,
/// and nothing after them.
#[test]
fn a_per_key_script_hits_the_first_calls_on_each_key() {
    let plan = FaultPlan::new(3, Rates::default());
    plan.script_each_key("write_back", [Fault::Throttle, Fault::Throttle]);
    let order = ["a", "b", "a", "b", "b", "a", "a"];
    let got: Vec<_> = order
        .iter()
        .map(|k| plan.decide("write_back", k, true))
        .collect();
    let t = Some(Fault::Throttle);
    assert_eq!(got, [t, t, t, t, None, None, None]);
    assert_eq!(plan.decide("mark_attempted", "a", true), None);
    assert_eq!(plan.injected_by_kind()[&Fault::Throttle], 4);
}

/// A crash point on an operation crashes its n-th next call, whatever the other calls between,
/// and stops the invocation; one not reached is gone once the process recovers.
#[test]
fn a_crash_point_on_an_operation_crashes_its_nth_call() {
    let plan = FaultPlan::new(3, Rates::default());
    plan.begin(Duration::minutes(1));
    plan.crash_at("row-write", 2);
    assert_eq!(plan.decide("row-write", "a", true), None);
    assert_eq!(plan.decide("claim", "a", true), None);
    assert_eq!(plan.decide("row-write", "b", true), Some(Fault::Crash));
    assert!(plan.crashed());
    assert!(plan.call("advance", "shard", true).stopped);
    plan.end();
    plan.begin(Duration::minutes(1));
    plan.crash_at("row-write", 5);
    plan.recover();
    assert!((0..6).all(|i| plan.decide("row-write", &i.to_string(), true).is_none()));
}
