//! [`SubscriberStore`] over the subscribers table: each transition of
//! [`crate::domain::state`] as one or more conditional `UpdateItem`s, so concurrent and
//! reordered events converge as the pure functions do.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::dynamodb::is_conditional_failure;
use awsmp_contract::attrs::{
    CREATED_AT, CUSTOMER_AWS_ACCOUNT_ID, LICENSE_ARN, UPDATED_AT, audit_timestamp,
};
use awsmp_contract::subscribers as s;
use awsmp_contract::subscribers::DEPROVISIONING_INDEX;
use awsmp_contract::subscribers::DEPROVISIONING_PENDING_VALUE as FLAG_VALUE;
use chrono::{DateTime, Utc};

use super::{ddb_err, key_item, s_val};
use crate::domain::event::{Change, LicenseKey};
use crate::domain::state::{DEPROVISIONING_WINDOW, Outcome, Subscriber};
use crate::error::Result;
use crate::ports::SubscriberStore;

mod read;

/// The subscribers table.
#[derive(Debug, Clone)]
pub struct DynamoDbSubscriberStore {
    client: Client,
    table: String,
}

/// One `UpdateItem`: its expression parts and values.
#[derive(Default)]
struct Update {
    set: Vec<String>,
    remove: Vec<&'static str>,
    add: Vec<String>,
    condition: Option<String>,
    values: HashMap<String, Av>,
}

impl Update {
    fn audited(now: DateTime<Utc>) -> Self {
        let mut u = Self::default();
        u.set(&format!("{CREATED_AT} = if_not_exists({CREATED_AT}, :now)"));
        u.set(&format!("{UPDATED_AT} = :now"));
        u.val(":now", audit_timestamp(now));
        u
    }
    fn set(&mut self, clause: &str) -> &mut Self {
        self.set.push(clause.to_owned());
        self
    }
    fn val(&mut self, name: &str, value: impl Into<String>) -> &mut Self {
        self.values.insert(name.to_owned(), s_val(value));
        self
    }
    fn when(&mut self, condition: &str) -> &mut Self {
        self.condition = Some(condition.to_owned());
        self
    }
    fn product_if_unset(&mut self, product_code: Option<&String>) -> &mut Self {
        if let Some(pc) = product_code {
            self.set(&format!("{0} = if_not_exists({0}, :pc)", s::PRODUCT_CODE));
            self.val(":pc", pc.clone());
        }
        self
    }
    fn expression(&self) -> String {
        let mut e = format!("SET {}", self.set.join(", "));
        if !self.remove.is_empty() {
            e.push_str(&format!(" REMOVE {}", self.remove.join(", ")));
        }
        if !self.add.is_empty() {
            e.push_str(&format!(" ADD {}", self.add.join(", ")));
        }
        e
    }
}

