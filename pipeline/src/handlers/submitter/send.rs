//! One planned `BatchMeterUsage` call: persist the attempt, send it (retrying transient
//! errors under [`CALL_RETRY`] within the run's budget), bisect request-level poison records,
//! and turn every record's verdict into a decision.
//!
//! Every send is preceded by a conditional attempt mark on each of its records, also for a
//! record resent with an attempt already on file: the mark is how the submitter learns that a
//! record it chose at the start of the run was finalized since (expired by a sweep that ran
//! when its hour left the window), and it is what makes expiry's write for a record with a
//! call in flight fail instead of landing (docs/guarantees.md, "Submitter and expiry").
//! A record found finalized is not sent.

use super::{CALL_RETRY, Run};
use crate::domain::batch::{CallKind, SubmitRecord};
use crate::domain::bisect::{
    BisectCall, BisectResult, Bisector, CallOutcome, ExceptionClass, Halt, Verdict,
    classify_exception, proves_not_applied,
};
use crate::domain::results::{
    ApiResponse, Decision, UNPROCESSED_RECORDS, map_response, poison_decision_for,
};
use crate::handlers::STORE_RETRY;
use crate::ports::MeterCallError;
use awsmp_aws::emf::Metric;
use awsmp_aws::retry;
use awsmp_contract::metrics;
use awsmp_contract::retry::Retryable;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

/// Why one send got no response to map.
#[derive(Debug)]
enum SendError {
    /// Throttling, an internal error or no answer at all; retried only while the run's
    /// budget lasts (checked when the send failed).
    Transient {
        /// The budget was not yet spent.
        within_budget: bool,
    },
    /// A request-level exception, by name: not retried, bisection decides.
    Request(String),
}

impl Retryable for SendError {
    fn is_retryable(&self) -> bool {
        matches!(
            self,
            SendError::Transient {
                within_budget: true
            }
        )
    }
}

/// Responses of a bisection's calls, by call id: the records each carried and the answer.
type Responses = BTreeMap<u32, (Vec<usize>, ApiResponse)>;

