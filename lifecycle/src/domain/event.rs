//! AWS Marketplace lifecycle events as EventBridge delivers them (source
//! `aws.agreement-marketplace`), parsed into what the subscribers table needs.
//!
//! Shapes: <https://docs.aws.amazon.com/marketplace/latest/userguide/notifications-eventbridge.html>
//! ("Events for agreements", "Events for licenses"). The detail-type carries the receiver's
//! role as a suffix (`License Updated - Manufacturer`, `Purchase Agreement Ended - Proposer`);
//! the suffix is dropped here, so either role's copy is the same event.

use awsmp_contract::ids::{is_valid_account_id, is_valid_license_arn};
use awsmp_contract::reasons;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;

/// The `source` of every AWS Marketplace agreement and license event.
pub const MARKETPLACE_EVENT_SOURCE: &str = "aws.agreement-marketplace";

/// Detail-type (role suffix removed): the buyer has access; metering may start.
pub const LICENSE_UPDATED: &str = "License Updated";
/// Detail-type: the buyer's entitlement ended; the ~1 h final-metering window opens.
pub const LICENSE_DEPROVISIONED: &str = "License Deprovisioned";
/// Detail-type: an agreement was created, renewed or replaced (carries no license ARN).
pub const AGREEMENT_CREATED: &str = "Purchase Agreement Created";
/// Detail-type: an agreement's terms changed.
pub const AGREEMENT_AMENDED: &str = "Purchase Agreement Amended";
/// Detail-type: an agreement was cancelled, expired, terminated, renewed or replaced.
pub const AGREEMENT_ENDED: &str = "Purchase Agreement Ended";

/// Role suffixes AWS appends to the detail-type.
const ROLE_SUFFIXES: [&str; 3] = [" - Manufacturer", " - Proposer", " - Acceptor"];

/// A license, the key of the subscribers and customer-profile tables.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LicenseKey {
    /// Canonical license ARN (`arn:<partition>:license-manager::<account>:license:l-<hex>`).
    pub license_arn: String,
    /// The buyer's account.
    pub customer_aws_account_id: String,
}

/// Which licenses an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The event names its license.
    License(LicenseKey),
    /// The event names only an agreement (and its buyer): every license of the agreement that
    /// the subscribers table's `agreementId-index` holds for that buyer.
    Agreement {
        /// The agreement id.
        agreement_id: String,
        /// The buyer (the event's acceptor).
        customer_aws_account_id: String,
    },
}

/// Agreement metadata a `Purchase Agreement Amended` event carries, as AWS sent it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgreementTerms {
    /// `detail.agreement.startTime`.
    pub start_time: Option<String>,
    /// `detail.agreement.endTime`.
    pub end_time: Option<String>,
}

/// What happened, per license.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `License Updated`: active/active, never reactivating.
    LicenseUpdated {
        /// The license's agreement.
        agreement_id: String,
        /// The product.
        product_code: Option<String>,
    },
    /// `License Deprovisioned`: the flush window opens at the event time.
    LicenseDeprovisioned {
        /// The product.
        product_code: Option<String>,
    },
    /// `Purchase Agreement Ended`: the agreement is inactive; the license is untouched.
    AgreementEnded {
        /// The agreement that ended.
        agreement_id: String,
        /// `detail.agreement.status` (e.g. `CANCELLED`).
        status: Option<String>,
    },
    /// `Purchase Agreement Amended`: metadata only.
    AgreementAmended {
        /// The agreement amended.
        agreement_id: String,
        /// Its new terms.
        terms: AgreementTerms,
    },
}

impl Change {
    /// The detail-type this change came from (role suffix removed), the metrics' `EventType`.
    pub fn event_type(&self) -> &'static str {
        match self {
            Self::LicenseUpdated { .. } => LICENSE_UPDATED,
            Self::LicenseDeprovisioned { .. } => LICENSE_DEPROVISIONED,
            Self::AgreementEnded { .. } => AGREEMENT_ENDED,
            Self::AgreementAmended { .. } => AGREEMENT_AMENDED,
        }
    }
}

/// An event to apply: a change, to which licenses, at which event time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleEvent {
    /// The licenses it is about.
    pub target: Target,
    /// The change.
    pub change: Change,
    /// The event's `time`.
    pub at: DateTime<Utc>,
}

/// The outcome of reading one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Apply it.
    Apply(LifecycleEvent),
    /// Read and deliberately not applied: `Purchase Agreement Created` (no license yet; the
    /// `License Updated` that follows carries it) and detail-types awsmp does not act on.
    Ignore {
        /// The detail-type, role suffix removed.
        event_type: String,
    },
}

/// Why an event cannot be read: it goes to the dead-letter queue with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct MalformedEvent {
    /// A reason code of [`awsmp_contract::reasons`].
    pub reason: &'static str,
    /// What is wrong, for the operator.
    pub detail: String,
}

fn malformed(reason: &'static str, detail: impl Into<String>) -> MalformedEvent {
    MalformedEvent {
        reason,
        detail: detail.into(),
    }
}

/// The detail-type without its role suffix.
pub fn base_detail_type(detail_type: &str) -> &str {
    ROLE_SUFFIXES
        .iter()
        .find_map(|s| detail_type.strip_suffix(s))
        .unwrap_or(detail_type)
}

