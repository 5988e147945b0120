//! Isolating request-level `BatchMeterUsage` errors by bisection (docs/metering-api.md,
//! "Request-level exceptions", "DisabledApiException").
//!
//! A request-level validation exception fails the whole call, so one poison record would
//! block its co-batched records. [`Bisector`] is a pure state machine the async submitter
//! drives: it hands out calls (sets of record indices), the submitter sends each one (retrying
//! throttling and transport errors itself, with the retry policy of `awsmp-contract`) and reports how it
//! ended; a failed call is split in halves until the poison record stands alone, at most
//! [`MAX_BISECTION_DEPTH`] levels deep.
//!
//! ```
//! use awsmp_pipeline::domain::bisect::{Bisector, CallOutcome, Verdict};
//! let poison = 3;
//! let mut b = Bisector::new(8);
//! while let Some(call) = b.next_call() {
//!     let outcome = if call.indices.contains(&poison) {
//!         CallOutcome::RequestError { exception: "InvalidUsageDimensionException".into() }
//!     } else {
//!         CallOutcome::Responded
//!     };
//!     b.report(call.id, outcome).unwrap();
//! }
//! let result = b.finish();
//! assert_eq!(result.verdicts[poison], Verdict::Poison { exception: "InvalidUsageDimensionException".into() });
//! assert!(result.verdicts.iter().enumerate().all(|(i, v)| i == poison || matches!(v, Verdict::Submitted { .. })));
//! ```

use awsmp_contract::DomainError;
use std::collections::{BTreeMap, VecDeque};

/// Bisection depth bound: ⌈log2 25⌉ = 5 levels isolate any record of a 25-record call, and
/// bound the extra calls a many-failure batch can cost (docs/metering-api.md).
pub const MAX_BISECTION_DEPTH: u32 = 5;

/// Request-level exceptions caused by the *content* of some record: isolate by bisection.
pub const POISON_EXCEPTIONS: [&str; 8] = [
    "InvalidUsageDimensionException",
    "TimestampOutOfBoundsException",
    "InvalidLicenseException",
    "InvalidTagException",
    "InvalidUsageAllocationsException",
    "InvalidProductCodeException",
    "InvalidCustomerIdentifierException",
    "ValidationException",
];

/// `BatchMeterUsage` is not offered in this region: a whole-region failure, never a poison record.
pub const DISABLED_API_EXCEPTION: &str = "DisabledApiException";

/// The errors AWS documents as common to every API whose cause is the caller's credentials or
/// permissions, not a record (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/CommonErrors.html>):
/// every call of the region fails alike, so the run stops instead of bisecting.
pub const WHOLE_REGION_EXCEPTIONS: [&str; 7] = [
    "AccessDeniedException",
    "IncompleteSignature",
    "InvalidAction",
    "InvalidClientTokenId",
    "MissingAuthenticationToken",
    "NotAuthorized",
    "OptInRequired",
];

/// Transient service-side errors: retry the same call with backoff and jitter. The 5xx ones
/// (`InternalServiceErrorException`, `InternalFailure`, `ServiceUnavailable`) may follow a call
/// AWS applied; throttling never does.
pub const RETRYABLE_EXCEPTIONS: [&str; 4] = [
    "ThrottlingException",
    "InternalServiceErrorException",
    "InternalFailure",
    "ServiceUnavailable",
];

/// Throttling: the request was refused before anything was applied
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/CommonErrors.html>,
/// "The request was denied due to request throttling").
pub const THROTTLING_EXCEPTION: &str = "ThrottlingException";

/// What an exception name means for the submitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExceptionClass {
    /// Some record in the call is invalid: bisect.
    Poison,
    /// The API is disabled in this region: stop the run, mark nothing.
    RegionDisabled,
    /// Transient: retry the same call with backoff and full jitter.
    Retryable,
    /// A documented whole-region error ([`WHOLE_REGION_EXCEPTIONS`]: credentials,
    /// permissions): stop the run, mark nothing; records stay pending for the next run and the
    /// error surfaces on the Lambda's alarms.
    Fatal,
    /// An exception the pipeline does not model: isolated by bisection like a poison record,
    /// so one batch cannot halt the region; a record that still fails alone ends `Error` with
    /// the exception's name.
    Unmodelled,
}