impl Run<'_> {
    /// Send one planned call, bisecting request-level poison records, and write back every
    /// final outcome. Returns the records left pending by the response (unprocessed), with
    /// their decision, for the caller to resend.
    pub(super) async fn submit_call(
        &mut self,
        kind: &CallKind,
        mut records: Vec<SubmitRecord>,
    ) -> Vec<(SubmitRecord, Decision)> {
        let now = self.svc.clock.now();
        let mut bisector = Bisector::new(records.len());
        let mut responses = Responses::new();
        let mut finalized = BTreeSet::new();
        while let Some(call) = bisector.next_call() {
            let (persisted, gone) = self.persist_attempts(&records, &call, now).await;
            finalized.extend(gone);
            let outcome = if persisted {
                let sent = call.indices.iter().filter(|i| !finalized.contains(i));
                let sent: Vec<usize> = sent.copied().collect();
                self.send(kind, &mut records, &call, sent, &mut responses)
                    .await
            } else {
                CallOutcome::GaveUp
            };
            bisector.report(call.id, outcome).expect("call in flight");
        }
        let result = bisector.finish();
        self.record_halt(&result);
        let (unprocessed, still_pending) = self
            .decide_all(&mut records, &responses, &result, &finalized)
            .await;
        self.retract_attempts(&still_pending).await;
        unprocessed
    }

    /// Persist what we are about to send, before sending it (every record of the call, at
    /// once). Returns whether every mark could be written (when not, the call is not sent) and
    /// the indices of the records found no longer pending (finalized since the run read them:
    /// they must never be sent).
    async fn persist_attempts(
        &self,
        records: &[SubmitRecord],
        call: &BisectCall,
        now: DateTime<Utc>,
    ) -> (bool, Vec<usize>) {
        let store = &self.svc.aggregated;
        let marks = call.indices.iter().map(|&i| async move {
            let r = &records[i];
            retry(&STORE_RETRY, || {
                store.mark_attempted(&r.group, r.quantity, now)
            })
            .await
            .map(|marked| (i, marked))
            .map_err(|e| (r.group.clone(), e))
        });
        let (mut persisted, mut finalized) = (true, Vec::new());
        for mark in futures::future::join_all(marks).await {
            match mark {
                Ok((_, true)) => {}
                Ok((i, false)) => {
                    let group = &records[i].group;
                    tracing::warn!(%group, "finalized since the run read it (expired?): not sending it");
                    finalized.push(i);
                }
                Err((group, e)) => {
                    tracing::warn!(%group, error = %e, "could not persist the attempt; not sending");
                    persisted = false;
                }
            }
        }
        (persisted, finalized)
    }

    /// Send the records at `sent` (one bisection call's, less those finalized meanwhile), paced
    /// at the quota and retried under [`CALL_RETRY`]. With nothing left to send the call is
    /// answered with nothing.
    async fn send(
        &mut self,
        kind: &CallKind,
        records: &mut [SubmitRecord],
        call: &BisectCall,
        sent: Vec<usize>,
        responses: &mut Responses,
    ) -> CallOutcome {
        if sent.is_empty() {
            responses.insert(call.id.0, (sent, ApiResponse::default()));
            return CallOutcome::Responded;
        }
        let batch: Vec<SubmitRecord> = sent.iter().map(|&i| records[i].clone()).collect();
        let (api, pacer, started, budget) = (self.api, &self.pacer, self.started, self.budget);
        let (batch, depth) = (&batch, call.depth);
        let mut sends = 0u32;
        let maybe_applied = AtomicBool::new(false);
        let result = retry(&CALL_RETRY, || {
            let attempt = sends;
            sends += 1;
            let maybe_applied = &maybe_applied;
            async move {
                pacer.ready().await;
                let result = api.batch_meter_usage(kind, batch).await;
                if result.as_ref().is_err_and(|e| !refused_unapplied(e)) {
                    maybe_applied.store(true, Ordering::Relaxed);
                }
                classify_send(result, attempt, batch.len(), depth, || {
                    started.elapsed() <= budget
                })
            }
        })
        .await;
        self.out.calls += sends as usize;
        // A send that may have been applied (no answer, a 5xx, an unmodelled exception): from
        // then on a DuplicateRecord of this quantity is our own attempt. A throttled or refused
        // send was not applied and makes nothing ours, so a genuine DuplicateRecord after it
        // stays one.
        if maybe_applied.load(Ordering::Relaxed) {
            for &i in &sent {
                records[i].mark_sent();
            }
        }
        match result {
            Ok(response) => {
                responses.insert(call.id.0, (sent, response));
                CallOutcome::Responded
            }
            Err(SendError::Request(exception)) => CallOutcome::RequestError { exception },
            Err(SendError::Transient { .. }) => CallOutcome::GaveUp,
        }
    }

    /// A halted bisection stops the run: `DisabledApiException` (nothing can be billed in
    /// this region) or a fatal exception, each with its metric.
    fn record_halt(&mut self, result: &BisectResult) {
        let exception = match &result.halt {
            Some(Halt::RegionDisabled) => {
                tracing::error!(
                    "BatchMeterUsage is disabled in this region: nothing can be billed here"
                );
                "DisabledApiException".to_owned()
            }
            Some(Halt::Fatal { exception }) => exception.clone(),
            None => return,
        };
        self.svc.metrics.emit(
            Metric::count(metrics::BATCH_METER_USAGE_EXCEPTION)
                .with(metrics::EXCEPTION, exception.clone()),
        );
        self.out.halted = Some(exception);
    }

    /// Decisions per record, from the response of the call that carried it or the poison
    /// verdict: final ones are applied, `UnprocessedRecords` returned for resending, records
    /// never answered left pending, records `finalized` meanwhile (never sent) left as their
    /// finalizer wrote them. Also returns every record left pending, for
    /// [`Run::retract_attempts`] (those marked sent keep their mark).
    async fn decide_all(
        &mut self,
        records: &mut [SubmitRecord],
        responses: &Responses,
        result: &BisectResult,
        finalized: &BTreeSet<usize>,
    ) -> (Vec<(SubmitRecord, Decision)>, Vec<SubmitRecord>) {
        let mut decisions: Vec<Option<Decision>> = vec![None; records.len()];
        for (indices, response) in responses.values() {
            let batch: Vec<SubmitRecord> = indices.iter().map(|&i| records[i].clone()).collect();
            for (&i, d) in indices.iter().zip(map_response(&batch, response)) {
                decisions[i] = Some(d);
            }
        }
        let (mut unprocessed, mut still_pending) = (Vec::new(), Vec::new());
        for (i, verdict) in result.verdicts.iter().enumerate() {
            if finalized.contains(&i) {
                self.out.finalized_meanwhile += 1;
                continue;
            }
            let decision = match verdict {
                Verdict::Submitted { .. } => decisions[i].take(),
                Verdict::Poison { exception } => Some(poison_decision_for(&records[i], exception)),
                Verdict::NotSubmitted => None,
            };
            match decision {
                Some(d @ Decision::StayPending { .. }) => {
                    // Listed in UnprocessedRecords: not applied. Answered otherwise (an
                    // unknown status, absent from Results): it may have been.
                    if !matches!(&d, Decision::StayPending { reason } if reason == UNPROCESSED_RECORDS)
                    {
                        records[i].mark_sent();
                    }
                    still_pending.push(records[i].clone());
                    unprocessed.push((records[i].clone(), d));
                }
                Some(d) => self.apply(&records[i], &d).await,
                None => {
                    still_pending.push(records[i].clone());
                    self.out.left_pending += 1;
                }
            }
        }
        (unprocessed, still_pending)
    }

    /// Take back the attempt marks of records AWS provably did not apply (every send of theirs
    /// in this call was throttled or refused, or they came back unprocessed): a mark that
    /// outlived such a call would make a later `DuplicateRecord` look like our own. A record
    /// whose send may have been applied is marked sent and keeps its mark. The store restores
    /// the earlier attempt only while the mark is still this quantity.
    async fn retract_attempts(&mut self, pending: &[SubmitRecord]) {
        let (store, now) = (&self.svc.aggregated, self.svc.clock.now());
        let retractions = pending
            .iter()
            .filter(|r| r.previous_attempt != Some(r.quantity))
            .map(|r| async move {
                retry(&STORE_RETRY, || {
                    store.retract_attempt(&r.group, r.quantity, r.previous_attempt, now)
                })
                .await
                .map_err(|e| (r.group.clone(), e))
            });
        for retraction in futures::future::join_all(retractions).await {
            if let Err((group, e)) = retraction {
                tracing::error!(%group, error = %e, "could not take back the attempt mark of an unapplied call");
                self.failures.push(e);
            }
        }
    }
}

