//! The window exit's cause is the failure on the group's own path, in the hour's window.

use super::*;
use crate::schedule::setup_for;

/// A short-window schedule's world, its drain begun `drain_after` past the start, and a
/// group of its start hour.
fn world(drain_after: Duration) -> (std::sync::Arc<World>, GroupKey, GroupKey) {
    let mut setup = setup_for(3);
    setup.window_hours = 3;
    setup.race = false;
    let world = World::new(setup);
    let start = world.clock.now();
    *lock(&world.lifecycle.drain_started) = Some(start + drain_after);
    let hour = HourBucket::containing(start);
    let a = GroupKey::new("license-a", "111122223333", "requests", hour);
    let b = GroupKey::new("license-b", "111122223333", "requests", hour);
    (world, a, b)
}

/// Run `check` on [`world`]'s world, group and other group, inside the current-thread runtime
/// and local set a world needs (its interleaver is a local task).
fn with_world(drain_after: Duration, check: impl FnOnce(&World, GroupKey, GroupKey)) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    tokio::task::LocalSet::new().block_on(&runtime, async {
        let (w, a, b) = world(drain_after);
        check(&w, a, b);
    });
}

fn fail_at(w: &World, at: DateTime<Utc>, stage: Step, held: Held) {
    lock(&w.truth)
        .stage_failures
        .push(StageFailure { at, stage, held });
}

#[test]
fn a_window_closed_under_faults_with_nothing_failed_on_its_path_excuses_nothing() {
    with_world(Duration::hours(6), |w, a, _| {
        assert!(hour_close(w, a.hour) < w.clock.now() + Duration::hours(6));
        assert_eq!(window_cause(w, &a), None, "no failure recorded");
    });
}

#[test]
fn a_failure_on_the_groups_path_while_its_window_was_open_is_the_cause() {
    with_world(Duration::hours(6), |w, a, b| {
        let open = a.hour.start() + Duration::minutes(70);
        // An aggregator message of another group failed: not this group's cause.
        fail_at(w, open, Step::Aggregate, Held::Groups([b.clone()].into()));
        assert_eq!(window_cause(w, &a), None);
        assert_eq!(
            window_cause(w, &b),
            Some(Cause::StageFailed(Step::Aggregate))
        );
        // A consumer lane failing holds the fence for every group.
        fail_at(w, open, Step::ConsumerBatch, Held::Every);
        assert_eq!(
            window_cause(w, &a),
            Some(Cause::StageFailed(Step::ConsumerBatch))
        );
    });
}

#[test]
fn a_failed_meter_run_holds_back_only_the_hour_it_targeted() {
    with_world(Duration::hours(6), |w, a, _| {
        let open = a.hour.start() + Duration::minutes(70);
        // A meter run of another hour failed: not this hour's cause; of this hour, it is.
        fail_at(w, open, Step::Discover, Held::Hour(a.hour.minus_hours(1)));
        assert_eq!(window_cause(w, &a), None);
        fail_at(w, open, Step::Discover, Held::Hour(a.hour));
        assert_eq!(
            window_cause(w, &a),
            Some(Cause::StageFailed(Step::Discover))
        );
    });
}

#[test]
fn a_failure_outside_the_hours_window_is_not_its_cause() {
    with_world(Duration::hours(6), |w, a, _| {
        let close = hour_close(w, a.hour);
        // While the hour is still open its processing has not begun.
        fail_at(
            w,
            a.hour.start() + Duration::minutes(30),
            Step::Submit,
            Held::Every,
        );
        fail_at(
            w,
            a.hour.start() - Duration::seconds(1),
            Step::Submit,
            Held::Every,
        );
        fail_at(w, close, Step::Submit, Held::Every);
        fail_at(w, close + Duration::minutes(5), Step::Discover, Held::Every);
        assert_eq!(window_cause(w, &a), None);
    });
}

#[test]
fn an_hour_that_closes_once_the_drain_has_run_two_rounds_has_no_cause() {
    with_world(Duration::minutes(10), |w, a, _| {
        fail_at(
            w,
            a.hour.start() + Duration::minutes(70),
            Step::Submit,
            Held::Every,
        );
        assert!(hour_close(w, a.hour) >= w.clock.now() + Duration::minutes(10) + DRAIN_LEAD);
        assert_eq!(window_cause(w, &a), None);
    });
}

#[test]
fn only_stages_on_the_billing_path_are_recorded() {
    assert!(!BILLING_PATH.contains(&Step::Expire));
    assert!(!BILLING_PATH.contains(&Step::Subscription));
    assert!(!BILLING_PATH.contains(&Step::DeprovisionCleanup));
    assert!(!BILLING_PATH.contains(&Step::MeterIngest));
}

#[test]
fn a_raw_rows_key_names_its_group() {
    let hour: HourBucket = "2026-11-30T21".parse().unwrap();
    let group = GroupKey::new("license-a", "111122223333", "requests", hour);
    let key = RowKey {
        license_arn: "license-a".into(),
        sort_key: group.usage_sort_key_at(61),
    };
    assert_eq!(row_group(&key), Some(group));
    let bad = RowKey {
        license_arn: "license-a".into(),
        sort_key: "no separators".into(),
    };
    assert_eq!(row_group(&bad), None);
}