/// Classify a `BatchMeterUsage` error by its exception name.
pub fn classify_exception(name: &str) -> ExceptionClass {
    if POISON_EXCEPTIONS.contains(&name) {
        ExceptionClass::Poison
    } else if name == DISABLED_API_EXCEPTION {
        ExceptionClass::RegionDisabled
    } else if RETRYABLE_EXCEPTIONS.contains(&name) {
        ExceptionClass::Retryable
    } else if WHOLE_REGION_EXCEPTIONS.contains(&name) {
        ExceptionClass::Fatal
    } else {
        ExceptionClass::Unmodelled
    }
}

/// True when an answer with exception `name` proves AWS applied nothing of the call: throttling,
/// a request-level validation error (the whole request is refused), `DisabledApiException` and
/// the whole-region errors. A 5xx, an unmodelled exception or no answer at all prove nothing:
/// the call may have been applied (docs/guarantees.md, "Submitter: attempted quantity").
pub fn proves_not_applied(name: &str) -> bool {
    match classify_exception(name) {
        ExceptionClass::Poison | ExceptionClass::RegionDisabled | ExceptionClass::Fatal => true,
        ExceptionClass::Retryable => name == THROTTLING_EXCEPTION,
        ExceptionClass::Unmodelled => false,
    }
}

/// Identifies one call handed out by a [`Bisector`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u32);

/// One call to send: the records at `indices` of the batch the bisector was built for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BisectCall {
    /// Report its outcome under this id.
    pub id: CallId,
    /// Indices into the original batch, ascending.
    pub indices: Vec<usize>,
    /// 0 for the whole batch, +1 per split.
    pub depth: u32,
}

/// How a call ended, after the submitter's own retries of transient errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// AWS answered with `Results` / `UnprocessedRecords`: map them with
    /// [`crate::domain::results`].
    Responded,
    /// A request-level exception, by name.
    RequestError {
        /// The exception name (e.g. `InvalidUsageDimensionException`).
        exception: String,
    },
    /// Retries of a transient error (throttling, internal error, transport) ran out: the
    /// records stay pending for the next run.
    GaveUp,
}

/// Per-record conclusion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Sent in `call`, which got a response: its per-record result decides.
    Submitted {
        /// The call whose response holds this record's result.
        call: CallId,
    },
    /// Still failed alone (or at the depth bound): mark `Error` with `exception` as reason.
    Poison {
        /// The exception name.
        exception: String,
    },
    /// Not sent to completion (region disabled, fatal error, retries exhausted): stays pending.
    NotSubmitted,
}

/// Why a bisector stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    /// `DisabledApiException`.
    RegionDisabled,
    /// A documented whole-region error ([`WHOLE_REGION_EXCEPTIONS`]).
    Fatal {
        /// Its name.
        exception: String,
    },
}

/// Final result of a bisection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BisectResult {
    /// One verdict per record of the batch, by index.
    pub verdicts: Vec<Verdict>,
    /// Set when the run must stop (no further calls this run).
    pub halt: Option<Halt>,
}

/// The bisection state machine for one batch (≤25 records).
#[derive(Debug)]
pub struct Bisector {
    queue: VecDeque<(Vec<usize>, u32)>,
    in_flight: BTreeMap<CallId, (Vec<usize>, u32)>,
    verdicts: Vec<Option<Verdict>>,
    next_id: u32,
    halt: Option<Halt>,
}

impl Bisector {
    /// A bisector for a batch of `batch_len` records; the first call is the whole batch.
    pub fn new(batch_len: usize) -> Self {
        let mut queue = VecDeque::new();
        if batch_len > 0 {
            queue.push_back(((0..batch_len).collect(), 0));
        }
        Self {
            queue,
            in_flight: BTreeMap::new(),
            verdicts: vec![None; batch_len],
            next_id: 0,
            halt: None,
        }
    }