/// True when a failed send provably applied nothing (see [`proves_not_applied`]).
fn refused_unapplied(e: &MeterCallError) -> bool {
    e.exception_name().is_some_and(|name| {
        proves_not_applied(name)
            || (awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::Submitter5xxProvesUnapplied)
                && classify_exception(name) == ExceptionClass::Retryable)
    })
}

/// What one send's result means for the retry loop: a response, a request-level exception
/// (bisection decides), or a transient failure (retried while `within_budget()`).
fn classify_send(
    result: Result<ApiResponse, MeterCallError>,
    attempt: u32,
    records: usize,
    depth: u32,
    within_budget: impl Fn() -> bool,
) -> Result<ApiResponse, SendError> {
    let e = match result {
        Ok(response) => return Ok(response),
        Err(e) => e,
    };
    match e.exception_name() {
        Some(name) if classify_exception(name) == ExceptionClass::Retryable => {
            tracing::info!(exception = %name, attempt, "BatchMeterUsage transient error; backing off");
        }
        Some(name) => {
            let message = match &e {
                MeterCallError::Exception { message, .. } => message.clone(),
                other => std::error::Error::source(other)
                    .map_or_else(|| other.to_string(), ToString::to_string),
            };
            tracing::warn!(exception = %name, %message, records, depth, "BatchMeterUsage request-level error");
            return Err(SendError::Request(name.to_owned()));
        }
        None => {
            tracing::warn!(error = %e, attempt, "BatchMeterUsage: no response; retrying (a replay is recognised)");
        }
    }
    Err(SendError::Transient {
        within_budget: within_budget(),
    })
}
