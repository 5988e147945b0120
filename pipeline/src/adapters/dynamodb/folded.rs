//! Cleanup's conditional stamp of a folded raw row ([`UsageStore::finalize_folded`]): stamped
//! `Aggregated` only while it holds the quantity that was folded; otherwise read, and stamped
//! with the exact late difference, conditioned on the quantity read (docs/guarantees.md,
//! "Cleanup never stamps what was not billed").
//!
//! [`UsageStore::finalize_folded`]: crate::ports::UsageStore::finalize_folded

use super::errors::ddb_err;
use crate::domain::fold::late_difference;
use crate::error::{PipelineError, Result};
use crate::ports::FoldedFinalize;
use aws_sdk_dynamodb::Client;
use awsmp_aws::dynamodb::{WithUpdate, is_conditional_failure};
use awsmp_aws::dynamodb::{row_from_item, s};
use awsmp_contract::attrs as a;
use awsmp_contract::condition::{Attr, Condition, Value};
use awsmp_contract::keys::RowKey;
use awsmp_contract::reasons::LATE_USAGE;
use awsmp_contract::row::{AttrValue, RawUsageRow, parse_non_negative_integer};
use awsmp_contract::status::RawStatus;
use awsmp_contract::update::Update;
use chrono::{DateTime, Utc};

/// Read-and-stamp rounds when the row keeps changing between our read and our stamp. Only the
/// consumer writes a pending row, one batch per shard at a time, so one round is the norm.
pub const MAX_FOLDED_STAMP_ROUNDS: usize = 5;

/// One folded row to stamp.
pub struct FoldedStamp<'a> {
    pub client: &'a Client,
    pub table: &'a str,
    pub key: &'a RowKey,
    pub folded: u64,
    pub reason: &'a str,
    pub now: DateTime<Utc>,
}

impl FoldedStamp<'_> {
    /// See [`crate::ports::UsageStore::finalize_folded`].
    pub async fn run(&self) -> Result<FoldedFinalize> {
        let expected = AttrValue::n(self.folded);
        if self.stamp_if(Some(&expected), None).await? {
            return Ok(FoldedFinalize::Stamped);
        }
        for _ in 0..MAX_FOLDED_STAMP_ROUNDS {
            let Some(row) = self.read().await? else {
                return Ok(FoldedFinalize::Gone);
            };
            if let Some(quantity) = number(&row, a::LATE_QUANTITY) {
                return Ok(FoldedFinalize::Late {
                    quantity,
                    recorded_now: false,
                });
            }
            let late = late_difference(self.folded, &row).filter(|l| *l > 0);
            if self.stamp_if(row.get(a::QUANTITY), late).await? {
                return Ok(match late {
                    None => FoldedFinalize::Stamped,
                    Some(quantity) => FoldedFinalize::Late {
                        quantity,
                        recorded_now: true,
                    },
                });
            }
        }
        Err(PipelineError::MalformedItem {
            table: self.table.to_owned(),
            detail: format!(
                "{}: still changing after {MAX_FOLDED_STAMP_ROUNDS} read-and-stamp rounds",
                self.key.sort_key
            ),
        })
    }

    /// One conditional stamp; false when the row's quantity is not `expected` (`None`: no
    /// quantity), or it has a late record.
    async fn stamp_if(&self, expected: Option<&AttrValue>, late: Option<u64>) -> Result<bool> {
        let res = self
            .client
            .update_item()
            .table_name(self.table)
            .key(a::LICENSE_ARN, s(&self.key.license_arn))
            .key(a::USAGE_SORT_KEY, s(&self.key.sort_key))
            .with_update(
                &folded_stamp_update(self.reason, self.folded, late, self.now),
                &folded_stamp_condition(expected),
            )
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", self.table, e)),
        }
    }

    async fn read(&self) -> Result<Option<RawUsageRow>> {
        let out = self
            .client
            .get_item()
            .table_name(self.table)
            .key(a::LICENSE_ARN, s(&self.key.license_arn))
            .key(a::USAGE_SORT_KEY, s(&self.key.sort_key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb_err("GetItem", self.table, e))?;
        Ok(out.item.as_ref().map(row_from_item))
    }
}

