//! `BatchMeterUsage` in memory: the ledger AWS keeps, and the ways a call can go wrong.

use super::{InjectedFault, lock};
use crate::domain::batch::{CallKind, SubmitRecord};
use crate::domain::bisect::DISABLED_API_EXCEPTION;
use crate::domain::results::{ApiResponse, ApiResult, ApiStatus};
use crate::ports::{MeterCallError, MeteringApi};
use async_trait::async_trait;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::row::Allocation;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

/// A billed record: the first write of its group-hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BilledRecord {
    /// The group-hour (for legacy records the partition is the product code).
    pub group: GroupKey,
    /// Billed quantity.
    pub quantity: u64,
    /// Allocations as submitted.
    pub allocations: Option<Vec<Allocation>>,
    /// The id AWS returned, and returns again for every resubmission.
    pub metering_record_id: String,
}

/// How the next call goes wrong (one fault per call, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFault {
    /// Answered with this exception (`ThrottlingException`, `InvalidTagException`, …);
    /// nothing applied.
    Exception(String),
    /// No answer and nothing applied (a connection that failed before the request arrived).
    NoResponse,
    /// Applied, then the answer was lost (a timeout after AWS billed the records).
    ApplyThenLoseResponse,
    /// Applied, then answered with this exception (a 5xx such as
    /// `InternalServiceErrorException` after AWS billed the records: it proves nothing).
    ApplyThenException(String),
    /// Answered, with the call's last `n` records in `UnprocessedRecords` (not applied).
    Unprocessed(usize),
}

#[derive(Debug, Default)]
struct State {
    ledger: BTreeMap<GroupKey, BilledRecord>,
    script: VecDeque<CallFault>,
    invalid_dimensions: BTreeMap<String, String>,
    unsubscribed: BTreeSet<String>,
    disabled: bool,
    calls: usize,
    next_id: u64,
}

/// `BatchMeterUsage` over an in-memory ledger: the first write per group-hour is billed
/// (`Success`, a new `MeteringRecordId`); resubmitting it with the same quantity and
/// allocations is `Success` with the same id (an identical retry); with anything else it is
/// `DuplicateRecord` and nothing changes
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_BatchMeterUsage.html>).
#[derive(Debug, Default)]
pub struct MemoryMeteringApi {
    state: Mutex<State>,
}

impl MemoryMeteringApi {
    /// Make the next calls fail, one fault per call, after any faults already scripted.
    pub fn script(&self, faults: impl IntoIterator<Item = CallFault>) {
        lock(&self.state).script.extend(faults);
    }

    /// Every call carrying a record of `dimension` fails with `exception` (a request-level
    /// validation error of one record, e.g. `InvalidUsageDimensionException`).
    pub fn reject_dimension(&self, dimension: impl Into<String>, exception: impl Into<String>) {
        lock(&self.state)
            .invalid_dimensions
            .insert(dimension.into(), exception.into());
    }

    /// Records of `account` are answered `CustomerNotSubscribed`.
    pub fn unsubscribe(&self, account: impl Into<String>) {
        lock(&self.state).unsubscribed.insert(account.into());
    }

    /// Every call fails with `DisabledApiException` (a region without the API).
    pub fn disable(&self) {
        lock(&self.state).disabled = true;
    }

    /// Bill `group` as if an earlier submission (ours or someone else's) had.
    pub fn prebill(&self, group: GroupKey, quantity: u64) -> String {
        let mut state = lock(&self.state);
        let id = state.new_id();
        let record = BilledRecord {
            group: group.clone(),
            quantity,
            allocations: None,
            metering_record_id: id.clone(),
        };
        state.ledger.insert(group, record);
        id
    }

    /// Calls received, every outcome included.
    pub fn calls(&self) -> usize {
        lock(&self.state).calls
    }

    /// What was billed, by group-hour.
    pub fn ledger(&self) -> Vec<BilledRecord> {
        lock(&self.state).ledger.values().cloned().collect()
    }
}

impl State {
    fn new_id(&mut self) -> String {
        self.next_id += 1;
        format!("mr-{:06}", self.next_id)
    }

    /// Write one record to the ledger and answer for it.
    fn apply(&mut self, record: &SubmitRecord) -> ApiResult {
        let group = record.group.clone();
        if self.unsubscribed.contains(&group.customer_aws_account_id) {
            return ApiResult {
                group,
                status: ApiStatus::CustomerNotSubscribed,
                metering_record_id: None,
            };
        }
        let (status, id) = match self.ledger.get(&group) {
            Some(b) if b.quantity == record.quantity && b.allocations == record.allocations => {
                (ApiStatus::Success, b.metering_record_id.clone())
            }
            Some(b) => (ApiStatus::DuplicateRecord, b.metering_record_id.clone()),
            None => {
                let id = self.new_id();
                let billed = BilledRecord {
                    group: group.clone(),
                    quantity: record.quantity,
                    allocations: record.allocations.clone(),
                    metering_record_id: id.clone(),
                };
                self.ledger.insert(group.clone(), billed);
                (ApiStatus::Success, id)
            }
        };
        ApiResult {
            group,
            status,
            metering_record_id: Some(id),
        }
    }

    /// The request-level exception this call fails with, if any.
    fn request_error(&self, records: &[SubmitRecord]) -> Option<String> {
        if self.disabled {
            return Some(DISABLED_API_EXCEPTION.to_owned());
        }
        records
            .iter()
            .find_map(|r| self.invalid_dimensions.get(&r.group.dimension).cloned())
    }
}

fn exception(name: String) -> MeterCallError {
    MeterCallError::Exception {
        message: format!("{name} (memory metering API)"),
        name,
        source: None,
    }
}

fn lost_response() -> MeterCallError {
    MeterCallError::Transport(Box::new(InjectedFault {
        operation: "batch_meter_usage",
        code: "TimeoutError",
    }))
}

#[async_trait]
impl MeteringApi for MemoryMeteringApi {
    async fn batch_meter_usage(
        &self,
        _kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        let mut state = lock(&self.state);
        state.calls += 1;
        let fault = state.script.pop_front();
        if let Some(CallFault::Exception(name)) = fault {
            return Err(exception(name));
        }
        if fault == Some(CallFault::NoResponse) {
            return Err(lost_response());
        }
        if let Some(name) = state.request_error(records) {
            return Err(exception(name));
        }
        let processed = match fault {
            Some(CallFault::Unprocessed(n)) => records.len().saturating_sub(n),
            _ => records.len(),
        };
        let mut response = ApiResponse::default();
        for record in &records[..processed] {
            let result = state.apply(record);
            response.results.push(result);
        }
        response.unprocessed = records[processed..]
            .iter()
            .map(|r| r.group.clone())
            .collect();
        match fault {
            Some(CallFault::ApplyThenLoseResponse) => Err(lost_response()),
            Some(CallFault::ApplyThenException(name)) => Err(exception(name)),
            _ => Ok(response),
        }
    }
}
