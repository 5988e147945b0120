//! The fault wrapper: injected faults read as the AWS adapters' errors, and do what they say.

use super::*;
use awsmp_contract::retry::Retryable;
use awsmp_pipeline::adapters::memory::MemoryQueue;
use std::collections::HashSet;

/// An injected refusal reads as each of DynamoDB's throttle and 5xx codes, which the real
/// adapters retry; a lost answer as their retryable timeout; a crash as nothing to retry.
#[test]
fn injected_errors_are_classified_as_the_adapters_classify_them() {
    let codes: HashSet<&str> = (0..20)
        .map(|variant| Failed {
            fault: Some(Fault::Throttle),
            variant,
        })
        .inspect(|f| assert!(f.retryable() && awsmp_aws::dynamodb::is_retryable_code(f.code())))
        .map(Failed::code)
        .collect();
    assert_eq!(codes.len(), REFUSED_CODES.len());
    let lost = injected_dynamodb("write_back", Failed::of(Some(Fault::LoseResponse)));
    assert!(lost.is_retryable());
    for crash in [Fault::Crash, Fault::ApplyThenFail] {
        assert!(!injected_dynamodb("get", Failed::of(Some(crash))).is_retryable());
        assert!(!ConsumerError::injected("claim", Failed::of(Some(crash))).is_retryable());
    }
    assert!(ConsumerError::injected("claim", Failed::of(Some(Fault::Throttle))).is_retryable());
}

/// A server error refused before applying reads as DynamoDB's 5xx codes, retried.
#[test]
fn a_failure_before_applying_is_a_retryable_server_error() {
    let codes: HashSet<&str> = (0..10)
        .map(|variant| Failed {
            fault: Some(Fault::FailBeforeApply),
            variant,
        })
        .inspect(|f| assert!(f.retryable()))
        .map(Failed::code)
        .collect();
    assert_eq!(
        codes,
        HashSet::from(["InternalServerError", "ServiceUnavailable"])
    );
}

fn group() -> GroupKey {
    GroupKey::new(
        "arn:aws:l-1",
        "111122223333",
        "d",
        "2026-11-30T10".parse().unwrap(),
    )
}

fn now() -> DateTime<Utc> {
    "2026-11-30T12:00:00Z".parse().unwrap()
}

#[tokio::test]
async fn a_throttled_call_applies_nothing_and_a_lost_response_applies_it() {
    let ctx = Ctx::new(FaultPlan::new(1, crate::faults::Rates::default()));
    ctx.faults
        .script("put_if_absent", [Fault::Throttle, Fault::LoseResponse]);
    let store = Faulty::new(MemoryAggregatedStore::new("t"), &ctx);
    let item = AggregatedItem::new(group(), 5, None);
    let e = store.put_if_absent(&item, now()).await.unwrap_err();
    assert!(e.is_retryable());
    assert!(store.inner.items().is_empty());
    let e = store.put_if_absent(&item, now()).await.unwrap_err();
    assert!(e.is_retryable());
    assert_eq!(store.inner.items().len(), 1);
    assert!(!store.put_if_absent(&item, now()).await.unwrap());
    let kinds: Vec<(Fault, u64)> = ctx.faults.injected_by_kind().into_iter().collect();
    assert_eq!(kinds, [(Fault::Throttle, 1), (Fault::LoseResponse, 1)]);
}

#[tokio::test]
async fn a_crash_stops_every_wrapped_port_until_recovery() {
    let ctx = Ctx::new(FaultPlan::new(1, crate::faults::Rates::default()));
    let store = Faulty::new(MemoryAggregatedStore::new("t"), &ctx);
    let queue = Faulty::new(MemoryQueue::new("q"), &ctx);
    ctx.faults.crash_after(1);
    assert!(store.get(&group()).await.unwrap().is_none());
    let e = queue.send_all(&["b".into()]).await.unwrap_err();
    assert!(e.to_string().contains("SendMessageBatch"), "{e}");
    let e = store.get(&group()).await.unwrap_err();
    assert!(!e.is_retryable());
    assert!(ctx.faults.crashed() && queue.inner.messages().is_empty());
    assert_eq!(ctx.faults.injected_by_kind().get(&Fault::Crash), Some(&1));
    assert_eq!(
        ctx.faults.injected(),
        1,
        "the stopped call is no fault of its own"
    );
    ctx.faults.recover();
    assert!(!ctx.faults.crashed());
    queue.send_all(&["b".into()]).await.unwrap();
    assert_eq!(queue.inner.messages(), ["b"]);
}