/// A folded row's stamp condition: the row exists, has no late record, and still holds
/// `expected` as its quantity (`None`: no quantity).
pub fn folded_stamp_condition(expected: Option<&AttrValue>) -> Condition {
    let quantity = match expected {
        Some(v) => Condition::eq(Attr::bare(a::QUANTITY), Value::new(":q", v.clone())),
        None => Condition::not_exists(Attr::bare(a::QUANTITY)),
    };
    Condition::exists(Attr::bare(a::LICENSE_ARN))
        .and(Condition::not_exists(Attr::bare(a::LATE_QUANTITY)))
        .and(quantity)
}

/// A folded row's stamp: `Aggregated` with `reason` (the row stamp's update), and where the
/// row holds more than was folded, the exact late difference: `folded` and `late`, with
/// `LateUsage`.
pub fn folded_stamp_update(
    reason: &str,
    folded: u64,
    late: Option<u64>,
    now: DateTime<Utc>,
) -> Update {
    let update = super::usage::finalize_row_update(Some((RawStatus::Aggregated, reason)), now);
    match late {
        None => update,
        Some(late) => update
            .set(Attr::bare(a::FOLDED_QUANTITY), Value::n(":folded", folded))
            .set(Attr::bare(a::LATE_QUANTITY), Value::n(":late", late))
            .set(Attr::bare(a::LATE_REASON), Value::s(":lr", LATE_USAGE)),
    }
}

fn number(row: &RawUsageRow, name: &str) -> Option<u64> {
    row.get(name)
        .and_then(AttrValue::as_n)
        .and_then(|q| parse_non_negative_integer(q).ok())
}

#[cfg(test)]
mod tests {
    use super::super::{expire_condition, finalize_row_condition};
    use super::*;

    #[test]
    fn each_stamp_condition_renders_as_sent() {
        let r = finalize_row_condition().render();
        assert_eq!(r.expression, "attribute_exists(licenseArn)");
        assert!(r.names.is_empty() && r.values.is_empty());
        let r = expire_condition("2026-11-30T10".parse().unwrap()).render();
        assert_eq!(r.expression, "meteringPending = :hb");
        assert_eq!(r.values[":hb"], AttrValue::s("2026-11-30T10"));
        let r = folded_stamp_condition(Some(&AttrValue::n(12))).render();
        assert_eq!(
            r.expression,
            "attribute_exists(licenseArn) AND attribute_not_exists(lateQuantity) AND quantity = :q"
        );
        assert_eq!(r.values[":q"], AttrValue::n(12));
        assert_eq!(
            folded_stamp_condition(None).render().expression,
            "attribute_exists(licenseArn) AND attribute_not_exists(lateQuantity) AND \
             attribute_not_exists(quantity)"
        );
    }

