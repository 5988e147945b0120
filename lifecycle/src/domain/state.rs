//! A subscriber row's state and the pure transition of each change (docs/lifecycle.md,
//! "States and transitions").
//!
//! Every transition moves the row up an order, never down, so any order and any duplication
//! of one license's events end in the same state:
//!
//! - `subscriptionStatus`: none < `active` < `deprovisioning` < `inactive`; `License Updated`
//!   sets `active` only where nothing is set (it never reactivates), `License Deprovisioned`
//!   raises to `deprovisioning` unless `inactive`, the cleanup raises to `inactive`.
//! - The flush window's close is the earliest `License Deprovisioned` time + 1 h.
//! - The agreement is the one of the newest `License Updated` (by event time, then agreement
//!   id); within one agreement `agreementStatus` goes `active` < `inactive`.
//! - Amended metadata is the newest amendment's.
//!
//! The DynamoDB adapter writes the same transitions as conditional updates; the memory adapter
//! applies these functions; a contract test holds them to each other.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};

use super::event::{AgreementTerms, Change, LicenseKey};

/// How long AWS Marketplace accepts usage after `License Deprovisioned`: "a 1-hour final
/// reporting window"
/// (<https://docs.aws.amazon.com/marketplace/latest/userguide/saas-eventbridge-integration.html>).
pub const DEPROVISIONING_WINDOW: Duration = Duration::hours(1);

/// The license lifecycle, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LicenseStatus {
    /// Access granted; metered.
    Active,
    /// In the flush window: still metered until it closes.
    Deprovisioning,
    /// Final.
    Inactive,
}

/// The agreement lifecycle, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AgreementStatus {
    /// In force.
    Active,
    /// Ended (metering is unaffected).
    Inactive,
}

/// Amended metadata with the time of the amendment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Amendment {
    /// The amendment's event time.
    pub at: DateTime<Utc>,
    /// The terms it carried.
    pub terms: AgreementTerms,
}

/// One subscribers-table row (PII-free).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriber {
    /// Its key.
    pub key: LicenseKey,
    /// The product.
    pub product_code: Option<String>,
    /// The agreement of the newest `License Updated`.
    pub agreement_id: Option<String>,
    /// The event time of that `License Updated`.
    pub license_event_at: Option<DateTime<Utc>>,
    /// The license lifecycle.
    pub subscription_status: Option<LicenseStatus>,
    /// The agreement lifecycle.
    pub agreement_status: Option<AgreementStatus>,
    /// The status word of the agreement's `Purchase Agreement Ended`.
    pub agreement_end_status: Option<String>,
    /// The newest amendment of the agreement.
    pub amendment: Option<Amendment>,
    /// When the flush window closes; present exactly while `deprovisioning` (the sparse
    /// index's flag and sort key).
    pub deprovisioning_expiry: Option<DateTime<Utc>>,
    /// Regions the buyer registered in.
    pub registered_regions: BTreeSet<String>,
}

impl Subscriber {
    /// A row with nothing but its key.
    pub fn empty(key: LicenseKey) -> Self {
        Self {
            key,
            product_code: None,
            agreement_id: None,
            license_event_at: None,
            subscription_status: None,
            agreement_status: None,
            agreement_end_status: None,
            amendment: None,
            deprovisioning_expiry: None,
            registered_regions: BTreeSet::new(),
        }
    }
}

/// Whether a change matched the row: agreement changes apply only to a row of that agreement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The row was written (or already held the change).
    Applied,
    /// An agreement change for a row that is no longer (or not yet) of that agreement.
    OtherAgreement,
}