#[tokio::test]
async fn a_script_aims_at_one_operation() {
    let ctx = Ctx::new(FaultPlan::new(1, crate::faults::Rates::default()));
    ctx.faults.script("get", [Fault::FailBeforeApply]);
    let store = Faulty::new(MemoryAggregatedStore::new("t"), &ctx);
    let item = AggregatedItem::new(group(), 5, None);
    assert!(store.put_if_absent(&item, now()).await.unwrap());
    let e = store.get(&group()).await.unwrap_err();
    assert!(e.is_retryable());
    assert_eq!(store.get(&group()).await.unwrap(), Some(item));
    assert_eq!(ctx.faults.injected(), 1);
}

#[tokio::test]
async fn metering_faults_are_the_answers_aws_gives() {
    let ctx = Ctx::new(FaultPlan::new(1, crate::faults::Rates::default()));
    ctx.faults.script(
        "batch_meter_usage",
        [Fault::Throttle, Fault::FailBeforeApply, Fault::LoseResponse],
    );
    let api = FaultyMetering {
        inner: Arc::new(MemoryMeteringApi::default()),
        ctx: ctx.clone(),
        outage: None,
        outage_5xx: false,
        clock: Arc::new(awsmp_contract::clock::FixedClock::new(now())),
    };
    let kind = CallKind::ConcurrentAgreements { product_hint: None };
    let records = [SubmitRecord::new(group(), 3, None)];
    let mut names = Vec::new();
    for _ in 0..3 {
        let e = api.batch_meter_usage(&kind, &records).await.unwrap_err();
        names.push(e.exception_name().map(str::to_owned));
    }
    // A throttle reads as `ThrottlingException` or, by its variant, as a 5xx.
    assert!(
        matches!(
            names[0].as_deref(),
            Some("ThrottlingException" | "InternalServiceErrorException")
        ),
        "{names:?}"
    );
    assert_eq!(names[1].as_deref(), Some("InternalServiceErrorException"));
    assert_eq!(names[2], None, "a lost answer is no answer");
    assert_eq!(
        api.inner.ledger().len(),
        1,
        "only the lost response applied"
    );
}

/// One seed gives one sequence of faults, and every kind its rate names is drawn.
#[test]
fn one_seed_gives_one_sequence_of_faults() {
    let run = |seed| {
        let plan = FaultPlan::new(
            seed,
            crate::faults::Rates {
                throttle: 200,
                fail_before_apply: 100,
                lose_response: 100,
                ..crate::faults::Rates::default()
            },
        );
        (0..200)
            .map(|i| plan.decide("op", &format!("k{}", i % 7), true))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
    let kinds = run(3);
    for k in [Fault::Throttle, Fault::LoseResponse, Fault::FailBeforeApply] {
        assert!(kinds.contains(&Some(k)), "{k:?} never injected");
    }
    assert!(kinds.contains(&None));
}

/// On a multi-threaded runtime (the load test's), calls racing on one plan get the faults
/// their identities draw, whatever order they run in: two runs inject the same faults.
#[test]
fn a_plan_shared_by_threads_draws_the_same_faults_in_any_order() {
    let run = || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap();
        let ctx = Ctx::new(FaultPlan::new(
            9,
            crate::faults::Rates {
                throttle: 150,
                fail_before_apply: 50,
                lose_response: 100,
                ..crate::faults::Rates::default()
            },
        ));
        let store = Arc::new(Faulty::new(MemoryAggregatedStore::new("t"), &ctx));
        rt.block_on(async {
            let tasks: Vec<_> = (0..64u32)
                .map(|i| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let mut g = group();
                        g.customer_aws_account_id = format!("acct-{i}");
                        let item = AggregatedItem::new(g, 1, None);
                        while store.put_if_absent(&item, now()).await.is_err() {}
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert_eq!(store.inner.items().len(), 64);
        ctx.faults.injected_by_kind()
    };
    let first = run();
    assert!(first.len() >= 2, "{first:?}");
    assert_eq!(first, run());
}