    #[test]
    fn each_stamp_update_renders_as_sent() {
        use super::super::{expire_update, finalize_row_update};
        let now = "2026-11-30T12:00:09Z".parse().unwrap();
        let stamp = "REMOVE meteringPending SET meteringStatus = :st, meteringStatusReason = :r, \
                     updatedAt = :now, createdAt = if_not_exists(createdAt, :now)";
        let r = finalize_row_update(Some((RawStatus::RejectedClientSide, "why")), now)
            .render_with(&finalize_row_condition());
        assert_eq!(r.expression, stamp);
        assert_eq!(r.condition.as_deref(), Some("attribute_exists(licenseArn)"));
        assert_eq!(
            (&r.values[":st"], &r.values[":r"], &r.values[":now"]),
            (
                &AttrValue::s("RejectedClientSide"),
                &AttrValue::s("why"),
                &AttrValue::s("2026-11-30T12:00:09.000Z")
            )
        );
        assert_eq!(
            finalize_row_update(None, now).render().expression,
            "REMOVE meteringPending SET updatedAt = :now, createdAt = if_not_exists(createdAt, :now)"
        );
        let r = expire_update("late", now)
            .render_with(&expire_condition("2026-11-30T10".parse().unwrap()));
        assert_eq!(r.expression, stamp);
        assert_eq!(r.values[":st"], AttrValue::s("AggregationExpired"));
        assert_eq!(r.values.len(), 4, "{:?}", r.values);
        let r = folded_stamp_update("agg", 10, None, now)
            .render_with(&folded_stamp_condition(Some(&AttrValue::n(10))));
        assert_eq!(r.expression, stamp);
        assert_eq!(r.values[":st"], AttrValue::s("Aggregated"));
        let r = folded_stamp_update("agg", 10, Some(2), now)
            .render_with(&folded_stamp_condition(Some(&AttrValue::n(12))));
        assert_eq!(
            r.expression,
            format!("{stamp}, foldedQuantity = :folded, lateQuantity = :late, lateReason = :lr")
        );
        assert_eq!(
            (
                &r.values[":q"],
                &r.values[":folded"],
                &r.values[":late"],
                &r.values[":lr"]
            ),
            (
                &AttrValue::n(12),
                &AttrValue::n(10),
                &AttrValue::n(2),
                &AttrValue::s(LATE_USAGE)
            )
        );
    }

    #[test]
    fn a_stamp_keeps_the_consumers_created_at_and_a_late_stamp_records_the_difference() {
        let now = "2026-11-30T12:00:09Z".parse().unwrap();
        let mut row = RawUsageRow::from([
            (a::LICENSE_ARN.to_owned(), AttrValue::s("l")),
            (a::QUANTITY.to_owned(), AttrValue::n(12)),
            (
                a::METERING_PENDING.to_owned(),
                AttrValue::s("2026-11-30T10"),
            ),
            (a::CREATED_AT.to_owned(), AttrValue::s("c")),
        ]);
        folded_stamp_update("agg", 10, Some(2), now)
            .apply(&mut row)
            .unwrap();
        assert!(!row.contains_key(a::METERING_PENDING));
        assert_eq!(row[a::CREATED_AT], AttrValue::s("c"));
        assert_eq!(row[a::METERING_STATUS], AttrValue::s("Aggregated"));
        assert_eq!(number(&row, a::LATE_QUANTITY), Some(2));
        assert_eq!(number(&row, a::FOLDED_QUANTITY), Some(10));
    }

    #[test]
    fn a_folded_stamp_holds_only_on_the_quantity_read_and_no_late_record() {
        let row = |extra: &[(&str, AttrValue)]| {
            let mut r = RawUsageRow::from([
                (a::LICENSE_ARN.to_owned(), AttrValue::s("l")),
                (a::QUANTITY.to_owned(), AttrValue::n(12)),
            ]);
            r.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
            r
        };
        let twelve = AttrValue::n(12);
        assert!(folded_stamp_condition(Some(&twelve)).holds_for(Some(&row(&[]))));
        // Numbers compare as numbers: "12.0" is the quantity read.
        let r = row(&[(a::QUANTITY, AttrValue::N("12.0".into()))]);
        assert!(folded_stamp_condition(Some(&twelve)).holds_for(Some(&r)));
        assert!(!folded_stamp_condition(Some(&AttrValue::n(11))).holds_for(Some(&row(&[]))));
        let late = row(&[(a::LATE_QUANTITY, AttrValue::n(1))]);
        assert!(!folded_stamp_condition(Some(&twelve)).holds_for(Some(&late)));
        assert!(!folded_stamp_condition(Some(&twelve)).holds_for(None));
    }
}