impl DynamoDbSubscriberStore {
    /// Over the subscribers `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// Run `u` on `key`; false when its condition failed.
    async fn update(&self, key: &LicenseKey, u: Update) -> Result<bool> {
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item(key)))
            .update_expression(u.expression())
            .set_expression_attribute_values(Some(u.values.clone()));
        if let Some(c) = &u.condition {
            req = req.condition_expression(c);
        }
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if u.condition.is_some() && is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }

    async fn license_updated(
        &self,
        key: &LicenseKey,
        agreement_id: &str,
        product_code: Option<&String>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let base = |now| {
            let mut u = Update::audited(now);
            u.set(&format!(
                "{0} = if_not_exists({0}, :active)",
                s::SUBSCRIPTION_STATUS
            ))
            .val(":active", s::ACTIVE)
            .product_if_unset(product_code);
            u
        };
        // A newer event of another agreement: the license moves to it, agreement state anew.
        let mut moved = base(now);
        moved
            .set(&format!("{} = :ag", s::AGREEMENT_ID))
            .set(&format!("{} = :active", s::AGREEMENT_STATUS))
            .set(&format!("{} = :t", s::LICENSE_EVENT_AT))
            .val(":ag", agreement_id)
            .val(":t", audit_timestamp(at))
            .when(&format!(
                "(attribute_not_exists({at}) OR {at} < :t OR ({at} = :t AND {ag} < :ag)) \
                 AND (attribute_not_exists({ag}) OR {ag} <> :ag)",
                at = s::LICENSE_EVENT_AT,
                ag = s::AGREEMENT_ID
            ));
        moved.remove = vec![
            s::AGREEMENT_END_STATUS,
            s::AGREEMENT_START_TIME,
            s::AGREEMENT_END_TIME,
            s::AGREEMENT_AMENDED_AT,
        ];
        if self.update(key, moved).await? {
            return Ok(());
        }
        // A newer event of the same agreement: only its time moves.
        let mut newer = base(now);
        newer
            .set(&format!(
                "{0} = if_not_exists({0}, :active)",
                s::AGREEMENT_STATUS
            ))
            .set(&format!("{} = :t", s::LICENSE_EVENT_AT))
            .val(":ag", agreement_id)
            .val(":t", audit_timestamp(at))
            .when(&format!(
                "{ag} = :ag AND (attribute_not_exists({at}) OR {at} < :t)",
                at = s::LICENSE_EVENT_AT,
                ag = s::AGREEMENT_ID
            ));
        if self.update(key, newer).await? {
            return Ok(());
        }
        // An older or repeated event: only what is still unset.
        let mut older = base(now);
        older.set(&format!(
            "{0} = if_not_exists({0}, :active)",
            s::AGREEMENT_STATUS
        ));
        self.update(key, older).await.map(drop)
    }

    async fn license_deprovisioned(
        &self,
        key: &LicenseKey,
        product_code: Option<&String>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut u = Update::audited(now);
        u.set(&format!("{} = :dep", s::SUBSCRIPTION_STATUS))
            .set(&format!("{} = :flag", s::DEPROVISIONING_PENDING_FLAG))
            .set(&format!("{} = :exp", s::DEPROVISIONING_EXPIRY))
            .val(":dep", s::DEPROVISIONING)
            .val(":inactive", s::INACTIVE)
            .val(":flag", FLAG_VALUE)
            .val(":exp", audit_timestamp(at + DEPROVISIONING_WINDOW))
            .product_if_unset(product_code)
            .when(&format!(
                "(attribute_not_exists({st}) OR {st} <> :inactive) \
                 AND (attribute_not_exists({exp}) OR {exp} > :exp)",
                st = s::SUBSCRIPTION_STATUS,
                exp = s::DEPROVISIONING_EXPIRY
            ));
        // A failed condition is the row already past this event: nothing to do.
        self.update(key, u).await.map(drop)
    }

    async fn agreement_ended(
        &self,
        key: &LicenseKey,
        agreement_id: &str,
        status: Option<&String>,
        now: DateTime<Utc>,
    ) -> Result<Outcome> {
        let mut u = Update::default();
        u.set(&format!("{UPDATED_AT} = :now"))
            .val(":now", audit_timestamp(now))
            .set(&format!("{} = :inactive", s::AGREEMENT_STATUS))
            .val(":inactive", s::INACTIVE)
            .val(":ag", agreement_id)
            .when(&format!("{} = :ag", s::AGREEMENT_ID));
        if let Some(st) = status {
            u.set(&format!("{} = :st", s::AGREEMENT_END_STATUS))
                .val(":st", st.clone());
        }
        Ok(match self.update(key, u).await? {
            true => Outcome::Applied,
            false => Outcome::OtherAgreement,
        })
    }

    async fn agreement_amended(
        &self,
        key: &LicenseKey,
        agreement_id: &str,
        terms: &crate::domain::event::AgreementTerms,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Outcome> {
        let mut u = Update::default();
        u.set(&format!("{UPDATED_AT} = :now"))
            .val(":now", audit_timestamp(now))
            .set(&format!("{} = :t", s::AGREEMENT_AMENDED_AT))
            .val(":t", audit_timestamp(at))
            .val(":ag", agreement_id)
            .when(&format!(
                "{ag} = :ag AND (attribute_not_exists({am}) OR {am} < :t)",
                ag = s::AGREEMENT_ID,
                am = s::AGREEMENT_AMENDED_AT
            ));
        for (attr, value, name) in [
            (s::AGREEMENT_START_TIME, &terms.start_time, ":start"),
            (s::AGREEMENT_END_TIME, &terms.end_time, ":end"),
        ] {
            match value {
                Some(v) => {
                    u.set(&format!("{attr} = {name}")).val(name, v.clone());
                }
                None => u.remove.push(attr),
            }
        }
        if self.update(key, u).await? {
            return Ok(Outcome::Applied);
        }
        // Either an older amendment (applied already, in effect) or another agreement's row.
        let row = self.get(key).await?;
        Ok(match row.and_then(|r| r.agreement_id) {
            Some(a) if a == agreement_id => Outcome::Applied,
            _ => Outcome::OtherAgreement,
        })
    }
}