    /// The next call to send, or `None` when nothing is left (or the run halted).
    pub fn next_call(&mut self) -> Option<BisectCall> {
        if self.halt.is_some() {
            return None;
        }
        let (indices, depth) = self.queue.pop_front()?;
        let id = CallId(self.next_id);
        self.next_id += 1;
        self.in_flight.insert(id, (indices.clone(), depth));
        Some(BisectCall { id, indices, depth })
    }

    /// Report how call `id` ended.
    pub fn report(&mut self, id: CallId, outcome: CallOutcome) -> Result<(), DomainError> {
        let (indices, depth) = self.in_flight.remove(&id).ok_or_else(|| {
            DomainError::InvalidBisection(format!("call {} is not in flight", id.0))
        })?;
        match outcome {
            CallOutcome::Responded => self.set_all(&indices, Verdict::Submitted { call: id }),
            CallOutcome::GaveUp => self.set_all(&indices, Verdict::NotSubmitted),
            CallOutcome::RequestError { exception } => match classify_exception(&exception) {
                ExceptionClass::Poison | ExceptionClass::Unmodelled
                    if indices.len() == 1 || depth >= MAX_BISECTION_DEPTH =>
                {
                    self.set_all(&indices, Verdict::Poison { exception })
                }
                ExceptionClass::Poison | ExceptionClass::Unmodelled => {
                    let (left, right) = indices.split_at(indices.len().div_ceil(2));
                    // Depth first, left half first: at most one level of halves waits at a time.
                    self.queue.push_front((right.to_vec(), depth + 1));
                    self.queue.push_front((left.to_vec(), depth + 1));
                }
                ExceptionClass::Retryable => self.set_all(&indices, Verdict::NotSubmitted),
                ExceptionClass::RegionDisabled => {
                    self.set_all(&indices, Verdict::NotSubmitted);
                    self.halt = Some(Halt::RegionDisabled);
                }
                ExceptionClass::Fatal => {
                    self.set_all(&indices, Verdict::NotSubmitted);
                    self.halt = Some(Halt::Fatal { exception });
                }
            },
        }
        Ok(())
    }

    fn set_all(&mut self, indices: &[usize], verdict: Verdict) {
        for &i in indices {
            self.verdicts[i] = Some(verdict.clone());
        }
    }

    /// True when no call is queued or in flight (or the run halted).
    pub fn is_done(&self) -> bool {
        self.halt.is_some() || (self.queue.is_empty() && self.in_flight.is_empty())
    }

