//! The subscription Lambda: one SQS message = one EventBridge event, applied to the
//! subscribers table; per-message failures become `batchItemFailures`.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_aws::emf::{Metric, MetricsSink};
use awsmp_contract::metrics;

use crate::domain::event::{LicenseKey, LifecycleEvent, Parsed, Target, parse};
use crate::domain::registration::mask;
use crate::domain::state::Outcome;
use crate::error::{LifecycleError, Result};
use crate::ports::{DeadLetters, SubscriberStore};

/// What the subscription Lambda needs.
pub struct SubscriptionService<'a> {
    /// The subscribers table.
    pub store: &'a dyn SubscriberStore,
    /// The subscription queue's DLQ (`AWSMP_SUBSCRIPTION_DLQ_URL`); without it malformed
    /// events are failed and reach the DLQ through `maxReceiveCount`, without their reason.
    pub dead_letters: Option<&'a dyn DeadLetters>,
    /// EMF metrics.
    pub metrics: &'a MetricsSink,
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// Applied to this many licenses.
    Applied(usize),
    /// Read and deliberately not applied.
    Ignored(String),
    /// Malformed: sent to the dead-letter queue with this reason.
    DeadLettered(&'static str),
}

async fn targets(svc: &SubscriptionService<'_>, target: &Target) -> Result<Vec<LicenseKey>> {
    match target {
        Target::License(key) => Ok(vec![key.clone()]),
        Target::Agreement {
            agreement_id,
            customer_aws_account_id,
        } => {
            // Every license of the agreement, each handled: never one picked by `Limit=1`.
            let mut keys = svc.store.licenses_of_agreement(agreement_id).await?;
            keys.retain(|k| &k.customer_aws_account_id == customer_aws_account_id);
            Ok(keys)
        }
    }
}

async fn apply(svc: &SubscriptionService<'_>, event: &LifecycleEvent) -> Result<Handled> {
    let event_type = event.change.event_type();
    let keys = targets(svc, &event.target).await?;
    let mut applied = 0;
    for key in &keys {
        if svc.store.apply(key, &event.change, event.at).await? == Outcome::Applied {
            applied += 1;
            tracing::info!(event_type, license = %mask(&key.license_arn), account = %mask(&key.customer_aws_account_id), "lifecycle event applied");
        }
    }
    if applied == 0 {
        // Only agreement changes can miss (a license change always applies).
        let agreement_id = match &event.target {
            Target::Agreement { agreement_id, .. } => agreement_id,
            Target::License(key) => &key.license_arn,
        };
        svc.metrics.emit(
            Metric::count(metrics::SUBSCRIPTION_EVENT_UNRESOLVED)
                .with(metrics::EVENT_TYPE, event_type),
        );
        return Err(LifecycleError::UnresolvedAgreement {
            agreement_id: agreement_id.clone(),
        });
    }
    svc.metrics.emit(
        Metric::count(metrics::SUBSCRIPTION_EVENT_APPLIED).with(metrics::EVENT_TYPE, event_type),
    );
    Ok(Handled::Applied(applied))
}

/// Handle one message body.
pub async fn handle_message(svc: &SubscriptionService<'_>, body: &str) -> Result<Handled> {
    match parse(body) {
        Ok(Parsed::Apply(event)) => apply(svc, &event).await,
        Ok(Parsed::Ignore { event_type }) => {
            tracing::info!(event_type, "lifecycle event ignored");
            svc.metrics.emit(
                Metric::count(metrics::SUBSCRIPTION_EVENT_IGNORED)
                    .with(metrics::EVENT_TYPE, event_type.clone()),
            );
            Ok(Handled::Ignored(event_type))
        }
        Err(bad) => {
            tracing::error!(reason = bad.reason, detail = %bad.detail, "malformed lifecycle event");
            svc.metrics.emit(
                Metric::count(metrics::SUBSCRIPTION_EVENT_REJECTED)
                    .with(metrics::REASON, bad.reason),
            );
            match svc.dead_letters {
                Some(dlq) => {
                    dlq.send(body, bad.reason, &bad.detail).await?;
                    Ok(Handled::DeadLettered(bad.reason))
                }
                None => Err(bad.into()),
            }
        }
    }
}

/// Handle a batch: every message on its own; the failed ones are reported for redelivery.
pub async fn handle_batch(svc: &SubscriptionService<'_>, event: SqsEvent) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
        let outcome = match record.body.as_deref() {
            Some(body) => handle_message(svc, body).await.map(drop),
            None => Err(LifecycleError::MalformedEvent(
                crate::domain::event::MalformedEvent {
                    reason: awsmp_contract::reasons::EVENT_NOT_JSON,
                    detail: "SQS message without a body".into(),
                },
            )),
        };
        if let Err(e) = outcome {
            tracing::warn!(message_id = %id, error = %e, retryable = e.is_retryable(), "message failed; SQS will redeliver it (DLQ after maxReceiveCount)");
            response.add_failure(id);
        }
    }
    response
}
