//! Retries with exponential backoff and full jitter, for idempotent calls only.

use std::time::Duration;

/// How often and how long to retry an idempotent call that failed transiently (connection
/// refused or reset, timeout, 502/503/504). Kept short by default: the state tracker polls every
/// few seconds anyway, and a GetTask must answer within the backend's 10 s deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The pause before attempt `attempt + 1` (attempt counts from 1): a random duration up to
    /// `base * 2^(attempt-1)`, capped — full jitter spreads the retries of many connectors.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let cap = exp.min(self.max_delay);
        cap.mul_f64(rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_capped_and_jittered() {
        let p = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        };
        for attempt in 1..10 {
            let d = p.delay(attempt);
            assert!(d <= Duration::from_millis(500), "{d:?}");
        }
        assert!(p.delay(1) <= Duration::from_millis(100));
    }
}