    /// Conclude: records never concluded (queued, in flight, halted) are `NotSubmitted`.
    pub fn finish(self) -> BisectResult {
        BisectResult {
            verdicts: self
                .verdicts
                .into_iter()
                .map(|v| v.unwrap_or(Verdict::NotSubmitted))
                .collect(),
            halt: self.halt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        for e in POISON_EXCEPTIONS {
            assert_eq!(classify_exception(e), ExceptionClass::Poison);
        }
        assert_eq!(
            classify_exception("DisabledApiException"),
            ExceptionClass::RegionDisabled
        );
        assert_eq!(
            classify_exception("ThrottlingException"),
            ExceptionClass::Retryable
        );
        assert_eq!(
            classify_exception("InternalServiceErrorException"),
            ExceptionClass::Retryable
        );
        assert_eq!(
            classify_exception("AccessDeniedException"),
            ExceptionClass::Fatal
        );
        assert_eq!(
            classify_exception("SomeNewException"),
            ExceptionClass::Unmodelled
        );
        assert!(proves_not_applied("ThrottlingException"));
        assert!(proves_not_applied("InvalidTagException"));
        assert!(!proves_not_applied("InternalServiceErrorException"));
        assert!(!proves_not_applied("SomeNewException"));
    }

    #[test]
    fn an_unmodelled_exception_is_isolated_not_halting() {
        let odd = 2;
        let mut b = Bisector::new(5);
        while let Some(c) = b.next_call() {
            let outcome = if c.indices.contains(&odd) {
                CallOutcome::RequestError {
                    exception: "SomeNewException".into(),
                }
            } else {
                CallOutcome::Responded
            };
            b.report(c.id, outcome).unwrap();
        }
        let r = b.finish();
        assert_eq!(r.halt, None);
        assert_eq!(
            r.verdicts[odd],
            Verdict::Poison {
                exception: "SomeNewException".into()
            }
        );
        assert!(
            r.verdicts
                .iter()
                .enumerate()
                .all(|(i, v)| i == odd || matches!(v, Verdict::Submitted { .. }))
        );
    }

    #[test]
    fn disabled_api_stops_everything_and_marks_nothing() {
        let mut b = Bisector::new(25);
        let call = b.next_call().unwrap();
        b.report(
            call.id,
            CallOutcome::RequestError {
                exception: DISABLED_API_EXCEPTION.into(),
            },
        )
        .unwrap();
        assert!(b.is_done());
        assert_eq!(b.next_call(), None);
        let r = b.finish();
        assert_eq!(r.halt, Some(Halt::RegionDisabled));
        assert!(r.verdicts.iter().all(|v| *v == Verdict::NotSubmitted));
    }

    #[test]
    fn disabled_api_mid_bisection_leaves_queued_halves_pending() {
        let mut b = Bisector::new(4);
        let c = b.next_call().unwrap();
        b.report(
            c.id,
            CallOutcome::RequestError {
                exception: "InvalidTagException".into(),
            },
        )
        .unwrap();
        let left = b.next_call().unwrap();
        assert_eq!((left.indices.clone(), left.depth), (vec![0, 1], 1));
        b.report(
            left.id,
            CallOutcome::RequestError {
                exception: DISABLED_API_EXCEPTION.into(),
            },
        )
        .unwrap();
        let r = b.finish();
        assert!(r.verdicts.iter().all(|v| *v == Verdict::NotSubmitted));
    }

    #[test]
    fn throttling_given_up_is_not_poison() {
        let mut b = Bisector::new(3);
        let c = b.next_call().unwrap();
        b.report(
            c.id,
            CallOutcome::RequestError {
                exception: "ThrottlingException".into(),
            },
        )
        .unwrap();
        let r = b.finish();
        assert_eq!(r.halt, None);
        assert!(r.verdicts.iter().all(|v| *v == Verdict::NotSubmitted));
        let mut b = Bisector::new(2);
        let c = b.next_call().unwrap();
        b.report(c.id, CallOutcome::GaveUp).unwrap();
        assert!(
            b.finish()
                .verdicts
                .iter()
                .all(|v| *v == Verdict::NotSubmitted)
        );
    }

    #[test]
    fn reports_for_unknown_calls_are_refused() {
        let mut b = Bisector::new(1);
        assert!(b.report(CallId(7), CallOutcome::Responded).is_err());
        let c = b.next_call().unwrap();
        b.report(c.id, CallOutcome::Responded).unwrap();
        assert!(b.report(c.id, CallOutcome::Responded).is_err());
        assert!(Bisector::new(0).is_done());
    }

    #[test]
    fn depth_bound_marks_the_whole_remaining_group() {
        // 40 records exceed what 5 levels can isolate: 40 → 20 → 10 → 5 → 3 → 2 at depth 5.
        let mut b = Bisector::new(40);
        let mut max_depth = 0;
        while let Some(c) = b.next_call() {
            max_depth = max_depth.max(c.depth);
            let outcome = if c.indices.contains(&0) {
                CallOutcome::RequestError {
                    exception: "ValidationException".into(),
                }
            } else {
                CallOutcome::Responded
            };
            b.report(c.id, outcome).unwrap();
        }
        assert_eq!(max_depth, MAX_BISECTION_DEPTH);
        let r = b.finish();
        let poisoned: Vec<usize> = r
            .verdicts
            .iter()
            .enumerate()
            .filter(|(_, v)| matches!(v, Verdict::Poison { .. }))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(poisoned, vec![0, 1]);
    }
}
