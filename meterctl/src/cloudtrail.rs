//! The audit trail of `BatchMeterUsage` calls from CloudTrail's event history
//! (`LookupEvents`), and its in-memory twin ([`MemoryMeteringTrail`]). The adapter pages
//! through every event of the Marketplace Metering event source in the window, 50 a page, at
//! most 2 requests a second, and parses each event ([`event`]).

pub mod event;
mod memory;

pub use memory::MemoryMeteringTrail;

use crate::error::MeterctlError;
use crate::trail::{MeteringTrail, TrailRecord, TrailWindow};
use async_trait::async_trait;
use aws_sdk_cloudtrail::Client;
use aws_sdk_cloudtrail::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_cloudtrail::operation::lookup_events::LookupEventsError;
use aws_sdk_cloudtrail::primitives::DateTime as SdkDateTime;
use aws_sdk_cloudtrail::types::{LookupAttribute, LookupAttributeKey};
use awsmp_aws::retry;
use awsmp_contract::retry::{RetryPolicy, Retryable};
use chrono::{Duration, Utc};
use std::time::Duration as StdDuration;
use tokio::time::Instant;

pub use awsmp_contract::limits::cloudtrail::{
    EVENT_HISTORY_DAYS, LOOKUP_EVENTS_MAX_RESULTS, LOOKUP_EVENTS_PER_SECOND,
};

/// Retries of one `LookupEvents` page. The 2 requests/s limit is shared by every caller in
/// the account and region (the console, another operator, a previous `meterctl` run), so the
/// pacer alone cannot rule out `ThrottlingException`: a throttled or failed page is asked
/// again after a full-jitter delay, the same page token each time.
const LOOKUP_RETRY: RetryPolicy =
    RetryPolicy::new(8, StdDuration::from_millis(500), StdDuration::from_secs(8));

/// A failed `LookupEvents` call, retried when throttled, a 5xx or a transport failure.
#[derive(Debug)]
struct LookupFailure(SdkError<LookupEventsError>);

impl Retryable for LookupFailure {
    fn is_retryable(&self) -> bool {
        match &self.0 {
            SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => true,
            SdkError::ResponseError(_) => true,
            SdkError::ServiceError(e) => {
                e.raw().status().is_server_error()
                    || matches!(
                        e.err().code(),
                        Some("ThrottlingException" | "Throttling" | "ServiceUnavailable")
                    )
            }
            _ => false,
        }
    }
}

/// CloudTrail's event history, read with `LookupEvents`.
#[derive(Debug, Clone)]
pub struct CloudTrailMeteringTrail {
    client: Client,
}

impl CloudTrailMeteringTrail {
    /// Over `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// Spaces calls at least `1 / per_second` apart.
#[derive(Debug)]
pub struct Pacer {
    gap: StdDuration,
    next: std::sync::Mutex<Option<Instant>>,
}

impl Pacer {
    /// At most `per_second` calls a second.
    pub fn new(per_second: u32) -> Self {
        Self {
            gap: StdDuration::from_secs(1) / per_second.max(1),
            next: std::sync::Mutex::new(None),
        }
    }

    /// Wait for the next call's turn.
    pub async fn ready(&self) {
        let turn = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let turn = next.map_or(now, |at| at.max(now));
            *next = Some(turn + self.gap);
            turn
        };
        tokio::time::sleep_until(turn).await;
    }
}

fn sdk_time(t: chrono::DateTime<Utc>) -> SdkDateTime {
    SdkDateTime::from_millis(t.timestamp_millis())
}

#[async_trait]
impl MeteringTrail for CloudTrailMeteringTrail {
    async fn batch_meter_usage_records(
        &self,
        window: TrailWindow,
    ) -> Result<Vec<TrailRecord>, MeterctlError> {
        let oldest = Utc::now() - Duration::days(EVENT_HISTORY_DAYS);
        let start = window.start.max(oldest);
        let attribute = LookupAttribute::builder()
            .attribute_key(LookupAttributeKey::EventSource)
            .attribute_value(event::METERING_EVENT_SOURCE)
            .build()
            .map_err(|e| MeterctlError::Lookup(Box::new(e)))?;
        let pacer = Pacer::new(LOOKUP_EVENTS_PER_SECOND);
        let mut token: Option<String> = None;
        let mut out = Vec::new();
        loop {
            let page = retry(&LOOKUP_RETRY, || {
                let call = self
                    .client
                    .lookup_events()
                    .lookup_attributes(attribute.clone())
                    .start_time(sdk_time(start))
                    .end_time(sdk_time(window.end))
                    .max_results(LOOKUP_EVENTS_MAX_RESULTS)
                    .set_next_token(token.clone());
                let pacer = &pacer;
                async move {
                    pacer.ready().await;
                    call.send().await.map_err(LookupFailure)
                }
            })
            .await
            .map_err(|e| MeterctlError::Lookup(Box::new(e.0)))?;
            for e in page.events() {
                if e.event_name() != Some(event::BATCH_METER_USAGE_EVENT) {
                    continue;
                }
                if let Some(json) = e.cloud_trail_event() {
                    out.extend(event::parse_event(json)?);
                }
            }
            match page.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Ok(out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_pacer_keeps_two_calls_a_second() {
        let p = Pacer::new(LOOKUP_EVENTS_PER_SECOND);
        let t0 = Instant::now();
        for _ in 0..5 {
            p.ready().await;
        }
        // Five calls: the first at once, four gaps of 500 ms.
        assert_eq!(Instant::now() - t0, StdDuration::from_millis(2000));
    }
}
