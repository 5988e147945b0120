//! Any order and any duplication of one license's lifecycle events, delivered through the
//! subscription handler as SQS would (an unresolved message is redelivered later), ends in
//! the same subscriber row.

use awsmp_aws::emf::MetricsSink;
use awsmp_lifecycle::adapters::memory::{MemoryDeadLetters, MemorySubscriberStore};
use awsmp_lifecycle::domain::event::LicenseKey;
use awsmp_lifecycle::domain::state::{LicenseStatus, Subscriber};
use awsmp_lifecycle::handlers::subscription::{SubscriptionService, handle_message};
use awsmp_lifecycle::ports::SubscriberStore;
use proptest::prelude::*;
use serde_json::json;
use std::collections::VecDeque;

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const BUYER: &str = "845735284135";

/// One lifecycle event of the license. Agreement `b` is the later one: a license moves at
/// most once, to a newer agreement (times of `a` are 0..4, of `b` 5..9).
#[derive(Debug, Clone)]
enum Ev {
    Updated { b: bool, t: u32 },
    UpdatedWithoutArn { b: bool, t: u32 },
    Deprovisioned { t: u32 },
    Ended { b: bool },
    Amended { b: bool, t: u32 },
}

fn agreement(b: bool) -> &'static str {
    if b { "agmt-bbbb" } else { "agmt-aaaa" }
}

fn time(t: u32) -> String {
    format!("2026-12-01T10:{:02}:00Z", t * 5)
}

fn body(ev: &Ev) -> String {
    let (detail_type, agmt, t, license, status) = match *ev {
        Ev::Updated { b, t } => (
            "License Updated - Manufacturer",
            agreement(b),
            t + if b { 5 } else { 0 },
            true,
            None,
        ),
        Ev::UpdatedWithoutArn { b, t } => (
            "License Updated - Manufacturer",
            agreement(b),
            t + if b { 5 } else { 0 },
            false,
            None,
        ),
        Ev::Deprovisioned { t } => (
            "License Deprovisioned - Manufacturer",
            "agmt-aaaa",
            t,
            true,
            None,
        ),
        Ev::Ended { b } => (
            "Purchase Agreement Ended - Proposer",
            agreement(b),
            9,
            false,
            Some("CANCELLED"),
        ),
        Ev::Amended { b, t } => (
            "Purchase Agreement Amended - Proposer",
            agreement(b),
            t,
            false,
            Some("ACTIVE"),
        ),
    };
    let mut detail = json!({
        "agreement": {"id": agmt, "endTime": format!("2027-01-01T00:00:{t:02}Z")},
        "product": {"code": "prod1"},
        "acceptor": {"accountId": BUYER},
    });
    if let Some(s) = status {
        detail["agreement"]["status"] = json!(s);
    }
    if license {
        detail["license"] = json!({"arn": LICENSE});
    }
    json!({"version": "0", "id": "x", "detail-type": detail_type, "source": "aws.agreement-marketplace",
           "time": time(t), "detail": detail})
    .to_string()
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        (any::<bool>(), 0..5u32).prop_map(|(b, t)| Ev::Updated { b, t }),
        (any::<bool>(), 0..5u32).prop_map(|(b, t)| Ev::UpdatedWithoutArn { b, t }),
        (0..10u32).prop_map(|t| Ev::Deprovisioned { t }),
        any::<bool>().prop_map(|b| Ev::Ended { b }),
        (any::<bool>(), 0..10u32).prop_map(|(b, t)| Ev::Amended { b, t }),
    ]
}

/// Deliver `order` (indexes into `events`) as SQS would: a failed message goes to the back of
/// the queue, up to a receive count.
fn deliver(events: &[Ev], order: &[usize]) -> Option<Subscriber> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = MemorySubscriberStore::new();
        let dlq = MemoryDeadLetters::new();
        let metrics = MetricsSink::capture("subscription");
        let svc = SubscriptionService {
            store: &store,
            dead_letters: Some(&dlq),
            metrics: &metrics,
        };
        let max_receives = order.len() + 2;
        let mut queue: VecDeque<(usize, usize)> = order.iter().map(|&i| (i, 0)).collect();
        while let Some((i, received)) = queue.pop_front() {
            if handle_message(&svc, &body(&events[i])).await.is_err() && received + 1 < max_receives
            {
                queue.push_back((i, received + 1));
            }
        }
        assert!(dlq.sent().is_empty(), "no event here is malformed");
        let key = LicenseKey {
            license_arn: LICENSE.into(),
            customer_aws_account_id: BUYER.into(),
        };
        store.get(&key).await.unwrap()
    })
}

fn orders() -> impl Strategy<Value = (Vec<Ev>, Vec<usize>, Vec<usize>)> {
    prop::collection::vec(ev(), 1..8).prop_flat_map(|events| {
        let n = events.len();
        // Each event delivered one to three times, in two independent shuffles.
        let with_dups = prop::collection::vec(1..=3usize, n).prop_map(move |counts| {
            counts
                .iter()
                .enumerate()
                .flat_map(|(i, &c)| std::iter::repeat_n(i, c))
                .collect::<Vec<_>>()
        });
        (
            Just(events),
            with_dups.clone().prop_shuffle(),
            with_dups.prop_shuffle(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_order_and_duplication_converges((events, first, second) in orders()) {
        let a = deliver(&events, &first);
        let b = deliver(&events, &second);
        prop_assert_eq!(&a, &b);
        if let Some(row) = a {
            let deprovisioned = events.iter().any(|e| matches!(e, Ev::Deprovisioned { .. }));
            prop_assert_eq!(row.deprovisioning_expiry.is_some(), deprovisioned);
            if deprovisioned {
                prop_assert_eq!(row.subscription_status, Some(LicenseStatus::Deprovisioning));
            }
        }
    }
}