/// The canonical form of a license ARN from an event, or `None` if it is not one.
///
/// AWS's documented sample event prints it without the `arn:` prefix, with a region and
/// without the `license` resource type (`aws:license-manager:us-east-1:<acct>:l-…`), while
/// `ResolveCustomer` and `BatchMeterUsage` use `arn:aws:license-manager::<acct>:license:l-…`.
/// The subscribers table, the usage rows and the registration must agree on one key, so both
/// spellings become the latter.
///
/// ```
/// use awsmp_lifecycle::domain::event::normalize_license_arn;
/// let canonical = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
/// assert_eq!(normalize_license_arn(canonical).as_deref(), Some(canonical));
/// assert_eq!(
///     normalize_license_arn("aws:license-manager:us-east-1:123456789012:l-0123456789abcdef0123456789abcdef").as_deref(),
///     Some(canonical)
/// );
/// assert_eq!(normalize_license_arn("aws:license-manager:us-east-1:123456789012:l-nothex"), None);
/// ```
pub fn normalize_license_arn(raw: &str) -> Option<String> {
    let with_prefix = if raw.starts_with("arn:") {
        raw.to_owned()
    } else {
        format!("arn:{raw}")
    };
    if is_valid_license_arn(&with_prefix) {
        return Some(with_prefix);
    }
    // arn : partition : license-manager : region : account : l-<hex>
    let parts: Vec<&str> = with_prefix.split(':').collect();
    let [_, partition, service, _, account, id] = parts.as_slice() else {
        return None;
    };
    let canonical = format!("arn:{partition}:{service}::{account}:license:{id}");
    is_valid_license_arn(&canonical).then_some(canonical)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
}

fn required<'a>(v: &'a Value, path: &[&str]) -> Result<&'a str, MalformedEvent> {
    str_at(v, path)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| malformed(reasons::MISSING_EVENT_FIELD, path.join(".")))
}

/// Read one EventBridge event (the SQS message body).
pub fn parse(body: &str) -> Result<Parsed, MalformedEvent> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| malformed(reasons::EVENT_NOT_JSON, e.to_string()))?;
    if !v.is_object() {
        return Err(malformed(reasons::EVENT_NOT_JSON, "not a JSON object"));
    }
    let source = required(&v, &["source"])?;
    if source != MARKETPLACE_EVENT_SOURCE {
        return Err(malformed(reasons::UNEXPECTED_EVENT_SOURCE, source));
    }
    let event_type = base_detail_type(required(&v, &["detail-type"])?);
    if !matches!(
        event_type,
        LICENSE_UPDATED | LICENSE_DEPROVISIONED | AGREEMENT_AMENDED | AGREEMENT_ENDED
    ) {
        return Ok(Parsed::Ignore {
            event_type: event_type.to_owned(),
        });
    }
    let time = required(&v, &["time"])?;
    let at = DateTime::parse_from_rfc3339(time)
        .map_err(|e| malformed(reasons::MALFORMED_EVENT_TIME, format!("{time:?}: {e}")))?
        .with_timezone(&Utc)
        // Stored to the millisecond (`audit_timestamp`): keep no finer time than that.
        .trunc_subsecs(3);
    let detail = v
        .get("detail")
        .ok_or_else(|| malformed(reasons::MISSING_EVENT_FIELD, "detail"))?;
    let account = required(detail, &["acceptor", "accountId"])?;
    if !is_valid_account_id(account) {
        return Err(malformed(reasons::MALFORMED_ACCOUNT_ID, account));
    }
    let agreement_id = required(detail, &["agreement", "id"])?.to_owned();
    let product_code = str_at(detail, &["product", "code"])
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let change = match event_type {
        LICENSE_UPDATED => Change::LicenseUpdated {
            agreement_id: agreement_id.clone(),
            product_code,
        },
        LICENSE_DEPROVISIONED => Change::LicenseDeprovisioned { product_code },
        AGREEMENT_ENDED => Change::AgreementEnded {
            agreement_id: agreement_id.clone(),
            status: str_at(detail, &["agreement", "status"]).map(str::to_owned),
        },
        _ => Change::AgreementAmended {
            agreement_id: agreement_id.clone(),
            terms: AgreementTerms {
                start_time: str_at(detail, &["agreement", "startTime"]).map(str::to_owned),
                end_time: str_at(detail, &["agreement", "endTime"]).map(str::to_owned),
            },
        },
    };
    let target = match str_at(detail, &["license", "arn"]).filter(|s| !s.is_empty()) {
        Some(raw) => Target::License(LicenseKey {
            license_arn: normalize_license_arn(raw)
                .ok_or_else(|| malformed(reasons::MALFORMED_LICENSE_ARN, raw))?,
            customer_aws_account_id: account.to_owned(),
        }),
        None => Target::Agreement {
            agreement_id,
            customer_aws_account_id: account.to_owned(),
        },
    };
    Ok(Parsed::Apply(LifecycleEvent { target, change, at }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_suffixes_are_dropped() {
        assert_eq!(
            base_detail_type("License Updated - Manufacturer"),
            "License Updated"
        );
        assert_eq!(
            base_detail_type("Purchase Agreement Ended - Proposer"),
            "Purchase Agreement Ended"
        );
        assert_eq!(base_detail_type("Something Else"), "Something Else");
    }

    #[test]
    fn arn_forms_that_are_not_license_arns_are_refused() {
        assert_eq!(normalize_license_arn(""), None);
        assert_eq!(normalize_license_arn("arn:aws:s3:::bucket"), None);
        assert_eq!(
            normalize_license_arn(
                "aws:license-manager:us-east-1:12345:l-0123456789abcdef0123456789abcdef"
            ),
            None
        );
    }
}
