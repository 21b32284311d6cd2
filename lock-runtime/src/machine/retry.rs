//! How a waiter paces its attempts while a lock is held.

use std::time::Duration;

/// How a waiter paces its attempts while a lock is held.
///
/// A waiter sleeps until the release notification arrives, or until the holder's
/// remaining lease runs out, or until this backoff passes, whichever is first. The
/// backoff grows from `min_delay`, doubling per attempt up to `max_delay`, and each
/// sleep is drawn uniformly from its upper half (jitter), so waiters that missed a
/// notification do not retry in lockstep. With notifications the backoff is only a
/// safety net; without them (`Locks::new`) it is the polling schedule.
///
/// ```no_run
/// use std::time::Duration;
/// use lockscript::RetryPolicy;
/// let policy = RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    min_delay: Duration,
    max_delay: Duration,
}

impl RetryPolicy {
    /// A policy from `min_delay` up to `max_delay`. Invalid pairs (zero, or min above
    /// max) are reported as [`LockError::InvalidSettings`](crate::LockError::InvalidSettings)
    /// at the first lock call.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let policy = lockscript::RetryPolicy::new(Duration::from_millis(2), Duration::from_secs(1));
    /// ```
    pub fn new(min_delay: Duration, max_delay: Duration) -> Self {
        Self {
            min_delay,
            max_delay,
        }
    }

    /// The first backoff.
    ///
    /// ```no_run
    /// assert_eq!(lockscript::RetryPolicy::default().min_delay().as_millis(), 5);
    /// ```
    pub fn min_delay(&self) -> Duration {
        self.min_delay
    }

    /// The largest backoff.
    ///
    /// ```no_run
    /// assert_eq!(lockscript::RetryPolicy::default().max_delay().as_millis(), 250);
    /// ```
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// How long a waiter sleeps after its `waits`-th refused attempt: the backoff, but
    /// no longer than until the holder's `remaining` lease has ended (when known) or the
    /// time `left` before the caller's deadline.
    pub(crate) fn nap(&self, waits: u32, remaining: Option<Duration>, left: Duration) -> Duration {
        let backoff = self.delay(waits, getrandom::u64().unwrap_or(0));
        remaining
            .map_or(backoff, |r| past_the_lease(r).min(backoff))
            .min(left)
    }

    /// The sleep before attempt `n` (0-based), jittered into the upper half.
    pub(crate) fn delay(&self, attempt: u32, jitter: u64) -> Duration {
        let grown = self
            .min_delay
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay);
        let half = grown / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
        half + Duration::from_nanos(jitter % nanos)
    }
}

/// How long after a `PTTL` of `remaining` the key is surely gone: one millisecond more.
/// The server answers `PTTL` in whole milliseconds and expires a key only once its clock
/// is past the expiry, so a waiter that wakes after exactly `remaining` can arrive within
/// the key's last millisecond and be refused once more (an attempt and a round trip
/// wasted at every expiry).
pub(crate) fn past_the_lease(remaining: Duration) -> Duration {
    remaining + Duration::from_millis(1)
}

/// 5 ms to 250 ms: a missed notification costs at most a quarter second, and a
/// polling waiter sends at most a few commands per second.
impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_millis(250))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_within_bounds() {
        let p = RetryPolicy::new(Duration::from_millis(4), Duration::from_millis(100));
        for attempt in 0..40 {
            for jitter in [0, 1, u64::MAX / 3, u64::MAX] {
                let d = p.delay(attempt, jitter);
                assert!(d <= Duration::from_millis(100), "{d:?}");
                assert!(d >= Duration::from_millis(2), "{d:?}");
            }
        }
        assert!(p.delay(10, 0) >= Duration::from_millis(50));
    }
}
