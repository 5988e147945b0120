//! `BatchMeterUsage` over any [`MeteringApi`] (the real Marketplace adapter on the local stack
//! included), faulty: unlike [`super::FaultyMetering`], which scripts the in-memory API's own
//! faults, this one fails or answers around the call it passes through.

use super::{Failed, Faulty, Injected};
use crate::faults::Fault;
use async_trait::async_trait;
use awsmp_pipeline::adapters::memory::InjectedFault;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::ports::{MeterCallError, MeteringApi};

impl Injected for MeterCallError {
    /// A throttle or a 5xx refused before AWS applied anything reads as the exception AWS
    /// answers; a lost answer or a crash reads as no answer, as the adapter reports a timeout.
    fn injected(operation: &'static str, failed: Failed) -> Self {
        let exception = |name: &str| MeterCallError::Exception {
            name: name.to_owned(),
            message: "injected".to_owned(),
            source: None,
        };
        match failed.fault {
            Some(Fault::Throttle) => exception("ThrottlingException"),
            Some(Fault::FailBeforeApply) => exception(super::INTERNAL_ERROR),
            _ => MeterCallError::Transport(Box::new(InjectedFault {
                operation,
                code: failed.code(),
            })),
        }
    }
}

#[async_trait]
impl<T: MeteringApi + ?Sized> MeteringApi for Faulty<T> {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        let key = records
            .first()
            .map(|r| r.group.to_string())
            .unwrap_or_default();
        let call = self.inner.batch_meter_usage(kind, records);
        self.call("batch_meter_usage", &key, true, call).await
    }
}
