//! Reading a subscribers-table item back into a [`Subscriber`].

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::attrs::{CUSTOMER_AWS_ACCOUNT_ID, LICENSE_ARN};
use awsmp_contract::subscribers as s;
use chrono::{DateTime, Utc};

use crate::domain::event::{AgreementTerms, LicenseKey};
use crate::domain::state::{AgreementStatus, Amendment, LicenseStatus, Subscriber};
use crate::error::{LifecycleError, Result};

pub(super) fn malformed(table: &str, detail: impl Into<String>) -> LifecycleError {
    LifecycleError::MalformedItem {
        table: table.to_owned(),
        detail: detail.into(),
    }
}

fn string(item: &HashMap<String, Av>, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

pub(super) fn time(
    table: &str,
    item: &HashMap<String, Av>,
    name: &str,
) -> Result<Option<DateTime<Utc>>> {
    string(item, name)
        .map(|v| {
            DateTime::parse_from_rfc3339(&v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| malformed(table, format!("{name} {v:?} is not RFC 3339")))
        })
        .transpose()
}

fn license_status(table: &str, v: Option<String>) -> Result<Option<LicenseStatus>> {
    v.map(|v| match v.as_str() {
        s::ACTIVE => Ok(LicenseStatus::Active),
        s::DEPROVISIONING => Ok(LicenseStatus::Deprovisioning),
        s::INACTIVE => Ok(LicenseStatus::Inactive),
        _ => Err(malformed(
            table,
            format!("{} {v:?}", s::SUBSCRIPTION_STATUS),
        )),
    })
    .transpose()
}

fn agreement_status(table: &str, v: Option<String>) -> Result<Option<AgreementStatus>> {
    v.map(|v| match v.as_str() {
        s::ACTIVE => Ok(AgreementStatus::Active),
        s::INACTIVE => Ok(AgreementStatus::Inactive),
        _ => Err(malformed(table, format!("{} {v:?}", s::AGREEMENT_STATUS))),
    })
    .transpose()
}

/// The row `item` of `table`.
pub(super) fn subscriber(table: &str, item: &HashMap<String, Av>) -> Result<Subscriber> {
    let (Some(license_arn), Some(account)) = (
        string(item, LICENSE_ARN),
        string(item, CUSTOMER_AWS_ACCOUNT_ID),
    ) else {
        return Err(malformed(table, "item without its keys"));
    };
    let amendment = time(table, item, s::AGREEMENT_AMENDED_AT)?.map(|at| Amendment {
        at,
        terms: AgreementTerms {
            start_time: string(item, s::AGREEMENT_START_TIME),
            end_time: string(item, s::AGREEMENT_END_TIME),
        },
    });
    let registered_regions: BTreeSet<String> = item
        .get(s::REGISTERED_REGIONS)
        .and_then(|v| v.as_ss().ok())
        .map(|v| v.iter().cloned().collect())
        .unwrap_or_default();
    Ok(Subscriber {
        key: LicenseKey {
            license_arn,
            customer_aws_account_id: account,
        },
        product_code: string(item, s::PRODUCT_CODE),
        agreement_id: string(item, s::AGREEMENT_ID),
        license_event_at: time(table, item, s::LICENSE_EVENT_AT)?,
        subscription_status: license_status(table, string(item, s::SUBSCRIPTION_STATUS))?,
        agreement_status: agreement_status(table, string(item, s::AGREEMENT_STATUS))?,
        agreement_end_status: string(item, s::AGREEMENT_END_STATUS),
        amendment,
        deprovisioning_expiry: time(table, item, s::DEPROVISIONING_EXPIRY)?,
        registered_regions,
    })
}
