//! A license's subscription, as `meterctl status` answers for it: active, in its deprovisioning
//! flush window, past the window awaiting deprovision-cleanup, or finalized `inactive`
//! (docs/meterctl.md, "status"; the states are docs/lifecycle.md's). Pure: it takes the
//! subscriber entry and the moment of asking.

use awsmp_aws::deprovisioning::Deprovisioning;
use awsmp_contract::subscribers as s;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One subscriber entry (license + buyer account), as read with a consistent read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionView {
    /// License ARN.
    pub license_arn: String,
    /// Buyer account.
    pub customer_aws_account_id: String,
    /// `active`, `deprovisioning` or `inactive` (absent on an entry written only by
    /// registration).
    pub subscription_status: Option<String>,
    /// The agreement's status (`active` / `inactive`).
    pub agreement_status: Option<String>,
    /// When AWS stops accepting usage, while the license is in its flush window.
    pub deprovisioning_expiry: Option<DateTime<Utc>>,
    /// Time of the last license event applied.
    pub license_event_at: Option<DateTime<Utc>>,
    /// Last write to the entry (for an `inactive` license: when it was finalized).
    pub updated_at: Option<DateTime<Utc>>,
}

/// Where the license stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SubscriptionState {
    /// Subscribed: usage is billed as it comes.
    Active,
    /// Deprovisioned; AWS still accepts its usage until the expiry.
    InFlushWindow,
    /// The flush window has closed; deprovision-cleanup has not yet finalized it.
    WindowClosed,
    /// Finalized by deprovision-cleanup: AWS accepts no more usage for it.
    Inactive,
    /// The entry carries no subscription status.
    Unknown,
}

impl SubscriptionView {
    /// The state at `now`.
    pub fn state(&self, now: DateTime<Utc>) -> SubscriptionState {
        match (
            self.subscription_status.as_deref(),
            self.deprovisioning_expiry,
        ) {
            (Some(s::INACTIVE), _) => SubscriptionState::Inactive,
            (_, Some(e)) if e > now => SubscriptionState::InFlushWindow,
            (_, Some(_)) => SubscriptionState::WindowClosed,
            (Some(s::DEPROVISIONING), None) => SubscriptionState::WindowClosed,
            (Some(s::ACTIVE), None) => SubscriptionState::Active,
            _ => SubscriptionState::Unknown,
        }
    }

    /// The license's flush window, while it has one.
    pub fn deprovisioning(&self) -> Option<Deprovisioning> {
        self.deprovisioning_expiry.map(|expiry| Deprovisioning {
            license_arn: self.license_arn.clone(),
            customer_aws_account_id: self.customer_aws_account_id.clone(),
            expiry,
        })
    }

    /// The answer in a sentence.
    pub fn describe(&self, now: DateTime<Utc>) -> String {
        let who = format!(
            "license {} (account {})",
            self.license_arn, self.customer_aws_account_id
        );
        let at =
            |t: Option<DateTime<Utc>>| t.map_or("an unknown time".to_owned(), |t| t.to_rfc3339());
        let agreement = match self.agreement_status.as_deref() {
            Some(s::INACTIVE) => "; its agreement has ended",
            _ => "",
        };
        match self.state(now) {
            SubscriptionState::Active => {
                format!("{who} is active{agreement}: usage is billed as it comes")
            }
            SubscriptionState::InFlushWindow => format!(
                "{who} is deprovisioning: AWS stops accepting its usage at {}; the pipeline \
                 flushes its open hours before then",
                at(self.deprovisioning_expiry)
            ),
            SubscriptionState::WindowClosed => format!(
                "{who} is deprovisioned: its flush window closed at {}; deprovision-cleanup \
                 finalizes it to inactive on its next run",
                at(self.deprovisioning_expiry)
            ),
            SubscriptionState::Inactive => format!(
                "{who} is inactive: deprovisioned (last license event at {}), its flush window \
                 closed and deprovision-cleanup finalized it at {}; AWS accepts no more usage \
                 for it, so the group-hours below are final",
                at(self.license_event_at),
                at(self.updated_at)
            ),
            SubscriptionState::Unknown => format!(
                "{who} has a subscriber entry without a subscription status (registration \
                 only, no license event applied yet)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
    }

    fn view(status: Option<&str>, expiry: Option<DateTime<Utc>>) -> SubscriptionView {
        SubscriptionView {
            license_arn: "arn:aws:license-manager::1:license:l-1".into(),
            customer_aws_account_id: "111122223333".into(),
            subscription_status: status.map(str::to_owned),
            agreement_status: Some(s::ACTIVE.into()),
            deprovisioning_expiry: expiry,
            license_event_at: Some(t(14, 20)),
            updated_at: Some(t(15, 30)),
        }
    }

    #[test]
    fn each_state_is_named_with_its_times() {
        let now = t(15, 0);
        let active = view(Some(s::ACTIVE), None);
        assert_eq!(active.state(now), SubscriptionState::Active);
        assert!(active.describe(now).contains("is active"));

        let flushing = view(Some(s::DEPROVISIONING), Some(t(15, 20)));
        assert_eq!(flushing.state(now), SubscriptionState::InFlushWindow);
        let text = flushing.describe(now);
        assert!(
            text.contains("deprovisioning") && text.contains("2026-12-01T15:20:00"),
            "{text}"
        );
        assert_eq!(flushing.deprovisioning().unwrap().expiry, t(15, 20));

        let closed = view(Some(s::DEPROVISIONING), Some(t(14, 50)));
        assert_eq!(closed.state(now), SubscriptionState::WindowClosed);
        assert!(closed.describe(now).contains("finalizes it to inactive"));

        let inactive = view(Some(s::INACTIVE), None);
        assert_eq!(inactive.state(now), SubscriptionState::Inactive);
        let text = inactive.describe(now);
        assert!(
            text.contains("is inactive")
                && text.contains("2026-12-01T14:20:00")
                && text.contains("2026-12-01T15:30:00"),
            "{text}"
        );
        assert!(inactive.deprovisioning().is_none());

        assert_eq!(view(None, None).state(now), SubscriptionState::Unknown);
    }

    #[test]
    fn an_ended_agreement_is_mentioned_on_an_active_license() {
        let mut v = view(Some(s::ACTIVE), None);
        v.agreement_status = Some(s::INACTIVE.into());
        assert!(v.describe(t(15, 0)).contains("agreement has ended"));
    }
}