fn license_updated(
    row: &mut Subscriber,
    agreement_id: &str,
    product_code: Option<&String>,
    at: DateTime<Utc>,
) {
    let newer = match (row.license_event_at, row.agreement_id.as_deref()) {
        (Some(t), Some(a)) => (at, agreement_id) > (t, a),
        _ => true,
    };
    if newer {
        if row.agreement_id.as_deref() != Some(agreement_id) {
            row.agreement_id = Some(agreement_id.to_owned());
            row.agreement_status = Some(AgreementStatus::Active);
            row.agreement_end_status = None;
            row.amendment = None;
        }
        row.license_event_at = Some(at);
    }
    row.subscription_status.get_or_insert(LicenseStatus::Active);
    row.agreement_status.get_or_insert(AgreementStatus::Active);
    if row.product_code.is_none() {
        row.product_code = product_code.cloned();
    }
}

fn license_deprovisioned(row: &mut Subscriber, product_code: Option<&String>, at: DateTime<Utc>) {
    if row.subscription_status == Some(LicenseStatus::Inactive) {
        return;
    }
    let expiry = at + DEPROVISIONING_WINDOW;
    row.subscription_status = Some(LicenseStatus::Deprovisioning);
    row.deprovisioning_expiry = Some(row.deprovisioning_expiry.map_or(expiry, |e| e.min(expiry)));
    if row.product_code.is_none() {
        row.product_code = product_code.cloned();
    }
}

/// Apply `change` (event time `at`) to the row of `key` (`None`: no row yet). License changes
/// create the row; agreement changes apply only to an existing row of that agreement.
pub fn apply(
    row: Option<Subscriber>,
    key: &LicenseKey,
    change: &Change,
    at: DateTime<Utc>,
) -> (Option<Subscriber>, Outcome) {
    match change {
        Change::LicenseUpdated {
            agreement_id,
            product_code,
        } => {
            let mut row = row.unwrap_or_else(|| Subscriber::empty(key.clone()));
            license_updated(&mut row, agreement_id, product_code.as_ref(), at);
            (Some(row), Outcome::Applied)
        }
        Change::LicenseDeprovisioned { product_code } => {
            let mut row = row.unwrap_or_else(|| Subscriber::empty(key.clone()));
            license_deprovisioned(&mut row, product_code.as_ref(), at);
            (Some(row), Outcome::Applied)
        }
        Change::AgreementEnded {
            agreement_id,
            status,
        } => match row {
            Some(mut r) if r.agreement_id.as_deref() == Some(agreement_id.as_str()) => {
                r.agreement_status = Some(AgreementStatus::Inactive);
                r.agreement_end_status = status.clone().or(r.agreement_end_status);
                (Some(r), Outcome::Applied)
            }
            other => (other, Outcome::OtherAgreement),
        },
        Change::AgreementAmended {
            agreement_id,
            terms,
        } => match row {
            Some(mut r) if r.agreement_id.as_deref() == Some(agreement_id.as_str()) => {
                if r.amendment.as_ref().is_none_or(|a| at > a.at) {
                    r.amendment = Some(Amendment {
                        at,
                        terms: terms.clone(),
                    });
                }
                (Some(r), Outcome::Applied)
            }
            other => (other, Outcome::OtherAgreement),
        },
    }
}

/// The deprovision-cleanup's transition: a row whose flush window closed by `now` becomes
/// `inactive` and leaves the index. False when there is nothing to finalize (already done by
/// a concurrent run, or the window is still open).
pub fn finalize(row: &mut Subscriber, now: DateTime<Utc>) -> bool {
    match row.deprovisioning_expiry {
        Some(expiry) if expiry <= now => {
            row.subscription_status = Some(LicenseStatus::Inactive);
            row.deprovisioning_expiry = None;
            true
        }
        _ => false,
    }
}

/// The register Lambda's PII-free upsert: the product, and the region added to the set.
pub fn registered(
    row: Option<Subscriber>,
    key: &LicenseKey,
    product_code: &str,
    region: &str,
) -> Subscriber {
    let mut row = row.unwrap_or_else(|| Subscriber::empty(key.clone()));
    row.product_code
        .get_or_insert_with(|| product_code.to_owned());
    row.registered_regions.insert(region.to_owned());
    row
}
