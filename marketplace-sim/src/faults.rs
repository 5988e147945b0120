//! Injected faults (seeded, so a run is reproducible) and the request-rate token bucket.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::error::SimError;

/// Fault settings, the JSON of `POST /_sim/faults` and `--faults`. Absent fields are 0.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Faults {
    /// Probability a BatchMeterUsage call gets ThrottlingException before anything is applied.
    pub throttle_rate: f64,
    /// Probability of a 500 InternalServiceErrorException before anything is applied.
    pub internal_error_rate: f64,
    /// Per record: probability it lands in UnprocessedRecords (not billed).
    pub unprocessed_rate: f64,
    /// Probability the call is applied (billed) and then answered with a 500 — a lost response.
    pub apply_then_fail_rate: f64,
    /// Delay added to every BatchMeterUsage call.
    pub latency_ms: u64,
    /// RNG seed: the same seed and request sequence give the same faults.
    pub seed: u64,
}

impl Faults {
    /// Parse fault JSON and check every rate is a probability.
    pub fn from_json(json: &str) -> Result<Self, SimError> {
        let f: Faults = serde_json::from_str(json).map_err(|source| SimError::Json {
            what: "faults",
            source,
        })?;
        f.validate()?;
        Ok(f)
    }

    /// Every rate must be in 0..=1.
    pub fn validate(&self) -> Result<(), SimError> {
        for (name, rate) in [
            ("throttleRate", self.throttle_rate),
            ("internalErrorRate", self.internal_error_rate),
            ("unprocessedRate", self.unprocessed_rate),
            ("applyThenFailRate", self.apply_then_fail_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(SimError::InvalidFaults(format!(
                    "{name} {rate} is not in 0..=1"
                )));
            }
        }
        Ok(())
    }

    /// The added delay.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms)
    }
}

/// Token bucket: `rate` tokens per second, at most `rate` banked (burst = rate).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate_per_second: u32, now: Instant) -> Self {
        let rate = f64::from(rate_per_second);
        Self {
            rate,
            tokens: rate,
            last: now,
        }
    }

    /// Take one token if there is one at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.last = self.last.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_a_burst_then_refills_at_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, t0);
        assert!((0..10).all(|_| b.try_take(t0)), "burst of 10");
        assert!(!b.try_take(t0), "11th in the same instant is throttled");
        assert!(
            !b.try_take(t0 + Duration::from_millis(50)),
            "half a token after 50 ms"
        );
        assert!(
            b.try_take(t0 + Duration::from_millis(100)),
            "one token after 100 ms"
        );
        assert!(!b.try_take(t0 + Duration::from_millis(100)));
        // A long idle period banks at most `rate` tokens.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| b.try_take(later)).count(), 10);
    }

    #[test]
    fn faults_json_defaults_and_validation() {
        let f = Faults::from_json(r#"{"throttleRate":0.5,"seed":7}"#).expect("valid");
        assert_eq!(f.throttle_rate, 0.5);
        assert_eq!(f.seed, 7);
        assert_eq!(f.unprocessed_rate, 0.0);
        assert_eq!(f.latency(), Duration::ZERO);
        assert!(Faults::from_json(r#"{"throttleRate":1.5}"#).is_err());
        assert!(Faults::from_json(r#"{"unprocessedRate":-0.1}"#).is_err());
        assert!(
            Faults::from_json(r#"{"throttle":0.1}"#).is_err(),
            "typos are rejected"
        );
    }
}