#[async_trait]
impl SubscriberStore for DynamoDbSubscriberStore {
    async fn apply(&self, key: &LicenseKey, change: &Change, at: DateTime<Utc>) -> Result<Outcome> {
        let now = Utc::now();
        match change {
            Change::LicenseUpdated {
                agreement_id,
                product_code,
            } => self
                .license_updated(key, agreement_id, product_code.as_ref(), at, now)
                .await
                .map(|()| Outcome::Applied),
            Change::LicenseDeprovisioned { product_code } => self
                .license_deprovisioned(key, product_code.as_ref(), at, now)
                .await
                .map(|()| Outcome::Applied),
            Change::AgreementEnded {
                agreement_id,
                status,
            } => {
                self.agreement_ended(key, agreement_id, status.as_ref(), now)
                    .await
            }
            Change::AgreementAmended {
                agreement_id,
                terms,
            } => {
                self.agreement_amended(key, agreement_id, terms, at, now)
                    .await
            }
        }
    }

    async fn licenses_of_agreement(&self, agreement_id: &str) -> Result<Vec<LicenseKey>> {
        self.query_keys(
            s::AGREEMENT_INDEX,
            &format!("{} = :ag", s::AGREEMENT_ID),
            HashMap::from([(":ag".to_owned(), s_val(agreement_id))]),
        )
        .await
        .map(|v| v.into_iter().map(|(k, _)| k).collect())
    }

    async fn get(&self, key: &LicenseKey) -> Result<Option<Subscriber>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb_err("GetItem", &self.table, e))?;
        out.item
            .map(|item| read::subscriber(&self.table, &item))
            .transpose()
    }

    async fn expired_deprovisioning(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<(LicenseKey, DateTime<Utc>)>> {
        let rows = self
            .query_keys(
                DEPROVISIONING_INDEX,
                &format!(
                    "{} = :f AND {} <= :now",
                    s::DEPROVISIONING_PENDING_FLAG,
                    s::DEPROVISIONING_EXPIRY
                ),
                HashMap::from([
                    (":f".to_owned(), s_val(FLAG_VALUE)),
                    (":now".to_owned(), s_val(audit_timestamp(now))),
                ]),
            )
            .await?;
        rows.into_iter()
            .map(|(k, item)| {
                read::time(&self.table, &item, s::DEPROVISIONING_EXPIRY)?
                    .map(|e| (k, e))
                    .ok_or_else(|| read::malformed(&self.table, "index entry without its expiry"))
            })
            .collect()
    }

    async fn finalize(&self, key: &LicenseKey, now: DateTime<Utc>) -> Result<bool> {
        let mut u = Update::default();
        u.set(&format!("{UPDATED_AT} = :now"))
            .set(&format!("{} = :inactive", s::SUBSCRIPTION_STATUS))
            .val(":now", audit_timestamp(now))
            .val(":inactive", s::INACTIVE)
            .val(":f", FLAG_VALUE)
            .when(&format!(
                "{} = :f AND {} <= :now",
                s::DEPROVISIONING_PENDING_FLAG,
                s::DEPROVISIONING_EXPIRY
            ));
        u.remove = vec![s::DEPROVISIONING_PENDING_FLAG, s::DEPROVISIONING_EXPIRY];
        self.update(key, u).await
    }

    async fn record_registration(
        &self,
        key: &LicenseKey,
        product_code: &str,
        region: &str,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut u = Update::audited(now);
        u.product_if_unset(Some(&product_code.to_owned()));
        u.add.push(format!("{} :regions", s::REGISTERED_REGIONS));
        u.values
            .insert(":regions".into(), Av::Ss(vec![region.to_owned()]));
        self.update(key, u).await.map(drop)
    }
}

impl DynamoDbSubscriberStore {
    /// Every page of an index query: each item's key, and the item.
    async fn query_keys(
        &self,
        index: &str,
        condition: &str,
        values: HashMap<String, Av>,
    ) -> Result<Vec<(LicenseKey, HashMap<String, Av>)>> {
        let table = format!("{}/{index}", self.table);
        let items = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(index)
            .key_condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| ddb_err("Query", &table, e))?;
        items
            .into_iter()
            .map(|item| {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
                let (Some(license_arn), Some(account)) =
                    (get(LICENSE_ARN), get(CUSTOMER_AWS_ACCOUNT_ID))
                else {
                    return Err(read::malformed(&self.table, "index entry without its keys"));
                };
                Ok((
                    LicenseKey {
                        license_arn,
                        customer_aws_account_id: account,
                    },
                    item,
                ))
            })
            .collect()
    }
}
