//! The in-memory twin of CloudTrail's event history: events appended as `CloudTrailEvent`
//! JSON strings, visible once the delivery lag has passed, parsed as the adapter parses them.

use super::event::parse_event;
use crate::error::MeterctlError;
use crate::trail::{MeteringTrail, TrailRecord, TrailWindow};
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use std::sync::Mutex;

/// One stored event: when it was made, when it is delivered, its JSON.
type StoredEvent = (DateTime<Utc>, DateTime<Utc>, String);

/// Events in memory, each with the time it was delivered.
#[derive(Debug, Default)]
pub struct MemoryMeteringTrail {
    events: Mutex<Vec<StoredEvent>>,
    now: Mutex<Option<DateTime<Utc>>>,
}

impl MemoryMeteringTrail {
    /// Record one event (`CloudTrailEvent` JSON) made at `event_time`, delivered `lag` later.
    pub fn record(&self, event_time: DateTime<Utc>, lag: Duration, json: impl Into<String>) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events.push((event_time, event_time + lag, json.into()));
    }

    /// Read as of `now` (default: the real clock).
    pub fn set_now(&self, now: Option<DateTime<Utc>>) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }
}

#[async_trait]
impl MeteringTrail for MemoryMeteringTrail {
    async fn batch_meter_usage_records(
        &self,
        window: TrailWindow,
    ) -> Result<Vec<TrailRecord>, MeterctlError> {
        let now = self
            .now
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or_else(Utc::now);
        let events = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut out = Vec::new();
        for (at, delivered, json) in events {
            if at >= window.start && at <= window.end && delivered <= now {
                out.extend(parse_event(&json)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[tokio::test]
    async fn events_show_after_the_lag_and_inside_the_window_only() {
        let json = std::fs::read_to_string(format!(
            "{}/tests/fixtures/cloudtrail/batch-meter-usage-legacy.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let at = Utc.with_ymd_and_hms(2026, 12, 1, 15, 4, 11).unwrap();
        let trail = MemoryMeteringTrail::default();
        trail.record(at, Duration::minutes(15), json);
        let window = TrailWindow {
            start: at - Duration::hours(1),
            end: at + Duration::hours(1),
        };
        trail.set_now(Some(at + Duration::minutes(10)));
        assert!(
            trail
                .batch_meter_usage_records(window)
                .await
                .unwrap()
                .is_empty()
        );
        trail.set_now(Some(at + Duration::minutes(15)));
        assert_eq!(
            trail.batch_meter_usage_records(window).await.unwrap().len(),
            1
        );
        let before = TrailWindow {
            start: at - Duration::hours(2),
            end: at - Duration::hours(1),
        };
        assert!(
            trail
                .batch_meter_usage_records(before)
                .await
                .unwrap()
                .is_empty()
        );
    }
}
